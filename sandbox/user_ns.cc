// The user namespace from the parent side: one inside uid/gid mapped to one host uid/gid, never to host root.
#include "sandbox/user_ns.h"

#include <fcntl.h>
#include <linux/securebits.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

namespace {

constexpr uid_t kNobody = 65534;

// What root outside does to a sandbox through its own capabilities once it is not the namespace's owner (the owner
// has every capability in the namespace without asking), with the switch's own.
constexpr struct {
  cap_value_t value;
  const char* name;
} kOwnerCapabilities[] = {
    {CAP_SETUID, "CAP_SETUID"},              // the switch: the euid
    {CAP_SETPCAP, "CAP_SETPCAP"},            // the switch: SECBIT_NO_SETUID_FIXUP
    {CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},  // the switched thread's file access (CLONE_INTO_CGROUP's cgroup.procs)
    {CAP_SYS_ADMIN, "CAP_SYS_ADMIN"},        // setns into the sandbox's namespaces
    {CAP_SYS_PTRACE, "CAP_SYS_PTRACE"},      // /proc/PID/ns and /proc/PID/root of pid 1
    {CAP_KILL, "CAP_KILL"},                  // signals, the parent-death signal of pid 1 included
    {CAP_NET_ADMIN, "CAP_NET_ADMIN"},        // the sandbox's loopback, brought up from outside
};

std::mutex& SwitchLock() {
  static std::mutex lock;
  return lock;
}

}  // namespace

bool KernelChecksOpenerForCgroupMoves(const char* release) {
  struct utsname name;
  if (!release) release = ::uname(&name) == 0 ? name.release : "";
  int major = 0, minor = 0;
  if (std::sscanf(release, "%d.%d", &major, &minor) != 2) return false;
  return major > 5 || (major == 5 && minor >= 16);
}

std::optional<uid_t> NamespaceOwnerFor(const Policy& policy) {
  if (::geteuid() != 0 || policy.host_uid() == 0 || policy.host_uid() == kNobody) return std::nullopt;
  if (!InInitialUserNamespace()) return std::nullopt;
  if (!MissingNamespaceOwnerCapabilities().empty()) return std::nullopt;
  return policy.host_uid();
}

std::vector<std::string> MissingNamespaceOwnerCapabilities() {
  std::vector<std::string> missing;
  cap_t caps = cap_get_proc();
  for (const auto& cap : kOwnerCapabilities) {
    cap_flag_value_t value = CAP_CLEAR;
    if (!caps || cap_get_flag(caps, cap.value, CAP_EFFECTIVE, &value) != 0 || value != CAP_SET)
      missing.push_back(cap.name);
  }
  if (caps) cap_free(caps);
  return missing;
}

Status NamespaceOwnerSwitch::Enter(std::optional<uid_t> owner) {
  if (!owner) return OkStatus();
  lock_ = std::unique_lock<std::mutex>(SwitchLock());
  euid_ = ::geteuid();
  securebits_ = ::prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
  dumpable_ = ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  if (securebits_ < 0 || dumpable_ < 0 || ::prctl(PR_GET_PDEATHSIG, &parent_death_signal_, 0, 0, 0) != 0) {
    Status failed = Status::Errno("prctl(PR_GET_SECUREBITS/PR_GET_DUMPABLE/PR_GET_PDEATHSIG)");
    Leave();
    return failed;
  }
  if (::prctl(PR_SET_SECUREBITS, securebits_ | SECBIT_NO_SETUID_FIXUP, 0, 0, 0) != 0) {
    Status failed = Status::Errno("prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP)");
    Leave();
    return failed;
  }
  securebits_set_ = true;
  if (::syscall(SYS_setresuid, -1, *owner, -1) != 0) {
    Status failed = Status::Errno(fmt::format("setresuid(-1, {}, -1) to own the sandbox's user namespace", *owner));
    Leave();
    return failed;
  }
  euid_set_ = true;
  // Not dumpable until Leave(): a dumpable process whose euid is the owner's (this one, and the pid 1 it clones, which
  // copies the flag) would be the owner's to open through /proc (environ, mem, uid_map) and to ptrace. pid 1, born
  // not dumpable, is root's to reach, and later drops to the sandbox user, as before. The euid change did it already
  // unless fs.suid_dumpable is 1.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    Status failed = Status::Errno("prctl(PR_SET_DUMPABLE, 0)");
    Leave();
    return failed;
  }
  return OkStatus();
}

void NamespaceOwnerSwitch::Leave() {
  if (!lock_.owns_lock()) return;
  const char* step = nullptr;
  if (euid_set_ && ::syscall(SYS_setresuid, -1, euid_, -1) != 0) step = "setresuid(-1, euid, -1)";
  if (!step && securebits_set_ && ::prctl(PR_SET_SECUREBITS, securebits_, 0, 0, 0) != 0)
    step = "prctl(PR_SET_SECUREBITS)";
  // Back to root's euid first: made dumpable while this thread was the owner's, the process would be the owner's.
  // (PR_SET_DUMPABLE takes 0 and 1 only; 2 is fs.suid_dumpable's, which the kernel set again.)
  if (!step && euid_set_ && dumpable_ <= 1 && ::prctl(PR_SET_DUMPABLE, dumpable_, 0, 0, 0) != 0)
    step = "prctl(PR_SET_DUMPABLE)";
  if (!step && euid_set_ && parent_death_signal_ != 0 && ::prctl(PR_SET_PDEATHSIG, parent_death_signal_, 0, 0, 0) != 0)
    step = "prctl(PR_SET_PDEATHSIG)";
  if (step) {
    std::fprintf(stderr, "nsbox: cannot restore this thread's credentials after starting a sandbox: %s: %s\n", step,
                 std::strerror(errno));
    std::abort();
  }
  euid_set_ = securebits_set_ = false;
  lock_.unlock();
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
