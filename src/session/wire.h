// The session wire format: one JSON object per line over a unix stream socket, with at most one fd per message.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox::session {

// Sends `message` as one line; `fd` (when >= 0) travels with its first byte (SCM_RIGHTS).
Status SendMessage(int socket, const nlohmann::json& message, int fd = -1);

class MessageReader {
 public:
  explicit MessageReader(int socket, size_t max_bytes = 64 << 20) : socket_(socket), max_bytes_(max_bytes) {}
  // The next message; an error at end-of-file or for a malformed line. Descriptors received go to fds().
  StatusOr<nlohmann::json> Next();
  std::vector<UniqueFd>& fds() { return fds_; }

 private:
  int socket_;
  size_t max_bytes_;
  std::string buffer_;
  std::vector<UniqueFd> fds_;
};

}  // namespace nsbox::session
