// ApiError: a refusal the service answers with an HTTP status and {"error": {"code", "message"}} (docs/api.md).
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace nsbox::serve {

struct ApiError : std::runtime_error {
  ApiError(int http_status, std::string error_code, const std::string& message, nlohmann::json extra = {})
      : std::runtime_error(message), status(http_status), code(std::move(error_code)), extra(std::move(extra)) {}
  int status;
  std::string code;
  nlohmann::json extra;  // more keys of the body (429: "capacity")
};

inline ApiError BadRequest(const std::string& message) { return ApiError(400, "bad_request", message); }
inline ApiError NotFound(const std::string& message) { return ApiError(404, "not_found", message); }

}  // namespace nsbox::serve
