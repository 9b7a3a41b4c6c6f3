// Deferred release of a sandbox's mount namespace: a kernel worker, not the exiting pid 1, tears it down.
#pragma once

#include <sys/types.h>

#include "sandbox/base/unique_fd.h"

namespace nsbox {

// When a sandbox's pid 1 exits, the kernel tears its mount namespace down in that exit: every mount unmounted, an
// expedited RCU grace period, each superblock (tmpfs, proc, devpts, mqueue) shut down, about 0.5 ms here. nsbox waits
// for that exit before it returns, because a pid 1 left to init would stay a zombie until init reaps it.
//
// This keeps one more reference to the namespace, in the fixed-file table of an io_uring instance that nothing ever
// submits to. Closing the instance releases its files from a kernel worker, after pid 1 is gone, so the teardown
// happens there and nobody waits for it. The namespace, unreachable by then (no process in it, no path to it), is
// gone a few milliseconds after nsbox.
//
// Two steps, because opening the namespace needs pid 1 still dumpable (before it is released), and the io_uring set-up
// can wait until pid 1 builds its root:
//   auto ns = OpenMountNamespace(child);            // before pid 1 changes credentials
//   UniqueFd holder = HoldForAsyncRelease(std::move(ns));   // any time after
// Either returns an invalid descriptor when it cannot (io_uring disabled by sysctl or seccomp, an old kernel): the
// teardown then runs in pid 1's exit as it always did. Keep the holder open until pid 1 is reaped.
UniqueFd OpenMountNamespace(pid_t pid);
UniqueFd HoldForAsyncRelease(UniqueFd ns);

}  // namespace nsbox
