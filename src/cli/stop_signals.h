// StopSignals: the ending signals of a command that cancels its work on them and still reports a result.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "sandbox/base/unique_fd.h"

namespace nsbox::cli {

// SIGINT, SIGTERM, SIGHUP and SIGQUIT, blocked for the object's life and taken from a signalfd instead: it cancels
// what runs (a compiled run's or --cases' steps through RunSteps' cancel_fd, no later step starting; an exec in a
// session through Request's cancel_fd), and Received() then says which came. A plain run forwards them to its
// program instead (Sandbox::ForwardSignals).
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&signals_);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&signals_, sig);
    ::sigprocmask(SIG_BLOCK, &signals_, &previous_);
    fd_.reset(::signalfd(-1, &signals_, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  ~StopSignals() { ::sigprocmask(SIG_SETMASK, &previous_, nullptr); }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  int fd() const { return fd_.get(); }
  // One of the signals is waiting to be taken (blocked, not yet read from fd()).
  static bool Pending() {
    sigset_t pending;
    if (::sigpending(&pending) != 0) return false;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT})
      if (sigismember(&pending, sig)) return true;
    return false;
  }
  // The signal that stopped the run; 0 when none came.
  int Received() const {
    struct signalfd_siginfo info {};
    if (fd_ && ::read(fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      return static_cast<int>(info.ssi_signo);
    return 0;
  }

 private:
  sigset_t signals_, previous_;
  UniqueFd fd_;
};

}  // namespace nsbox::cli
