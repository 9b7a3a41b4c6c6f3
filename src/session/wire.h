// The session wire format: one JSON object per line over a unix stream socket, with at most one fd per message.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox::session {

// When a client stops waiting for its supervisor; none: wait as long as it takes (the supervisor's side).
using Deadline = std::optional<std::chrono::steady_clock::time_point>;

// Sends `message` as one line; `fd` (when >= 0) travels with its first byte (SCM_RIGHTS). With a deadline, a peer
// that takes nothing (a stopped supervisor, a full socket) fails the send then, with *timed_out set.
Status SendMessage(int socket, const nlohmann::json& message, int fd = -1, Deadline deadline = std::nullopt,
                   bool* timed_out = nullptr);

// The largest answer an exec may send: its two streams of up to `output_limit` bytes each, every byte escaped as
// \u00XX (six bytes) at worst in the JSON (binary output), and room for the rest (changed files: up to 20000 paths).
inline size_t MaxExecAnswerBytes(uint64_t output_limit) { return 2 * 6 * output_limit + (64 << 20); }

class MessageReader {
 public:
  explicit MessageReader(int socket, size_t max_bytes = 64 << 20, Deadline deadline = std::nullopt)
      : socket_(socket), max_bytes_(max_bytes), deadline_(deadline) {}
  // The next message; an error at end-of-file, for a malformed line, or at the deadline (timed_out() then says so).
  // Descriptors received go to fds().
  StatusOr<nlohmann::json> Next();
  std::vector<UniqueFd>& fds() { return fds_; }
  bool timed_out() const { return timed_out_; }
  bool too_large() const { return too_large_; }  // the last error: a message longer than max_bytes
  // Asked between reads of a message: true gives up on it (a client that has gone away, for one).
  void SetStop(std::function<bool()> stop) { stop_ = std::move(stop); }
  // A descriptor watched beside the socket while a reader with a deadline waits (a signalfd: the caller was asked
  // to stop). Once it is readable, `on_ready` runs, once, and its answer is the deadline from then on.
  void SetInterrupt(int fd, std::function<Deadline()> on_ready) {
    interrupt_fd_ = fd;
    on_interrupt_ = std::move(on_ready);
  }

 private:
  int socket_;
  size_t max_bytes_;
  size_t scanned_ = 0;  // buffer_'s first bytes, known to hold no newline
  std::function<bool()> stop_;
  int interrupt_fd_ = -1;
  std::function<Deadline()> on_interrupt_;
  Deadline deadline_;
  bool timed_out_ = false;
  bool too_large_ = false;
  std::string buffer_;
  std::vector<UniqueFd> fds_;

  int WaitForData();  // WaitUntilReady(socket_, POLLIN, deadline_), watching the interrupt too
};

// Waits until `socket` is ready for `events` (POLLIN, POLLOUT) or the deadline passes: 1 ready (or hung up: the
// next call says how), 0 at the deadline, -1 with errno on error. Without a deadline: 1 at once (the call blocks).
int WaitUntilReady(int socket, short events, Deadline deadline);

}  // namespace nsbox::session
