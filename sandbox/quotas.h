// The sandbox's share of the kernel's per-user quotas: its user namespace's counters (/proc/sys/user) and the
// per-uid rlimits (pending signals, POSIX message queue bytes), bounded so that one sandbox cannot use up host root's.
#pragma once

#include <cstdint>

namespace nsbox {

// The bounds, one per counter, for tests and the docs. Each is far below the host's usual quota for one user
// (inotify instances 128, pending signals about 96k, message queue bytes 819200), which the sandbox's counts are also
// charged to: the kernel charges a namespace's counts to its owner in the parent namespace as well, the sandbox's
// own host uid for a root-run nsbox where it may make it so, else the uid that made it (NamespaceOwnerFor).
inline constexpr uint64_t kSandboxInotifyInstances = 32;
inline constexpr uint64_t kSandboxInotifyWatches = 16384;
inline constexpr uint64_t kSandboxFanotifyGroups = 8;
inline constexpr uint64_t kSandboxFanotifyMarks = 8192;
// Namespaces of each type that may exist in the sandbox's user namespace at once (nsbox's own included: the child's
// cgroup namespace, made after the quota is set). The default profiles refuse new namespaces to the program anyway.
inline constexpr uint64_t kSandboxNamespacesEach = 16;
inline constexpr uint64_t kSandboxPendingSignals = 1024;
// One POSIX message queue of the default size (10 messages of 8 KiB) and its bookkeeping fits, about 82 KB.
inline constexpr uint64_t kSandboxMessageQueueBytes = 102400;
// Open files per process (RLIMIT_NOFILE, soft and hard: the usual soft default, which programs are written for). The
// host's file table (fs.file-max) is shared by every process; no cgroup counts entries in it, so a sandbox's share is
// this times its pids limit (262144 at the defaults), not what nsbox itself was started with (20000, or systemd's
// 524288 hard: half a host's table with 256 processes).
inline constexpr uint64_t kSandboxOpenFiles = 1024;

// In the child, in the sandbox's new user namespace while it still holds CAP_SYS_RESOURCE there: writes the
// sandbox's bounds into /proc/sys/user/max_* (through any procfs: the kernel shows and sets the values of the
// opener's user namespace). A counter the kernel does not have (max_fanotify_* before 5.13, max_time_namespaces
// before 5.6) is skipped; any other failure fails. Allocation-free. 0, or -1 with errno and *step naming the file.
int SetUserNamespaceQuotas(const char** step);

// In the payload before execve: RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE, soft and hard, at the bounds above (or lower
// where they already are), so that the program cannot raise them again. Both count per uid, and the sandbox's are
// charged to its user namespace's owner too. Allocation-free. 0, or -1 with errno and *step naming the call.
int LimitPerUserRlimits(const char** step);

}  // namespace nsbox
