// Kills a vfork-style child that has not called execve by its deadline, for the thread that waits on it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace nsbox {

// A thread that starts a payload vfork-style (StartVforkChild) is suspended in the kernel until the payload calls
// execve; a program of the same session can stop the payload (SIGSTOP) before that and so hold the thread, and its
// exec's deadline, forever. The watchdog's own thread SIGKILLs such a payload once its deadline has passed: a killed
// payload runs no more of its code and releases the shared memory, and the suspended thread goes on.
class VforkWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  VforkWatchdog() = default;
  ~VforkWatchdog();
  VforkWatchdog(const VforkWatchdog&) = delete;
  VforkWatchdog& operator=(const VforkWatchdog&) = delete;

  // Starts the thread now rather than at the first Arm, which is then as quick as the next (a session's first exec).
  // Call where a new thread is welcome (not before a fork that expects one thread).
  void StartThread();

  // Watches the payload whose pid the kernel will store at *pid (0 until it is cloned: StartVforkChild's
  // published_pid) until Disarm(pid). The pid stays the payload's while armed: nobody reaps it before Disarm.
  void Arm(const pid_t* pid, Clock::time_point deadline);
  void Disarm(const pid_t* pid);

 private:
  void Loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<const pid_t*, Clock::time_point> armed_;
  bool stopping_ = false;
  std::thread thread_;  // started by StartThread or the first Arm
};

// Arms a watchdog for one scope.
class VforkWatch {
 public:
  VforkWatch(VforkWatchdog& dog, const pid_t* pid, VforkWatchdog::Clock::time_point deadline) : dog_(dog), pid_(pid) {
    dog_.Arm(pid_, deadline);
  }
  ~VforkWatch() { dog_.Disarm(pid_); }
  VforkWatch(const VforkWatch&) = delete;
  VforkWatch& operator=(const VforkWatch&) = delete;

 private:
  VforkWatchdog& dog_;
  const pid_t* pid_;
};

}  // namespace nsbox
