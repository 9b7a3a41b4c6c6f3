// HTTP wire: how nsbox hands one POST to its nsbox-http helper and reads the answer back (a JSON line, then raw bytes).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox::agent {

// Why a helper: nsbox is linked statically for its start-up time, and a static program cannot load libcurl (nor
// its ~30 dependent libraries). The agent's requests therefore go through nsbox-http, a small program that links
// Debian's libcurl the ordinary way; `nsbox run` never loads any of it.

// The largest response body nsbox-http takes (after decompression): far above any model reply, and it bounds what a
// confused or hostile server can make nsbox hold in memory and print. A larger body fails the request.
inline constexpr uint64_t kMaxResponseBodyBytes = 32ull << 20;

// What nsbox-http is asked to do. The body follows the JSON line as raw bytes (body_bytes of them).
struct WireRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  std::optional<int64_t> timeout_ms;  // the whole transfer; nullopt: none
};

// What it answers. error is one of none, connect, timeout, other; message is curl's words when error != none.
struct WireResponse {
  std::string error = "none";
  std::string message;
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

std::string EncodeRequest(const WireRequest& request);
StatusOr<WireRequest> DecodeRequest(std::string_view frame);
std::string EncodeResponse(const WireResponse& response);
StatusOr<WireResponse> DecodeResponse(std::string_view frame);

}  // namespace nsbox::agent
