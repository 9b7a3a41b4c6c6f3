// Launch helpers shared by one-shot sandboxes and sessions.
#include "sandbox/launch.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include <fmt/format.h>

namespace nsbox {

StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Errno("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

pid_t CloneWithPidfd(uint64_t flags, int* pidfd, int cgroup_fd) {
  struct clone_args args = {};
  args.flags = flags | CLONE_PIDFD;
  if (cgroup_fd >= 0) {
    // Born inside its cgroup: no window in which the child runs outside the limits.
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup_fd);
  }
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> dirs;
  std::stringstream in(path);
  std::string dir;
  while (std::getline(in, dir, ':'))
    if (!dir.empty() && dir[0] == '/') dirs.push_back(dir);
  return dirs;
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
    const char* name = sigabbrev_np(WTERMSIG(wait_status));
    return fmt::format("killed by signal {} (SIG{})", WTERMSIG(wait_status), name ? name : "?");
  }
  return fmt::format("ended with wait status {}", wait_status);
}

}  // namespace nsbox
