// VforkWatchdog: one thread, woken by the earliest deadline, that SIGKILLs overdue vfork-style payloads.
#include "sandbox/vfork_watchdog.h"

#include <signal.h>

#include <algorithm>

namespace nsbox {

VforkWatchdog::~VforkWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void VforkWatchdog::StartThread() {
  std::lock_guard lock(mutex_);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void VforkWatchdog::Arm(const pid_t* pid, Clock::time_point deadline) {
  {
    std::lock_guard lock(mutex_);
    armed_[pid] = deadline;
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  wake_.notify_all();
}

void VforkWatchdog::Disarm(const pid_t* pid) {
  std::lock_guard lock(mutex_);
  armed_.erase(pid);
}

void VforkWatchdog::Loop() {
  // Past its deadline, a payload is killed, and killed again every few milliseconds until its thread disarms it: its
  // pid may not be stored yet (the helper is still joining the session), and a kill must not be lost.
  constexpr auto kRecheck = std::chrono::milliseconds(20);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (const auto& [pid, deadline] : armed_) {
      if (deadline > now) {
        next = std::min(next, deadline);
        continue;
      }
      const pid_t target = __atomic_load_n(pid, __ATOMIC_ACQUIRE);  // written by the kernel, from another thread
      if (target > 0) ::kill(target, SIGKILL);
      next = std::min(next, now + kRecheck);
    }
    if (next == Clock::time_point::max())
      wake_.wait(lock);
    else
      wake_.wait_until(lock, next);
  }
}

}  // namespace nsbox
