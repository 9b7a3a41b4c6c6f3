// The exec helper's in-child sequence: join a session's namespaces, fork the payload into its pid namespace, wait.
#pragma once

#include "sandbox/child.h"

namespace nsbox {

struct EnterPlan {
  int session_pidfd = -1;  // pidfd of the session's pid 1: the namespaces to join
  // The same namespaces as descriptors (user, mnt, pid, net, ipc, uts; -1 unused), for when the pidfd may not be used
  // (an unprivileged supervisor and a non-dumpable pid 1). The cgroup namespace is then not joined.
  int ns_fds[6] = {-1, -1, -1, -1, -1, -1};
  int sync_fd = -1;        // read end: one byte once the supervisor has placed the helper in the session's cgroup
  ChildPlan payload;       // the payload's plan; its control_fd also carries the helper's reports
};

// Runs in a freshly forked helper (async-signal-safe, allocation-free). Joins the user, mount, pid, network, ipc, uts
// and cgroup namespaces of the session's pid 1, forks the payload (which lands in the session's pid namespace),
// reports kStarted with the payload's pid, drops its own privileges, waits for the payload and reports kExited with
// its wait status and resource usage. Never returns.
[[noreturn]] void EnterSessionAndRun(const EnterPlan& plan);

// setns(pidfd, namespaces), falling back on EPERM to each of ns_fds in order (user first). Returns 0 or -1 with errno.
int JoinSessionNamespaces(int pidfd, const int ns_fds[6], int namespaces);

}  // namespace nsbox
