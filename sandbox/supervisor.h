// Supervisor: one poll loop over a program's sources (output, stdin, the clock, control messages, pid-fds, events),
// shared by `nsbox run`, session execs and REPL cells; and ControlChannel, the child's InitMessage reports.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/child.h"
#include "sandbox/live_output.h"
#include "sandbox/output_buffer.h"
#include "sandbox/seccomp.h"
#include "sandbox/stdin_feeder.h"
#include "sandbox/verdict.h"

namespace nsbox {

// The read end of a control pipe: InitMessages, each written atomically by the child.
class ControlChannel {
 public:
  ControlChannel() = default;
  explicit ControlChannel(UniqueFd fd);
  int fd() const { return fd_.get(); }
  // Reads what is there without blocking and calls on_message for each whole message; end of file closes the
  // descriptor (poll would report the hang-up again and again).
  void Read(const std::function<void(const InitMessage&)>& on_message);
  // Read, keeping only the first set-up failure (the exit itself is learned otherwise).
  void ReadSetupFailure(std::optional<SetupFailure>* failure);

 private:
  UniqueFd fd_;
  std::string bytes_;
};

// The payload's seccomp listener: it arrives on a socket (SendFd) once the filter is installed, and its notifications
// are answered, and counted, from the loop (or, threaded, from a thread of its own: a REPL outlives its cells).
struct SeccompListener {
  UniqueFd socket;  // until the listener arrives, or end of file (the payload never got that far)
  std::unique_ptr<SeccompNotifier> notifier;
  // Takes the listener if it is there.
  void Receive(int notify_errno, bool threaded);
  // Stops answering; the denied calls and whether they were capped go into *in.
  void Report(VerdictInputs* in);
};

class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;
  // output_limit_bytes: per stream, as the executor says.
  explicit Supervisor(uint64_t output_limit_bytes) : stdout_(output_limit_bytes), stderr_(output_limit_bytes) {}

  // The program's output pipes (read ends; made non-blocking), drained into the buffers every round and at the end.
  // live (may be null): where each stream's head is passed on as it comes (Sandbox::PassOutputOn).
  void AddOutput(UniqueFd* out, UniqueFd* err, LiveOutput* live = nullptr);
  void AddStdin(StdinFeeder* feeder) { feeder_ = feeder; }
  // A source: polled while fd() >= 0; on_poll(revents) runs after every round, in the order sources were added, with
  // 0 when it was not ready (or not polled).
  void AddSource(std::function<int()> fd, short events, std::function<void(short revents)> on_poll);
  void AddSeccompListener(SeccompListener* listener, int notify_errno, bool threaded = false);
  void AddControl(ControlChannel* control, std::function<void(const InitMessage&)> on_message);
  // on_deadline runs once, at `deadline` (unless the sandbox is ending already).
  void SetDeadline(Clock::time_point deadline, std::function<void()> on_deadline);
  // The sandbox is being ended (a time-out, a cancel): from now on the loop wakes every 50 ms.
  void MarkEnding() { ending_ = true; }
  bool ending() const { return ending_; }

  // Polls until done() says so (checked before every round). An error only when poll() fails.
  Status Run(const std::function<bool()>& done);
  // After the end: reads what is left in the output pipes; with wait_rounds > 0, waits up to that many times 20 ms
  // for writers that still hold them (the sandbox's processes are gone, the kernel closes their ends).
  void DrainOutput(int wait_rounds = 0);
  // The kept output. With live output, the rest (cut marker and tail) is passed on here, and *passed_on_errno is the
  // errno of the write that failed there, if one did.
  void TakeOutput(VerdictInputs* in, bool* passed_on = nullptr, int* passed_on_errno = nullptr);

 private:
  struct Source {
    std::function<int()> fd;
    short events;
    std::function<void(short)> on_poll;
  };
  void Drain(UniqueFd* fd, OutputBuffer& sink, int stream);

  OutputBuffer stdout_, stderr_;
  UniqueFd* out_ = nullptr;
  UniqueFd* err_ = nullptr;
  LiveOutput* live_ = nullptr;
  uint64_t live_passed_[2] = {0, 0};  // stdout's and stderr's bytes passed to live_ so far (a prefix of their head)
  StdinFeeder* feeder_ = nullptr;
  std::vector<Source> sources_;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::function<void()> on_deadline_;
  bool ending_ = false;
  // Not zeroed: on some VMs every page first touched costs a fault of about 12 us, and a read fills only what it
  // returns (a quiet program's output touches one page of the 16).
  static constexpr size_t kReadChunk = 1 << 16;
  std::unique_ptr<char[]> buffer_{new char[kReadChunk]};
};

}  // namespace nsbox
