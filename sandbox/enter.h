// The exec helper's in-child sequence: join a session's namespaces, fork the payload into its pid namespace, wait.
#pragma once

#include "sandbox/child.h"

namespace nsbox {

struct EnterPlan {
  int session_pidfd = -1;  // pidfd of the session's pid 1: the namespaces to join
  int sync_fd = -1;        // read end: one byte once the supervisor has placed the helper in the session's cgroup
  ChildPlan payload;       // the payload's plan; its control_fd also carries the helper's reports
};

// Runs in a freshly forked helper (async-signal-safe, allocation-free). Joins the user, mount, pid, network, ipc, uts
// and cgroup namespaces of the session's pid 1, forks the payload (which lands in the session's pid namespace),
// reports kStarted with the payload's pid, drops its own privileges, waits for the payload and reports kExited with
// its wait status and resource usage. Never returns.
[[noreturn]] void EnterSessionAndRun(const EnterPlan& plan);

}  // namespace nsbox
