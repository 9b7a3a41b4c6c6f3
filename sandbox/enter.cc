// The exec helper: setns into a session's namespaces, start the payload there, and hand it over to the supervisor.
// Runs vfork-style in the memory of the (multi-threaded) session supervisor: only system calls and stack buffers.
#include "sandbox/enter.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "sandbox/base/clone.h"
#include "sandbox/caps.h"
#include "sandbox/launch.h"

namespace nsbox {
namespace {

[[noreturn]] void Fail(const EnterPlan& plan, const char* step, int err) {
  InitMessage msg;
  msg.kind = InitMessage::kSetupError;
  msg.err = err;
  snprintf(msg.text, sizeof msg.text, "%s", step);
  ssize_t ignored = ::write(plan.payload.control_fd, &msg, sizeof msg);
  (void)ignored;
  _exit(125);
}

// The payload, in the session's pid namespace; system calls only (it shares the supervisor's memory until execve).
int PayloadEntry(void* arg) {
  const EnterPlan& plan = *static_cast<const EnterPlan*>(arg);
  const ChildPlan& payload = plan.payload;
  // Born the sandbox user and not dumpable (the helper made itself so, and the memory it shares): the code is sealed
  // before any program of the session could open it through /proc, and nobody can change it after.
  int code_fd = -1;
  if (!payload.code_path.empty() && (code_fd = MakeSealedCodeFd(payload)) < 0) Fail(plan, "write(code memfd)", errno);
  RunPayload(payload, /*inherited=*/true, /*memory_join_fd=*/-1, code_fd);  // unblocks signals itself
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

int EnterSessionEntry(void* arg) {
  const EnterPlan& plan = *static_cast<const EnterPlan*>(arg);
  const ChildPlan& payload = plan.payload;
  // 1. Into the session's cgroup (its limits cover every exec), before the payload exists.
  if (payload.cgroup_join.count > 0 && JoinCgroupSelf(payload.cgroup_join) != 0)
    Fail(plan, "write(cgroup, \"0\"): joining the session's cgroup", errno);

  // 2. All of the session's namespaces at once, through its pid 1's pidfd: the user namespace first (the kernel
  //    orders them), so that we hold capabilities there for the rest. The mount namespace's root becomes ours.
  int namespaces = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  if (payload.new_network) namespaces |= CLONE_NEWNET;
  if (JoinSessionNamespaces(plan.session_pidfd, plan.ns_fds, namespaces) != 0)
    Fail(plan, "setns(session pid 1, user|mnt|pid|net|ipc|uts|cgroup)", errno);
  if (::chdir("/") != 0) Fail(plan, "chdir(/)", errno);

  // 3. An empty capability bounding set, inherited by the payload and everything it starts (as pid 1 does for run);
  //    joining the user namespace filled it again.
  const char* step = nullptr;
  if (DropBoundingSet(&step) != 0) Fail(plan, step, errno);

  // 4. The sandbox user, then not dumpable: the payload appears in the session's pid namespace, where its programs
  //    (that user, in that user namespace) can see and signal it, in the supervisor's memory
  //    until its execve. Dumpability belongs to that memory and is inherited by a fork, but any credential change
  //    resets it (to fs.suid_dumpable, for a root supervisor): so all of them happen here, where no sandboxed program
  //    can see this process, and the payload is born as the sandbox user and not dumpable, making no change of its own.
  //    The supervisor stays non-dumpable from its first exec on.
  if (BecomeSandboxUser(payload, &step) != 0) Fail(plan, step, errno);
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) Fail(plan, "prctl(PR_SET_DUMPABLE, 0)", errno);

  // 5. The payload: only a child enters the pid namespace. We wait here until it has called execve (or died), then
  //    leave: the payload passes to the supervisor, the subreaper above us.
  pid_t child = StartVforkChild(PayloadEntry, const_cast<EnterPlan*>(&plan), plan.payload_started);
  if (child < 0) Fail(plan, "clone(CLONE_VM|CLONE_VFORK, payload in the session's pid namespace)", errno);
  *plan.payload_pid = child;
  _exit(0);
}

}  // namespace nsbox
