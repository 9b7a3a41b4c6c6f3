// HttpPost: hands the request to the nsbox-http helper (src/agent/http_wire.h says why) under the caller's deadline and
// cancel flag.
#include "nsbox_config.h"
#include "src/agent/http_client.h"

#include <unistd.h>

#include <fmt/format.h>

#include "sandbox/base/data_dir.h"
#include "src/agent/http_wire.h"
#include "src/runtime/helper_program.h"
#include "src/runtime/subprocess.h"

namespace nsbox::agent {

namespace {

// The helper's answer: the body (at most kMaxResponseBodyBytes, which the helper enforces) after one JSON line of
// status and headers. Only a helper that broke that bound would reach this one.
constexpr uint64_t kMaxAnswerBytes = kMaxResponseBodyBytes + (1 << 20);
// How long past the request's own deadline the helper may take to report that deadline before it is killed.
constexpr std::chrono::seconds kHelperGrace{5};

StatusOr<std::string> FindHelper() {
  return runtime::FindHelperProgram("nsbox-http", NSBOX_HTTP_HELPER_INSTALLED, NSBOX_HTTP_HELPER_BUILD,
                                    "the agent's HTTP helper");
}

HttpResult Failure(TransportError error, std::string message) {
  HttpResult result;
  result.error = error;
  result.error_message = std::move(message);
  return result;
}

}  // namespace

std::vector<std::string> UrlCredentials(std::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return {};
  const size_t start = scheme_end + 3;
  const std::string_view authority = url.substr(start, url.find_first_of("/?#", start) - start);
  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return {};
  const std::string_view userinfo = authority.substr(0, at);
  std::vector<std::string> out = {std::string(userinfo)};
  if (size_t colon = userinfo.find(':'); colon != std::string_view::npos) out.emplace_back(userinfo.substr(colon + 1));
  return out;
}

std::string RedactUrl(std::string_view url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  size_t start = scheme_end + 3;
  std::string_view authority = url.substr(start, url.find_first_of("/?#", start) - start);
  size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  size_t colon = authority.substr(0, at).find(':');
  std::string userinfo =
      colon == std::string_view::npos ? "[redacted]" : std::string(authority.substr(0, colon + 1)) + "[redacted]";
  return std::string(url.substr(0, start)) + userinfo + std::string(url.substr(start + at));
}

HttpResult HttpPost(const HttpRequest& request) {
  const std::string shown_url = RedactUrl(request.url);  // messages only; curl gets the credentials
  auto helper = FindHelper();
  if (!helper.ok()) return Failure(TransportError::kOther, helper.status().message());

  WireRequest wire{request.url, request.headers, request.body, std::nullopt};
  runtime::SubprocessSpec spec;
  if (request.deadline) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(*request.deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Failure(TransportError::kTimeout, fmt::format("POST {}: the deadline passed", shown_url));
    wire.timeout_ms = left.count();
    spec.deadline = *request.deadline + kHelperGrace;
  }
  spec.argv = {*helper, std::to_string(getpid())};
  // curl reads its proxy and CA settings (https_proxy, CURL_CA_BUNDLE …) from the environment, as it did in-process.
  spec.env = runtime::InheritedEnvironment();
  spec.stdin_data = EncodeRequest(wire);
  spec.output_limit_bytes = kMaxAnswerBytes;
  spec.cancel = request.cancel;

  auto outcome = runtime::RunSubprocess(spec);
  if (!outcome.ok())
    return Failure(TransportError::kOther, fmt::format("POST {}: {}", shown_url, outcome.status().message()));
  if (outcome->cancelled) return Failure(TransportError::kCancelled, fmt::format("POST {}: cancelled", shown_url));
  if (outcome->deadline_passed) return Failure(TransportError::kTimeout, fmt::format("POST {}: timed out", shown_url));
  if (outcome->stdout_truncated) {
    return Failure(TransportError::kOther,
                   fmt::format("POST {}: the answer is larger than {} bytes", shown_url, kMaxAnswerBytes));
  }
  if (!outcome->exited || outcome->exit_code != 0) {
    std::string why =
        outcome->exited ? fmt::format("exit status {}", outcome->exit_code) : fmt::format("signal {}", outcome->signal);
    std::string said = outcome->stderr_data.substr(0, outcome->stderr_data.find('\n'));
    return Failure(TransportError::kOther,
                   fmt::format("POST {}: nsbox-http failed ({}){}{}", shown_url, why, said.empty() ? "" : ": ", said));
  }
  auto answer = DecodeResponse(outcome->stdout_data);
  if (!answer.ok())
    return Failure(TransportError::kOther, fmt::format("POST {}: {}", shown_url, answer.status().message()));

  HttpResult result;
  if (answer->error != "none") {
    result.error = answer->error == "connect"   ? TransportError::kConnect
                   : answer->error == "timeout" ? TransportError::kTimeout
                                                : TransportError::kOther;
    result.error_message = fmt::format("POST {}: {}", shown_url, answer->message);
    return result;
  }
  result.response.status = answer->status;
  result.response.headers = std::move(answer->headers);
  result.response.body = std::move(answer->body);
  return result;
}

}  // namespace nsbox::agent
