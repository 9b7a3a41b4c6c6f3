// The user namespace from the parent side: one inside uid/gid mapped to one host uid/gid, never to host root.
#include "sandbox/user_ns.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/host_id_lease.h"

namespace nsbox {

Status WriteIdMaps(pid_t pid, const Policy& policy, bool privileged) {
  uint32_t host_uid = privileged ? policy.host_uid() : ::getuid();
  uint32_t host_gid = privileged ? policy.host_gid() : ::getgid();
  if (host_uid == 0 || host_gid == 0) return Status::Error("refusing to map the sandbox user to host root");
  std::string base = fmt::format("/proc/{}/", pid);
  // Without CAP_SETGID in the parent namespace the kernel demands that setgroups be denied first.
  if (!privileged) NSBOX_RETURN_IF_ERROR(WriteControlFile(base + "setgroups", "deny"));
  const std::string uid_map = fmt::format("{} {} 1\n", policy.sandbox_uid(), host_uid);
  UniqueFd uid_map_fd(::open((base + "uid_map").c_str(), O_WRONLY | O_CLOEXEC));
  if (!uid_map_fd) return Status::Errno(fmt::format("open({}uid_map)", base));
  if (::write(uid_map_fd.get(), uid_map.data(), uid_map.size()) != static_cast<ssize_t>(uid_map.size())) {
    const int err = errno;
    Status failed = Status::Errno(fmt::format("write({}uid_map, \"{}\")", base, uid_map), err);
    // Root without CAP_SETUID (a container's default), or root of a user namespace that maps only some ids
    // (unshare -Ur maps root alone), which cannot map one it lacks.
    if (privileged && err == EPERM)
      return Status::Error(fmt::format(
          "{}; {}", failed.message(),
          InInitialUserNamespace()
              ? "mapping the sandbox's ids needs CAP_SETUID and CAP_SETGID"
              : fmt::format("host uid {} is not mapped in this process's user namespace (see /proc/self/uid_map): "
                            "map it, or run nsbox as an ordinary user",
                            host_uid)));
    return failed;
  }
  NSBOX_RETURN_IF_ERROR(WriteControlFile(base + "gid_map", fmt::format("{} {} 1\n", policy.sandbox_gid(), host_gid)));
  return OkStatus();
}

Status LetSandboxReopen(int fd) {
  if (fd < 0) return OkStatus();
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::Errno("fstat(stdio descriptor)");
  if (!S_ISFIFO(st.st_mode)) return OkStatus();
  if (::fchmod(fd, 0666) != 0) return Status::Errno("fchmod(stdio pipe, 0666)");
  return OkStatus();
}

std::string NamespaceFailureHint(int err) {
  const char* why = "";
  switch (err) {
    case ENOSPC: why = "a namespace limit is reached or set to 0 (user.max_user_namespaces and its siblings)"; break;
    case EPERM:
      why = "new user namespaces are forbidden here (kernel.unprivileged_userns_clone=0, Ubuntu's "
            "kernel.apparmor_restrict_unprivileged_userns=1, or a container's seccomp profile)";
      break;
    case EINVAL: why = "the kernel lacks one of the namespace types nsbox needs"; break;
    case EUSERS: why = "user namespaces are nested too deeply"; break;
    default: return " (run `nsbox doctor` to check what this host lacks)";
  }
  return fmt::format(". Likely cause: {}; `nsbox doctor` names the fix", why);
}

}  // namespace nsbox
