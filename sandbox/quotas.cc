// The sandbox's share of the kernel's per-user quotas: its user namespace's counters and the per-uid rlimits.
#include "sandbox/quotas.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace nsbox {
namespace {

struct NamespaceQuota {
  const char* path;
  uint64_t value;
  bool optional;  // a newer counter: missing on older kernels, which then lack what it counts or count it elsewhere
};

constexpr NamespaceQuota kNamespaceQuotas[] = {
    {"/proc/sys/user/max_inotify_instances", kSandboxInotifyInstances, false},
    {"/proc/sys/user/max_inotify_watches", kSandboxInotifyWatches, false},
    {"/proc/sys/user/max_fanotify_groups", kSandboxFanotifyGroups, true},
    {"/proc/sys/user/max_fanotify_marks", kSandboxFanotifyMarks, true},
    {"/proc/sys/user/max_user_namespaces", kSandboxNamespacesEach, false},
    {"/proc/sys/user/max_pid_namespaces", kSandboxNamespacesEach, false},
    {"/proc/sys/user/max_mnt_namespaces", kSandboxNamespacesEach, false},
    {"/proc/sys/user/max_net_namespaces", kSandboxNamespacesEach, false},
    {"/proc/sys/user/max_ipc_namespaces", kSandboxNamespacesEach, false},
    {"/proc/sys/user/max_uts_namespaces", kSandboxNamespacesEach, false},
    {"/proc/sys/user/max_cgroup_namespaces", kSandboxNamespacesEach, false},
    {"/proc/sys/user/max_time_namespaces", kSandboxNamespacesEach, true},
};

}  // namespace

int SetUserNamespaceQuotas(const char** step) {
  for (const NamespaceQuota& quota : kNamespaceQuotas) {
    *step = quota.path;
    int fd = ::open(quota.path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT && quota.optional) continue;
      return -1;
    }
    char text[24];
    int len = snprintf(text, sizeof text, "%llu", static_cast<unsigned long long>(quota.value));
    ssize_t written = ::write(fd, text, static_cast<size_t>(len));
    int err = errno;
    ::close(fd);
    if (written != len) {
      errno = written < 0 ? err : EIO;
      return -1;
    }
  }
  return 0;
}

int LimitPerUserRlimits(const char** step) {
  struct Bound {
    int resource;
    uint64_t value;
    const char* step;
  };
  static constexpr Bound kBounds[] = {
      {RLIMIT_SIGPENDING, kSandboxPendingSignals, "setrlimit(RLIMIT_SIGPENDING)"},
      {RLIMIT_MSGQUEUE, kSandboxMessageQueueBytes, "setrlimit(RLIMIT_MSGQUEUE)"},
      {RLIMIT_NOFILE, kSandboxOpenFiles, "setrlimit(RLIMIT_NOFILE)"},
  };
  for (const Bound& bound : kBounds) {
    *step = bound.step;
    struct rlimit limit;
    if (::getrlimit(bound.resource, &limit) != 0) return -1;
    // Lower only: raising a hard limit needs CAP_SYS_RESOURCE in the host's namespace, which the payload lacks.
    rlim_t value = limit.rlim_max < bound.value ? limit.rlim_max : static_cast<rlim_t>(bound.value);
    limit = {value, value};
    if (::setrlimit(bound.resource, &limit) != 0) return -1;
  }
  return 0;
}

}  // namespace nsbox
