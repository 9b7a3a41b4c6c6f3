// nsbox-http: performs the one HTTP POST that nsbox's agent hands it on stdin, with Debian's libcurl, and answers on
// stdout.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <curl/curl.h>
#include <fmt/format.h>

#include "src/agent/http_wire.h"

namespace {

using nsbox::agent::WireRequest;
using nsbox::agent::WireResponse;

// Requests are model conversations: far below this, which only bounds a confused or hostile writer.
constexpr size_t kMaxRequestBytes = 256u << 20;

// The body so far; a write past kMaxResponseBodyBytes is refused (curl then ends the transfer with CURLE_WRITE_ERROR).
struct BodySink {
  std::string* body;
  bool too_large = false;
};

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  if (sink->body->size() + size * count > nsbox::agent::kMaxResponseBodyBytes) {
    sink->too_large = true;
    return 0;
  }
  sink->body->append(data, size * count);
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

WireResponse Perform(const WireRequest& request) {
  WireResponse response;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    response.error = "other";
    response.message = "curl_global_init failed";
    return response;
  }
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    response.error = "other";
    response.message = "curl_easy_init failed";
    return response;
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
  BodySink body_sink{&response.body};
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body_sink);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &response.headers);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 30'000L);
  if (request.timeout_ms)
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(*request.timeout_ms, 1)));
  CURLcode code = curl_easy_perform(c);
  if (code != CURLE_OK) {
    response.message = error_buffer[0] ? error_buffer : curl_easy_strerror(code);
    if (body_sink.too_large)
      response.message = fmt::format("the response body is larger than nsbox's limit of {} MiB",
                                     nsbox::agent::kMaxResponseBodyBytes >> 20);
    switch (code) {
      case CURLE_COULDNT_CONNECT:
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
      case CURLE_GOT_NOTHING:
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR: response.error = "connect"; break;
      case CURLE_OPERATION_TIMEDOUT: response.error = "timeout"; break;
      default: response.error = "other"; break;
    }
    response.headers.clear();
    response.body.clear();
    return response;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

// argv[1] is the pid of the nsbox that started it: the helper dies with it, and refuses to run for anyone else.
int main(int argc, char** argv) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || argc != 2 || std::to_string(getppid()) != argv[1]) {
    std::fputs("nsbox-http: run by nsbox only (nsbox-http PARENT-PID, request on stdin)\n", stderr);
    return 2;
  }
  std::string frame;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = read(STDIN_FILENO, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::perror("nsbox-http: read");
      return 2;
    }
    if (n == 0) break;
    frame.append(buffer, static_cast<size_t>(n));
    if (frame.size() > kMaxRequestBytes) {
      std::fprintf(stderr, "nsbox-http: the request is larger than %zu bytes\n", kMaxRequestBytes);
      return 2;
    }
  }
  auto request = nsbox::agent::DecodeRequest(frame);
  if (!request.ok()) {
    std::fprintf(stderr, "nsbox-http: %s\n", request.status().message().c_str());
    return 2;
  }
  return WriteAll(STDOUT_FILENO, nsbox::agent::EncodeResponse(Perform(*request))) ? 0 : 2;
}
