// The exec helper: setns into a session's namespaces, fork the payload there, drop privileges, wait and report.
// Runs in a process forked from the (multi-threaded) session supervisor: only syscalls and stack buffers.
#include "sandbox/enter.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "sandbox/caps.h"
#include "sandbox/launch.h"

namespace nsbox {
namespace {

void Send(int fd, const InitMessage& msg) {
  ssize_t ignored = ::write(fd, &msg, sizeof msg);
  (void)ignored;
}

[[noreturn]] void Fail(const EnterPlan& plan, const char* step, int err) {
  InitMessage msg;
  msg.kind = InitMessage::kSetupError;
  msg.err = err;
  snprintf(msg.text, sizeof msg.text, "%s", step);
  Send(plan.payload.control_fd, msg);
  _exit(125);
}

// The helper inherits every descriptor of the supervisor (other execs' pipes among them); holding them would keep
// other execs from seeing end-of-file. Closes everything but `keep`.
void CloseAllExcept(int* keep, int count) {
  for (int i = 1; i < count; ++i)  // insertion sort: a handful of entries
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) {
      int t = keep[j];
      keep[j] = keep[j - 1];
      keep[j - 1] = t;
    }
  unsigned next = 0;
  for (int i = 0; i < count; ++i) {
    if (keep[i] < 0) continue;
    unsigned fd = static_cast<unsigned>(keep[i]);
    if (fd > next) ::syscall(SYS_close_range, next, fd - 1, 0);
    next = fd + 1;
  }
  ::syscall(SYS_close_range, next, ~0U, 0);
}

// The payload, in the session's pid namespace; system calls only (it shares the helper's memory until execve).
int PayloadEntry(void* arg) {
  const EnterPlan& plan = *static_cast<const EnterPlan*>(arg);
  const ChildPlan& payload = plan.payload;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) Fail(plan, "prctl(PR_SET_PDEATHSIG)", errno);
  // Files the payload's setup creates (the code file) belong to the sandbox user.
  ::setfsuid(payload.uid);
  ::setfsgid(payload.gid);
  if (!payload.code_path.empty() && WriteCodeFile(payload) != 0) Fail(plan, "write(code file)", errno);
  RunPayload(payload);  // unblocks signals itself
}

}  // namespace

int JoinSessionNamespaces(int pidfd, const int ns_fds[6], int namespaces) {
  if (::setns(pidfd, namespaces) == 0) return 0;
  if (errno != EPERM) return -1;
  // In the order of ns_fds, the user namespace first: joining it gives the capabilities the other joins need.
  static const int kFlags[6] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS};
  for (int i = 0; i < 6; ++i) {
    if (!(namespaces & kFlags[i])) continue;
    if (ns_fds[i] < 0) {
      errno = EPERM;
      return -1;
    }
    if (::setns(ns_fds[i], kFlags[i]) != 0) return -1;
  }
  return 0;
}

void EnterSessionAndRun(const EnterPlan& plan) {
  const ChildPlan& payload = plan.payload;
  int keep[] = {0, 1, 2, plan.session_pidfd, plan.sync_fd, payload.control_fd, payload.stdin_fd,
                payload.stdout_fd, payload.stderr_fd, payload.channel_fd, payload.seccomp_socket,
                plan.ns_fds[0], plan.ns_fds[1], plan.ns_fds[2], plan.ns_fds[3], plan.ns_fds[4], plan.ns_fds[5],
                payload.cgroup_join.fds[0], payload.cgroup_join.fds[1], payload.cgroup_join.fds[2],
                payload.cgroup_join.fds[3], payload.cgroup_join.fds[4], payload.cgroup_join.fds[5]};
  static_assert(CgroupSelfJoin::kMax == 6);
  CloseAllExcept(keep, static_cast<int>(sizeof keep / sizeof keep[0]));

  // 1. Into the session's cgroup (its limits cover every exec): v1 moves itself, else the supervisor places us before
  //    it writes the sync byte. Then wait for that byte; EOF means the supervisor is gone.
  if (payload.cgroup_join.count > 0) {
    if (JoinCgroupSelf(payload.cgroup_join) != 0) Fail(plan, "write(cgroup tasks, \"0\"): joining the session's cgroup", errno);
    for (int i = 0; i < payload.cgroup_join.count; ++i) ::close(payload.cgroup_join.fds[i]);
  }
  char go = 0;
  ssize_t n;
  do n = ::read(plan.sync_fd, &go, 1); while (n < 0 && errno == EINTR);
  if (n != 1) _exit(125);
  ::close(plan.sync_fd);

  // 2. All of the session's namespaces at once, through its pid 1's pidfd: the user namespace first (the kernel
  //    orders them), so that we hold capabilities there for the rest. The mount namespace's root becomes ours.
  int namespaces = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  if (payload.new_network) namespaces |= CLONE_NEWNET;
  if (JoinSessionNamespaces(plan.session_pidfd, plan.ns_fds, namespaces) != 0)
    Fail(plan, "setns(session pid 1, user|mnt|pid|net|ipc|uts|cgroup)", errno);
  ::close(plan.session_pidfd);
  for (int fd : plan.ns_fds)
    if (fd >= 0) ::close(fd);
  if (::chdir("/") != 0) Fail(plan, "chdir(/)", errno);

  // 3. An empty capability bounding set, inherited by the payload and everything it starts (as pid 1 does for run).
  const char* step = nullptr;
  if (DropBoundingSet(&step) != 0) Fail(plan, step, errno);

  // 4. The payload: only a child enters the pid namespace. It dies with this helper, which outlives it by design.
  sigset_t all, old;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &old);
  // vfork-style: the helper waits until the payload has called execve.
  pid_t child = StartVforkChild(PayloadEntry, const_cast<EnterPlan*>(&plan));
  if (child < 0) Fail(plan, "clone(CLONE_VM|CLONE_VFORK, payload in the session's pid namespace)", errno);
  InitMessage started;
  started.kind = InitMessage::kStarted;
  started.value = child;
  Send(payload.control_fd, started);
  if (payload.stdin_fd >= 0) ::close(payload.stdin_fd);
  ::close(payload.stdout_fd);
  ::close(payload.stderr_fd);
  if (payload.channel_fd >= 0) ::close(payload.channel_fd);
  if (payload.seccomp_socket >= 0) ::close(payload.seccomp_socket);

  // 5. The helper keeps nothing it does not need to wait and report: the sandbox user, no capabilities.
  bool dropped = ::setresgid(payload.gid, payload.gid, payload.gid) == 0 &&
                 ::setresuid(payload.uid, payload.uid, payload.uid) == 0 &&
                 ClearCapabilities(payload.no_caps, &step) == 0 && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
                 ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
  if (!dropped) {
    int err = errno;
    ::kill(child, SIGKILL);
    Fail(plan, step ? step : "dropping the exec helper's privileges (setresuid/prctl)", err);
  }

  // 6. Wait, report, and remove the code file (as the sandbox user, inside the session's root).
  int status = 0;
  struct rusage usage = {};
  pid_t got;
  do got = ::wait4(child, &status, __WALL, &usage); while (got < 0 && errno == EINTR);
  InitMessage exited;
  exited.kind = InitMessage::kExited;
  exited.value = status;
  exited.cpu_us = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL + usage.ru_utime.tv_usec +
                  usage.ru_stime.tv_usec;
  exited.max_rss_kb = usage.ru_maxrss;
  if (!payload.code_path.empty()) ::unlink(payload.code_path.c_str());
  Send(payload.control_fd, exited);
  _exit(0);
}

}  // namespace nsbox
