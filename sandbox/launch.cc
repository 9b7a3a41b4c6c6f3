// Launch helpers shared by one-shot sandboxes and sessions.
#include "sandbox/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

namespace nsbox {

StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Errno("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

void NoteLimitsHit(Result* result) {
  if (!result->limits) return;
  const LimitsReport& limits = *result->limits;
  if (limits.oom_kills > 0 && result->status != RunStatus::kOom)
    result->reason += fmt::format("; the OOM killer ended {} process{} at the memory limit of {} bytes", limits.oom_kills,
                                  limits.oom_kills == 1 ? "" : "es", limits.memory_max_bytes);
  if (limits.pids_limit_hit)
    result->reason += fmt::format("; the pids limit of {} was reached (a fork or a new thread failed with EAGAIN)",
                                  limits.pids_max);
  // Without the counters a SIGKILL's cause is not known: it may have been the OOM killer (measurement_errors).
  if (!result->measurement_errors.empty() && result->status == RunStatus::kSignal && result->signal == SIGKILL)
    result->reason += fmt::format("; nsbox could not read the sandbox's cgroup counters ({}), so the OOM killer "
                                  "cannot be ruled out", result->measurement_errors.front());
}

Result SetupError(std::string reason) {
  Result r;
  r.status = RunStatus::kSetupError;
  r.reason = std::move(reason);
  return r;
}

std::string ExitReason(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exited with code {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    if (sig >= SIGRTMIN && sig <= SIGRTMAX) return fmt::format("killed by signal {} (SIGRTMIN+{})", sig, sig - SIGRTMIN);
    const char* name = sigabbrev_np(sig);
    return name ? fmt::format("killed by signal {} (SIG{})", sig, name) : fmt::format("killed by signal {}", sig);
  }
  return fmt::format("ended with wait status {}", wait_status);
}

}  // namespace nsbox
