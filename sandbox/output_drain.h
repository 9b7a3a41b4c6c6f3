// OutputDrain: keeps reading, and dropping, what processes an ended session exec left running still write to its
// stdout and stderr pipes.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>

#include "sandbox/base/unique_fd.h"

namespace nsbox {

// An exec's output pipes outlive it while a process it started (`server &`) holds them: nothing read them once the
// exec had its answer, so that process's next write failed (EPIPE, or SIGPIPE killed it) or blocked on a full pipe.
// The drain reads them until their last writer is gone, on one thread of its own, started at the first Add. The
// bytes go to /dev/null by splice(2) (no copy through this process); they belong to no exec.
class OutputDrain {
 public:
  // At most this many pipes are drained at once; past it the oldest is closed (its writers get EPIPE, as before).
  static constexpr size_t kMaxPipes = 256;

  OutputDrain() = default;
  ~OutputDrain();
  OutputDrain(const OutputDrain&) = delete;
  OutputDrain& operator=(const OutputDrain&) = delete;

  // Takes the read end of a pipe (non-blocking); an invalid one is ignored.
  void Add(UniqueFd pipe);

 private:
  void Run();

  std::mutex mutex_;
  // Handed over to the thread, which alone owns (polls, closes) the pipes it took: a descriptor closed beside its poll
  // could be reused meanwhile by another exec's pipe, whose output the drain would then take.
  std::deque<UniqueFd> added_;
  UniqueFd wake_;  // an eventfd: a pipe was added, or the drain is stopping
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nsbox
