// LiveOutput: passes a sandbox's output on to nsbox's own stdout and stderr while it runs, on a writer thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "sandbox/base/unique_fd.h"

namespace nsbox {

// Chunks are written in the order they were added, across both streams, so that stdout and stderr interleave as the
// program wrote them (as far as the pipes tell). The writes happen on a thread of its own: a reader that is slow or
// stopped (a paused terminal, a full pipe) never stalls the supervision loop, and so never the time limit.
class LiveOutput {
 public:
  // `cancelled` (may be empty) is asked while a pipe or socket takes nothing: true gives up on what is left, and
  // Finish() returns ECANCELED (a reader that never reads must not hold the caller once it has asked to stop).
  LiveOutput(int stdout_fd, int stderr_fd, std::function<bool()> cancelled = {});
  // Hands each chunk (stream 1 or 2) to `sink` instead, on the writer thread; a sink that returns false has failed
  // (EPIPE: its reader is gone).
  using Sink = std::function<bool(int stream, std::string_view data)>;
  explicit LiveOutput(Sink sink);
  ~LiveOutput();  // finishes, as Finish() does
  LiveOutput(const LiveOutput&) = delete;
  LiveOutput& operator=(const LiveOutput&) = delete;
  // stream: 1 or 2. After a write has failed, further output is dropped (the failure is reported once, by Finish).
  void Add(int stream, std::string_view data);
  // Waits until everything added is written. 0, or the errno of the first write that failed.
  int Finish();
  // Readable (an eventfd) once a write has failed: the supervisor polls it to end a run whose reader is gone.
  int failed_fd() const { return failed_.get(); }

 private:
  void WriterLoop();

  const int fds_[3];
  std::function<bool()> cancelled_;
  Sink sink_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<int, std::string>> queue_;
  bool finishing_ = false;
  int error_ = 0;
  UniqueFd failed_;
  std::thread writer_;  // started by the first Add
};

}  // namespace nsbox
