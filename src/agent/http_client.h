// HttpPost: one HTTPS POST (through the nsbox-http helper, which links libcurl) with a deadline and cancellation,
// returning status, headers and body.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox::agent {

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  const std::atomic<bool>* cancel = nullptr;
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// What went wrong below HTTP, so the caller can tell retryable trouble from the rest.
enum class TransportError { kNone, kConnect, kTimeout, kCancelled, kOther };

struct HttpResult {
  TransportError error = TransportError::kNone;
  std::string error_message;  // curl's words, with the URL
  HttpResponse response;
};

HttpResult HttpPost(const HttpRequest& request);

// The URL with the userinfo's secret replaced by [redacted] (user:[redacted]@host, or [redacted]@host for a lone
// token), as API keys are: for logs, transcripts and messages.
std::string RedactUrl(std::string_view url);
// The URL's credentials, to be redacted wherever they might be echoed: its userinfo ("user:password") and the
// password alone; none without userinfo.
std::vector<std::string> UrlCredentials(std::string_view url);

}  // namespace nsbox::agent
