// The exec helper: join a session's namespaces, start the payload in its pid namespace, hand it to the supervisor.
#pragma once

#include "sandbox/child.h"

namespace nsbox {

struct EnterPlan {
  int session_pidfd = -1;  // pidfd of the session's pid 1: the namespaces to join
  // The same namespaces as descriptors (user, mnt, pid, net, ipc, uts; -1 unused), for when the pidfd may not be used
  // (an unprivileged supervisor and a non-dumpable pid 1). The cgroup namespace is then not joined.
  int ns_fds[6] = {-1, -1, -1, -1, -1, -1};
  ChildPlan payload;       // the payload's plan; its control_fd carries the helper's and the payload's set-up errors
  pid_t* payload_pid = nullptr;  // where the helper leaves the payload's pid (it shares the supervisor's memory)
  // Where the kernel stores the payload's pid the moment it is cloned, while the helper (and the supervisor's thread
  // that started it) are still suspended until its execve: a program of the session may stop it there, and the
  // supervisor's watchdog kills it by this pid at the exec's deadline. 0 until then.
  pid_t* payload_started = nullptr;
};

// The exec helper, started with StartVforkChild(EnterSessionEntry, &plan) from a supervisor thread: it shares the
// supervisor's memory until it exits, so it makes only system calls. Moves itself into the session's cgroup
// (payload.cgroup_join), joins the user, mount, pid, network, ipc, uts and cgroup namespaces of the session's pid 1,
// empties its bounding set, starts the payload (vfork-style too: it lands in the session's pid namespace), stores its
// pid in *plan.payload_pid and exits once the payload has called execve. The supervisor, a child subreaper
// (PR_SET_CHILD_SUBREAPER), then has the payload as its own child: it waits for it and gets its status and usage.
// Set-up failures go to payload.control_fd as kSetupError. Returns only through _exit.
int EnterSessionEntry(void* plan);

// setns(pidfd, namespaces), falling back on EPERM to each of ns_fds in order (user first). Returns 0 or -1 with errno.
int JoinSessionNamespaces(int pidfd, const int ns_fds[6], int namespaces);

}  // namespace nsbox
