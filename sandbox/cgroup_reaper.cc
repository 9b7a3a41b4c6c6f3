// The cgroup reaper: a forked process that carries out nsbox's last cleanup plan if nsbox dies before it does.
#include "sandbox/cgroup_reaper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "sandbox/base/clone.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup_kill.h"

namespace nsbox {
namespace cgroup_internal {
namespace {

// The reaper's copy of its plan: NUL-separated fields in one buffer, as Arm sends them (see EncodePlan).
struct ArmedPlan {
  static constexpr size_t kMaxBytes = 16 << 10;
  static constexpr int kMaxDirs = 16;
  char buffer[kMaxBytes];
  const char* kill_file = nullptr;
  const char* procs_file = nullptr;
  const char* freezer_state_file = nullptr;
  const char* group_dirs[kMaxDirs] = {};
  int group_count = 0;
  const char* subtree_dirs[kMaxDirs] = {};
  int subtree_count = 0;
  bool armed = false;
};

// "A" kill_file NUL procs_file NUL freezer_state NUL, then "G" dir NUL for each group dir and "S" dir NUL for each
// subtree dir.
std::string EncodePlan(const ReaperPlan& plan) {
  std::string message = "A";
  for (const std::string* field : {&plan.kill_file, &plan.procs_file, &plan.freezer_state_file}) {
    message += *field;
    message += '\0';
  }
  for (const std::string& dir : plan.group_dirs) message += "G" + dir + '\0';
  for (const std::string& dir : plan.subtree_dirs) message += "S" + dir + '\0';
  return message;
}

// Parses a message of `size` bytes already in plan->buffer. Async-signal-safe.
void DecodePlan(ArmedPlan* plan, size_t size) {
  char* p = plan->buffer + 1;
  char* end = plan->buffer + size;
  const char** fixed[] = {&plan->kill_file, &plan->procs_file, &plan->freezer_state_file};
  plan->group_count = plan->subtree_count = 0;
  plan->armed = false;
  for (const char** field : fixed) {
    char* nul = static_cast<char*>(memchr(p, '\0', static_cast<size_t>(end - p)));
    if (!nul) return;
    *field = p;
    p = nul + 1;
  }
  while (p < end) {
    char kind = *p++;
    char* nul = static_cast<char*>(memchr(p, '\0', static_cast<size_t>(end - p)));
    if (!nul) return;
    if (kind == 'G' && plan->group_count < ArmedPlan::kMaxDirs) plan->group_dirs[plan->group_count++] = p;
    if (kind == 'S' && plan->subtree_count < ArmedPlan::kMaxDirs) plan->subtree_dirs[plan->subtree_count++] = p;
    p = nul + 1;
  }
  plan->armed = true;
}

// The reaper's state: messages arrive in `scratch`, so that anything but a plan leaves the last plan intact.
struct ReaperState {
  ArmedPlan plan;
  char scratch[ArmedPlan::kMaxBytes];
};

enum class Message { kNone, kArmed, kDismissed, kEnd };

// Receives one message without waiting; kNone when there is none.
Message ReceiveMessage(int socket_fd, ReaperState* state) {
  ssize_t n = ::recv(socket_fd, state->scratch, sizeof state->scratch, MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Message::kNone : Message::kEnd;
  if (n == 0) return Message::kEnd;  // nsbox closed its end (exited, or Abandon)
  if (state->scratch[0] == 'D') return Message::kDismissed;
  if (state->scratch[0] == 'A') {
    memcpy(state->plan.buffer, state->scratch, static_cast<size_t>(n));
    DecodePlan(&state->plan, static_cast<size_t>(n));
    return Message::kArmed;
  }
  return Message::kNone;
}

// The forked reaper: async-signal-safe calls only (its parent may have threads, whose locks a fork copies held), no
// allocation. Its state is static: this process is a copy, and nothing else in it runs.
[[noreturn]] void ReaperMain(int socket_fd, int parent_pidfd) {
  ::setsid();
  // Hold no other descriptor of nsbox's: a copy of a sandbox's output pipe would keep nsbox from
  // seeing its end of file.
  int keep_low = std::min(socket_fd, parent_pidfd < 0 ? socket_fd : parent_pidfd);
  int keep_high = std::max(socket_fd, parent_pidfd < 0 ? socket_fd : parent_pidfd);
  if (keep_low > 0) CloseDescriptorRange(0, static_cast<unsigned>(keep_low - 1));
  if (keep_high > keep_low)
    CloseDescriptorRange(static_cast<unsigned>(keep_low + 1), static_cast<unsigned>(keep_high - 1));
  CloseDescriptorRange(static_cast<unsigned>(keep_high + 1), ~0u);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) ::signal(sig, SIG_IGN);
  // nsbox may have blocked signals (Sandbox::Run forwards them through a signalfd); the reaper ignores them instead.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  static ReaperState state;
  ArmedPlan& plan = state.plan;
  for (;;) {
    struct pollfd fds[2] = {{socket_fd, POLLIN, 0}, {parent_pidfd, POLLIN, 0}};
    int n = ::poll(fds, parent_pidfd >= 0 ? 2 : 1, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      Message m = ReceiveMessage(socket_fd, &state);
      if (m == Message::kDismissed) ::_exit(0);  // nsbox cleaned up itself
      if (m == Message::kEnd) break;             // nsbox is gone, or handed the cleanup over
      continue;
    }
    if (parent_pidfd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      // nsbox exited; what it sent just before still counts (a plan, a dismissal). Without blocking: a child that
      // did not exec may still hold the other end of the socket.
      for (;;) {
        Message m = ReceiveMessage(socket_fd, &state);
        if (m == Message::kDismissed) ::_exit(0);
        if (m != Message::kArmed) break;
      }
      break;
    }
  }
  if (!plan.armed) ::_exit(0);  // no group was made under this reaper
  const char* failed_call = nullptr;
  RawKillGroup(plan.kill_file, plan.procs_file, plan.freezer_state_file, &failed_call);
  for (int i = 0; i < plan.group_count; ++i) RawRemoveDir(plan.group_dirs[i]);
  for (int i = 0; i < plan.subtree_count; ++i) ::rmdir(plan.subtree_dirs[i]);
  ::_exit(0);
}

// Dismissed reapers that had not exited yet: reaped without blocking on later calls, so tearing a sandbox
// down does not wait for the reaper to be scheduled (about 2 ms on a busy machine).
std::mutex dismissed_mutex;
std::vector<pid_t> dismissed_reapers;

void ReapDismissed(pid_t also) {
  std::lock_guard<std::mutex> lock(dismissed_mutex);
  if (also > 0) dismissed_reapers.push_back(also);
  std::erase_if(dismissed_reapers, [](pid_t pid) {
    pid_t done = ::waitpid(pid, nullptr, WNOHANG);
    return done == pid || (done < 0 && errno == ECHILD);  // ECHILD: someone else reaped it
  });
}

}  // namespace

StatusOr<std::unique_ptr<Reaper>> Reaper::Start() {
  ReapDismissed(0);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    return Status::Errno("socketpair(AF_UNIX, SOCK_SEQPACKET) for the cgroup reaper");
  UniqueFd reaper_end(fds[0]);
  UniqueFd nsbox_end(fds[1]);
  // Opened before the fork so there is no window in which the parent's pid could be reused.
  UniqueFd parent_pidfd(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));  // -1 before Linux 5.3
  pid_t pid = ::fork();
  if (pid < 0) return Status::Errno("fork(cgroup reaper)");
  if (pid == 0) ReaperMain(reaper_end.get(), parent_pidfd.get());
  return std::unique_ptr<Reaper>(new Reaper(pid, nsbox_end.release()));
}

StatusOr<std::unique_ptr<Reaper>> Reaper::Start(const ReaperPlan& plan) {
  auto reaper = Start();
  if (!reaper.ok()) return reaper.status();
  NSBOX_RETURN_IF_ERROR((*reaper)->Arm(plan));
  return reaper;
}

Status Reaper::Arm(const ReaperPlan& plan) {
  if (pid_ <= 0) return Status::Error("arming a cgroup reaper that was dismissed");
  std::string message = EncodePlan(plan);
  if (message.size() > ArmedPlan::kMaxBytes || plan.group_dirs.size() > ArmedPlan::kMaxDirs ||
      plan.subtree_dirs.size() > ArmedPlan::kMaxDirs)
    return Status::Error(fmt::format("cgroup reaper plan too large ({} bytes)", message.size()));
  ssize_t n;
  do n = ::send(socket_fd_, message.data(), message.size(), MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(message.size())) return Status::Errno("send(plan to the cgroup reaper)");
  return OkStatus();
}

void Reaper::Dismiss() {
  if (pid_ <= 0) return;
  const char dismiss = 'D';
  while (::send(socket_fd_, &dismiss, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  ::close(socket_fd_);
  socket_fd_ = -1;
  ReapDismissed(pid_);
  pid_ = -1;
}

void Reaper::Abandon() {
  if (pid_ <= 0) return;
  ::close(socket_fd_);  // end of file without a dismissal: the reaper cleans up now
  socket_fd_ = -1;
  ReapDismissed(pid_);  // reaped once it is done, by a later call
  pid_ = -1;
}

Reaper::~Reaper() { Dismiss(); }

bool LeaveRemovalToReaper(bool* removed, Reaper* reaper) {
  if (*removed || !reaper) return false;
  *removed = true;
  reaper->Abandon();
  return true;
}

Status ArmReaper(const CgroupConfig& config, const ReaperPlan& plan, std::unique_ptr<Reaper>* reaper) {
  if (config.prestarted_reaper && config.prestarted_reaper->reaper) {
    *reaper = std::move(config.prestarted_reaper->reaper);
    return (*reaper)->Arm(plan);
  }
  auto started = Reaper::Start(plan);
  if (!started.ok()) return started.status();
  *reaper = std::move(started.value());
  return OkStatus();
}

}  // namespace cgroup_internal

using namespace cgroup_internal;

void WaitForDismissedReapers() {
  std::lock_guard<std::mutex> lock(dismissed_mutex);
  for (pid_t pid : dismissed_reapers) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  dismissed_reapers.clear();
}

StatusOr<std::shared_ptr<PrestartedReaper>> StartCgroupReaper() {
  auto reaper = Reaper::Start();
  if (!reaper.ok()) return reaper.status();
  auto prestarted = std::make_shared<PrestartedReaper>();
  prestarted->reaper = std::move(reaper.value());
  return prestarted;
}

}  // namespace nsbox
