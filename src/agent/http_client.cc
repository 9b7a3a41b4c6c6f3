// HttpPost: the libcurl easy interface, with a progress callback for cancellation and a header callback for retry-after.
#include "src/agent/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include <fmt/format.h>

namespace nsbox::agent {

namespace {

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  std::string line(data, size * count);
  // A new status line (after a 100 Continue or a redirect) starts a new header set.
  if (line.rfind("HTTP/", 0) == 0) {
    headers->clear();
    return size * count;
  }
  size_t colon = line.find(':');
  if (colon == std::string::npos) return size * count;
  std::string name = line.substr(0, colon);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string value = line.substr(colon + 1);
  value.erase(0, value.find_first_not_of(" \t"));
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.pop_back();
  (*headers)[name] = value;
  return size * count;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* cancel = static_cast<const std::atomic<bool>*>(user);
  return cancel && cancel->load() ? 1 : 0;  // non-zero aborts the transfer
}

}  // namespace

HttpResult HttpPost(const HttpRequest& request) {
  static std::once_flag init_once;
  std::call_once(init_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });

  HttpResult result;
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    result.error = TransportError::kOther;
    result.error_message = "curl_easy_init failed";
    return result;
  }
  struct curl_slist* header_list = nullptr;
  for (const auto& h : request.headers) header_list = curl_slist_append(header_list, h.c_str());
  // No "Expect: 100-continue" round trip for large bodies.
  header_list = curl_slist_append(header_list, "Expect:");
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers_owner(header_list, curl_slist_free_all);

  CURL* c = curl.get();
  char error_buffer[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, header_list);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &result.response.body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &result.response.headers);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM games in a multi-threaded program
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(request.cancel));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 30'000L);
  if (request.deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*request.deadline - std::chrono::steady_clock::now());
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(left.count(), 1)));
  }
  CURLcode code = curl_easy_perform(c);
  if (code != CURLE_OK) {
    std::string detail = error_buffer[0] ? error_buffer : curl_easy_strerror(code);
    result.error_message = fmt::format("POST {}: {}", request.url, detail);
    switch (code) {
      case CURLE_COULDNT_CONNECT:
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
      case CURLE_GOT_NOTHING:
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR: result.error = TransportError::kConnect; break;
      case CURLE_OPERATION_TIMEDOUT: result.error = TransportError::kTimeout; break;
      case CURLE_ABORTED_BY_CALLBACK: result.error = TransportError::kCancelled; break;
      default: result.error = TransportError::kOther; break;
    }
    return result;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &result.response.status);
  return result;
}

}  // namespace nsbox::agent
