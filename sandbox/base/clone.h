// Starting child processes: a fork-like clone3 with a pidfd, and posix_spawn's vfork-then-exec pattern.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace nsbox {

// A fork-like clone3 (no new stack: the child runs on a copy of the caller's memory) returning a pidfd in *pidfd;
// with cgroup_fd >= 0 the child is born in that cgroup (v2, CLONE_INTO_CGROUP). Returns the child's pid (0 in the
// child), or -1 with errno. The child of a multi-threaded caller may make only async-signal-safe calls until execve or
// _exit, as after fork(2); glibc's fork handlers do not run.
pid_t CloneWithPidfd(uint64_t flags, int* pidfd, int cgroup_fd);

// A vfork-style child (CLONE_VM|CLONE_VFORK, SIGCHLD) running entry(arg) on a stack of its own, which must call
// execve (or _exit) after a few system calls of set-up, as posix_spawn's child does: it shares the caller's memory and
// thread state (errno among it) until then. No copy of the caller's page tables, no copy-on-write faults. The caller
// is suspended until the child calls execve or exits. Returns the child's pid, or -1 with errno.
// published_pid (may be null): where the kernel stores the child's pid (CLONE_PARENT_SETTID) before the child runs,
// so that another thread can signal it while this one is suspended.
pid_t StartVforkChild(int (*entry)(void*), void* arg, pid_t* published_pid = nullptr);

// Closes descriptors first..last in a child before it execs or serves: close_range(2), or, where that is refused (a
// container's seccomp profile older than the call), one close(2) each up to RLIMIT_NOFILE. Async-signal-safe; a
// child that kept a copy of its parent's end of a pipe or socket would hold off the EOF the parent's end means.
void CloseDescriptorRange(unsigned int first, unsigned int last);

}  // namespace nsbox
