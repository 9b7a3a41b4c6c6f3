// HTTP wire: the frames between nsbox and nsbox-http: one JSON line of metadata, then the body's bytes.
#include "src/agent/http_wire.h"
#include "sandbox/base/bounded_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace nsbox::agent {

namespace {

using nlohmann::json;

// Header lines and curl's messages may hold any bytes: invalid UTF-8 is replaced rather than thrown on.
std::string Frame(const json& meta, const std::string& body) {
  std::string frame = meta.dump(-1, ' ', false, json::error_handler_t::replace);
  frame += '\n';
  frame += body;
  return frame;
}

// Splits a frame into its parsed JSON line and its body, checking the body's announced length.
StatusOr<std::pair<json, std::string>> Unframe(std::string_view frame, std::string_view what) {
  size_t newline = frame.find('\n');
  if (newline == std::string_view::npos) return Status::Error(fmt::format("{}: no header line", what));
  json meta = ParseBoundedJsonOrDiscarded(frame.substr(0, newline));
  if (!meta.is_object()) return Status::Error(fmt::format("{}: the header line is not a JSON object", what));
  std::string_view body = frame.substr(newline + 1);
  if (!meta.contains("body_bytes") || !meta["body_bytes"].is_number_unsigned() ||
      meta["body_bytes"].get<uint64_t>() != body.size()) {
    return Status::Error(fmt::format("{}: body_bytes does not match the {} bytes that follow", what, body.size()));
  }
  return std::pair<json, std::string>{std::move(meta), std::string(body)};
}

}  // namespace

std::string EncodeRequest(const WireRequest& request) {
  json meta = {{"url", request.url}, {"headers", request.headers}, {"body_bytes", request.body.size()}};
  if (request.timeout_ms) meta["timeout_ms"] = *request.timeout_ms;
  return Frame(meta, request.body);
}

StatusOr<WireRequest> DecodeRequest(std::string_view frame) {
  auto parts = Unframe(frame, "request");
  if (!parts.ok()) return parts.status();
  auto& [meta, body] = *parts;
  WireRequest request;
  try {
    request.url = meta.at("url").get<std::string>();
    request.headers = meta.at("headers").get<std::vector<std::string>>();
    if (meta.contains("timeout_ms")) request.timeout_ms = meta["timeout_ms"].get<int64_t>();
  } catch (const json::exception& e) {
    return Status::Error(fmt::format("request: {}", e.what()));
  }
  request.body = std::move(body);
  return request;
}

std::string EncodeResponse(const WireResponse& response) {
  json meta = {{"error", response.error}, {"message", response.message}, {"status", response.status},
               {"headers", response.headers}, {"body_bytes", response.body.size()}};
  return Frame(meta, response.body);
}

StatusOr<WireResponse> DecodeResponse(std::string_view frame) {
  auto parts = Unframe(frame, "nsbox-http's answer");
  if (!parts.ok()) return parts.status();
  auto& [meta, body] = *parts;
  WireResponse response;
  try {
    response.error = meta.at("error").get<std::string>();
    response.message = meta.at("message").get<std::string>();
    response.status = meta.at("status").get<long>();
    response.headers = meta.at("headers").get<std::map<std::string, std::string>>();
  } catch (const json::exception& e) {
    return Status::Error(fmt::format("nsbox-http's answer: {}", e.what()));
  }
  if (response.error != "none" && response.error != "connect" && response.error != "timeout" &&
      response.error != "other") {
    return Status::Error(fmt::format("nsbox-http's answer: unknown error kind '{}'", response.error));
  }
  response.body = std::move(body);
  return response;
}

}  // namespace nsbox::agent
