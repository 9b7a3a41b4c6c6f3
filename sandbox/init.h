// The sandbox's pid 1: reaps orphans, forwards signals to the payload and reports the payload's exit status.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include "sandbox/child.h"

namespace nsbox {

// nsbox's death must end the sandbox, through PR_SET_PDEATHSIG on pid 1. The kernel clears that signal at every
// credential change (setfsuid, setresuid, capset), so pid 1 re-arms it after each and then checks that its parent is
// still nsbox: nsbox may have died in between, leaving the signal nobody to wait for.
struct ParentWatch {
  int host_stat_fd = -1;  // pid 1's own stat file in the host's /proc, opened before the pivot
  long nsbox_pid = 0;     // the parent's pid as the host's /proc shows it
  unsigned long arg_start = 0, arg_end = 0;  // the argv strings inherited from nsbox
};

// Before the pivot: opens the host's /proc/self/stat and records the parent and the argv bounds.
int OpenParentWatch(ParentWatch* watch);
// Re-arms PR_SET_PDEATHSIG(SIGKILL) and fails (errno ESRCH) when the parent is no longer nsbox.
int RearmParentDeathSignal(const ParentWatch& watch);
// Wipes the argv strings inherited from nsbox and writes `name` there: /proc/<pid>/cmdline needs no ptrace permission
// to read, and nsbox's command line holds host paths and option values.
void HideNsboxCommandLine(const ParentWatch& watch, const char* name = "nsbox-init");

// pid 1 becomes the sandbox user before it starts anything: the sandbox's groups, uid and gid, no capabilities,
// no_new_privs, not dumpable (the payload can neither ptrace it nor read its memory), the parent-death signal
// re-armed. Reports a setup error and exits on failure; closes the watch's descriptor on success.
void DropInitPrivileges(const ChildPlan& plan, ParentWatch& watch);

// Sent by nsbox to pid 1 (time-out, cancel): kill every other process of the sandbox, reap them all, exit. The kernel
// would kill them too when pid 1 dies, but it lets them vanish unreaped, and their CPU time with them; reaped by
// pid 1, it shows in the rusage nsbox collects from pid 1.
inline int KillSandboxSignal() { return SIGRTMAX; }

// Never returns. When the payload has exited: reports its status, kills and reaps every process left in the pid
// namespace (double-forked, setsid, ignoring SIGTERM), moves itself out of the sandbox's groups through `leave`
// (Cgroup::leave_join; count 0 when there are none or it cannot), reports kGone with its rusage, and exits.
// Termination signals go to the payload's process group, as a terminal's would. payload < 0 (a session): reports
// kReady and reaps until killed. DropInitPrivileges has run.
[[noreturn]] void RunInit(const ChildPlan& plan, pid_t payload, const CgroupSelfJoin& leave);

}  // namespace nsbox
