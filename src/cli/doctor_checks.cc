// nsbox doctor's checks of the kernel (version, namespaces, seccomp, overlayfs) over the probes' results
// (doctor_probes.cc), and RunAllChecks; the cgroup checks are in doctor_cgroups.cc, the data files' in
// doctor_data_checks.cc. Each verdict names what was found and, when it is not a pass, the fix.
#include "src/cli/doctor_checks.h"
#include "src/cli/doctor_text.h"

#include <pwd.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sandbox/base/fs.h"
#include "sandbox/cgroup.h"
#include "sandbox/host_id_lease.h"
#include "sandbox/user_ns.h"

namespace nsbox::doctor {

using namespace text;
namespace {

// The oldest kernel with every call nsbox makes: mount_setattr (5.12), clone3 with CLONE_INTO_CGROUP (5.7),
// close_range CLOEXEC (5.11), seccomp user notification (5.0).
constexpr KernelVersion kMinimumKernel{5, 12};
// cgroup.kill, which the cgroup v2 backend uses to end a sandbox in one write.
constexpr KernelVersion kCgroupKillKernel{5, 14};

}  // namespace

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass: return "pass";
    case Verdict::kWarn: return "warn";
    case Verdict::kFail: return "fail";
  }
  return "?";
}

std::optional<KernelVersion> ParseKernelRelease(const std::string& release) {
  KernelVersion v;
  if (sscanf(release.c_str(), "%d.%d", &v.major, &v.minor) != 2) return std::nullopt;
  return v;
}

Check KernelCheck(const std::string& release) {
  auto older = [](KernelVersion a, KernelVersion b) {
    return a.major < b.major || (a.major == b.major && a.minor < b.minor);
  };
  auto version = ParseKernelRelease(release);
  if (!version)
    return Make("kernel", "kernel version", Verdict::kFail,
                fmt::format("cannot parse the kernel release \"{}\"", release), "nsbox needs Linux 5.12 or newer",
                true);
  if (older(*version, kMinimumKernel))
    return Make("kernel", "kernel version", Verdict::kFail,
                fmt::format("Linux {}: older than 5.12, which added mount_setattr (read-only binds)", release),
                "boot a Linux 5.12 or newer kernel (Debian 12's 6.1 is fine)", true);
  if (older(*version, kCgroupKillKernel))
    return Make("kernel", "kernel version", Verdict::kWarn,
                fmt::format("Linux {}: no cgroup.kill (5.14); the cgroup v2 backend cannot end a sandbox in one write",
                            release),
                "boot Linux 5.14 or newer", true);
  return Make("kernel", "kernel version", Verdict::kPass, fmt::format("Linux {}", release), "", true);
}

const std::vector<NamespaceType>& NamespaceTypes() {
  static const std::vector<NamespaceType> types = {
      {"mount", CLONE_NEWNS, "CLONE_NEWNS", "max_mnt_namespaces", "CONFIG_NAMESPACES"},
      {"pid", CLONE_NEWPID, "CLONE_NEWPID", "max_pid_namespaces", "CONFIG_PID_NS"},
      {"net", CLONE_NEWNET, "CLONE_NEWNET", "max_net_namespaces", "CONFIG_NET_NS"},
      {"ipc", CLONE_NEWIPC, "CLONE_NEWIPC", "max_ipc_namespaces", "CONFIG_IPC_NS"},
      {"uts", CLONE_NEWUTS, "CLONE_NEWUTS", "max_uts_namespaces", "CONFIG_UTS_NS"},
      {"cgroup", CLONE_NEWCGROUP, "CLONE_NEWCGROUP", "max_cgroup_namespaces", "CONFIG_CGROUPS"},
  };
  return types;
}

std::optional<long> ReadSysctlNumber(const std::string& proc, const std::string& relative) {
  auto text = ReadFile(proc + "/" + relative, 4096);
  if (!text.ok()) return std::nullopt;
  char* end = nullptr;
  std::string trimmed = Trim(*text);
  long value = strtol(trimmed.c_str(), &end, 10);
  if (trimmed.empty() || *end != '\0') return std::nullopt;
  return value;
}

UsernsSysctls ReadUsernsSysctls(const std::string& proc) {
  UsernsSysctls s;
  s.unprivileged_userns_clone = ReadSysctlNumber(proc, "sys/kernel/unprivileged_userns_clone");
  s.max_user_namespaces = ReadSysctlNumber(proc, "sys/user/max_user_namespaces");
  s.apparmor_restrict_unprivileged = ReadSysctlNumber(proc, "sys/kernel/apparmor_restrict_unprivileged_userns");
  return s;
}

namespace {

constexpr const char* kMaxUserNsFix =
    "raise the limit: sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/); "
    "inside a container, the limit of an enclosing user namespace applies too";
constexpr const char* kUnprivilegedCloneFix =
    "allow ordinary users to create user namespaces: sysctl -w kernel.unprivileged_userns_clone=1 "
    "(persist it in /etc/sysctl.d/)";
constexpr const char* kAppArmorFix =
    "Ubuntu's AppArmor restricts unprivileged user namespaces: give nsbox a profile that allows them "
    "(/etc/apparmor.d/nsbox: abi <abi/4.0>, include <tunables/global> profile nsbox /usr/local/bin/nsbox "
    "flags=(unconfined) { userns, } then apparmor_parser -r /etc/apparmor.d/nsbox), or allow them for every "
    "program: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0";

struct UsernsDiagnosis {
  std::vector<std::string> findings;  // sysctls that forbid user namespaces
  std::vector<std::string> fixes;
};

// What the sysctls say; `unprivileged` adds the restrictions that only apply to callers without CAP_SYS_ADMIN.
UsernsDiagnosis DiagnoseUserns(const UsernsSysctls& s, bool unprivileged) {
  UsernsDiagnosis d;
  if (s.max_user_namespaces && *s.max_user_namespaces == 0) {
    d.findings.push_back("user.max_user_namespaces is 0");
    d.fixes.push_back(kMaxUserNsFix);
  }
  if (unprivileged && s.unprivileged_userns_clone && *s.unprivileged_userns_clone == 0) {
    d.findings.push_back("kernel.unprivileged_userns_clone is 0");
    d.fixes.push_back(kUnprivilegedCloneFix);
  }
  if (unprivileged && s.apparmor_restrict_unprivileged && *s.apparmor_restrict_unprivileged != 0) {
    d.findings.push_back("kernel.apparmor_restrict_unprivileged_userns is 1");
    d.fixes.push_back(kAppArmorFix);
  }
  return d;
}

// The fix for a failed user namespace creation when no sysctl explains it: by errno.
std::string UsernsFixForErrno(int err) {
  switch (err) {
    case ENOSPC: return kMaxUserNsFix;
    case EINVAL: return "the kernel was built without CONFIG_USER_NS: use a kernel with user namespaces";
    case EUSERS: return "too many nested user namespaces (32 levels): run nsbox closer to the host";
    case EPERM:
      return "a security policy forbids user namespaces here: a container runtime's seccomp profile or an LSM "
             "(AppArmor, SELinux), or nsbox runs chrooted; run nsbox on the host, or let the container create "
             "user namespaces (e.g. docker --security-opt seccomp=unconfined --security-opt apparmor=unconfined)";
    default: return "see user_namespaces(7) for what this error means here";
  }
}

std::string DescribeSysctls(const UsernsSysctls& s) {
  std::vector<std::string> parts;
  if (s.max_user_namespaces) parts.push_back(fmt::format("user.max_user_namespaces={}", *s.max_user_namespaces));
  if (s.unprivileged_userns_clone)
    parts.push_back(fmt::format("kernel.unprivileged_userns_clone={}", *s.unprivileged_userns_clone));
  if (s.apparmor_restrict_unprivileged)
    parts.push_back(fmt::format("kernel.apparmor_restrict_unprivileged_userns={}", *s.apparmor_restrict_unprivileged));
  return parts.empty() ? "" : fmt::format(" ({})", fmt::join(parts, ", "));
}

}  // namespace

Check UserNamespaceCheck(const ProbeResult& probe, const UsernsSysctls& sysctls) {
  const char* title = "user namespace (created, ids mapped)";
  if (probe.ok)
    return Make("namespace.user", title, Verdict::kPass,
                "created one, mapped this user into it and used its capabilities" + DescribeSysctls(sysctls), "", true);
  // Only the limit applies to every caller; the unprivileged-only switches are judged by userns.unprivileged.
  UsernsDiagnosis d = DiagnoseUserns(sysctls, false);
  std::string detail = probe.Describe();
  if (!d.findings.empty()) detail += fmt::format(": {}", fmt::join(d.findings, ", "));
  std::string fix = d.fixes.empty() ? UsernsFixForErrno(probe.err) : fmt::format("{}", fmt::join(d.fixes, "; "));
  return Make("namespace.user", title, Verdict::kFail, detail, fix, true);
}

Check NamespaceCheck(const NamespaceType& type, const ProbeResult& probe, bool userns_ok,
                     std::optional<long> max_sysctl_value, bool apparmor_restricts) {
  std::string id = fmt::format("namespace.{}", type.name);
  std::string title = fmt::format("{} namespace ({})", type.name, type.flag_name);
  if (probe.ok) return Make(id, title, Verdict::kPass, "created one inside a new user namespace", "", true);
  if (!userns_ok)
    return Make(id, title, Verdict::kFail,
                fmt::format("{} (nsbox creates it inside a user namespace, which failed)", probe.Describe()),
                "fix namespace.user first", true);
  std::string fix;
  if (probe.err == ENOSPC || (max_sysctl_value && *max_sysctl_value == 0))
    fix = fmt::format("raise the limit: sysctl -w user.{}=15000 (it is {})", type.max_sysctl,
                      max_sysctl_value ? std::to_string(*max_sysctl_value) : "unknown");
  else if (probe.err == EINVAL)
    fix = fmt::format("the kernel was built without {}: use a kernel with {} namespaces", type.kconfig, type.name);
  else if (probe.err == EPERM && apparmor_restricts)
    fix = kAppArmorFix;
  else
    fix = "a security policy forbids it here (a container runtime's seccomp profile or an LSM): run nsbox on the host "
          "or in a container allowed to create namespaces";
  return Make(id, title, Verdict::kFail, probe.Describe(), fix, true);
}

Check UnprivilegedUsernsCheck(const Caller& caller, const ProbeResult& probe, const UsernsSysctls& sysctls) {
  const char* title = "unprivileged user namespaces";
  const bool required = !caller.root();
  UsernsDiagnosis d = DiagnoseUserns(sysctls, true);
  if (probe.ok) {
    std::string detail = (caller.root() ? "an ordinary user (uid 65534) can create one" : "this user can create one") +
                         DescribeSysctls(sysctls);
    return Make("userns.unprivileged", title, Verdict::kPass, detail, "", required);
  }
  std::string detail = fmt::format("{} {}", caller.root() ? "an ordinary user (uid 65534) cannot create one:" :
                                                            "this user cannot create one:", probe.Describe());
  if (!d.findings.empty()) detail += fmt::format("; {}", fmt::join(d.findings, ", "));
  std::string fix = d.fixes.empty() ? UsernsFixForErrno(probe.err) : fmt::format("{}", fmt::join(d.fixes, "; "));
  // Root does not need them; ordinary users of this host would.
  return Make("userns.unprivileged", title, caller.root() ? Verdict::kWarn : Verdict::kFail,
              detail + (caller.root() ? " (root is not affected; ordinary users cannot run nsbox)" : ""), fix,
              required);
}

Check NamespaceOwnerCheck(const Caller& caller, bool initial_userns, bool kernel_ok,
                          const std::vector<std::string>& missing_caps) {
  const char* title = "owner of each sandbox's user namespace";
  if (!caller.root())
    return Make("userns.owner", title, Verdict::kPass,
                fmt::format("this user (uid {}) owns its sandboxes' namespaces, as rootless nsbox does", caller.uid),
                "", false);
  if (!initial_userns)
    return Make("userns.owner", title, Verdict::kWarn,
                "root of a nested user namespace leases no host uid: it owns every sandbox's namespace, and their "
                "inotify instances, pending signals and message queue bytes count against its quotas too",
                "run nsbox in the host's user namespace for a host uid of each sandbox's own (docs/limits.md)", false);
  const char* charged =
      "root owns every sandbox's namespace, and their inotify instances, pending signals and message "
      "queue bytes count against root's quotas too";
  if (!kernel_ok)
    return Make(
        "userns.owner", title, Verdict::kWarn,
        fmt::format("with cgroup v1 on a kernel before 5.16 (which checks a move against the mover), {}", charged),
        "a kernel of 5.16 or later (docs/limits.md#kernel-quotas)", false);
  if (!missing_caps.empty()) {
    const std::string missing = fmt::format("{}", fmt::join(missing_caps, ", "));
    return Make("userns.owner", title, Verdict::kWarn, fmt::format("without {}, {}", missing, charged),
                fmt::format("give nsbox {} (docs/limits.md#kernel-quotas)", missing), false);
  }
  return Make("userns.owner", title, Verdict::kPass, "each sandbox's namespace is owned by its own leased host uid", "",
              false);
}

Check ProcMountCheck(const ProbeResult& probe) {
  const char* title = "fresh /proc in a new pid namespace";
  if (probe.ok)
    return Make("proc.mount", title, Verdict::kPass, "pid 1 of a new pid namespace mounted its own proc", "", true);
  std::string fix =
      probe.err == EPERM && probe.step.starts_with("mount(proc")
          ? "the kernel refuses a new proc while this /proc has entries covered by other mounts (as inside a "
            "container or another sandbox, where /proc/kcore and others are masked): run nsbox on the host, or in a "
            "container started with an unmasked /proc (docker --security-opt systempaths=unconfined)"
          : "see namespace.pid and namespace.mount";
  return Make("proc.mount", title, Verdict::kFail, probe.Describe(), fix, true);
}

// ---- seccomp, overlayfs --------------------------------------------------------------------------------------------

Check SeccompFilterCheck(const ProbeResult& probe) {
  const char* title = "seccomp filter";
  if (probe.ok)
    return Make("seccomp.filter", title, Verdict::kPass, "a filter installed in a child took effect", "", true);
  std::string fix = probe.err == EINVAL
                        ? "the kernel was built without CONFIG_SECCOMP_FILTER: use a kernel with seccomp filters"
                        : "a seccomp filter around nsbox forbids installing filters (prctl/seccomp calls): run nsbox "
                          "on the host, or in a container whose profile allows seccomp(2)";
  return Make("seccomp.filter", title, Verdict::kFail, probe.Describe(), fix, true);
}

Check SeccompNotifyCheck(const ProbeResult& sizes, const ProbeResult& listener, const std::string& actions_avail) {
  const char* title = "seccomp user notification (reports denied calls)";
  std::string avail = fmt::format("actions_avail: \"{}\"", actions_avail);
  if (sizes.ok && listener.ok)
    return Make("seccomp.notify", title, Verdict::kPass,
                fmt::format("listener created; {}; {}", sizes.step, avail), "", true);
  const ProbeResult& failed = sizes.ok ? listener : sizes;
  std::string fix;
  if (failed.err == EBUSY)
    fix = "a seccomp filter of the process that started nsbox already has a listener (nsbox runs inside a sandbox "
          "that uses user notification, such as another nsbox): run nsbox outside it";
  else if (failed.err == EINVAL || failed.err == ENOSYS)
    fix = "the kernel lacks seccomp user notification (Linux 5.0+): boot a newer kernel";
  else
    fix = "a seccomp filter or LSM around nsbox forbids it: run nsbox on the host";
  return Make("seccomp.notify", title, Verdict::kFail, fmt::format("{}; {}", failed.Describe(), avail), fix, true);
}

Check OverlayCheck(const std::string& proc_filesystems) {
  const char* title = "overlayfs";
  std::istringstream in(proc_filesystems);
  std::string line;
  while (std::getline(in, line))
    if (Contains(Words(line), "overlay"))
      return Make("overlayfs", title, Verdict::kPass, "overlay is in /proc/filesystems", "", false);
  return Make("overlayfs", title, Verdict::kWarn,
              "overlay is not in /proc/filesystems: layered roots (images, sessions) are unavailable",
              "load it: modprobe overlay (kernel option CONFIG_OVERLAY_FS)", false);
}

// ---- all of them ---------------------------------------------------------------------------------------------------

namespace {

// The kernel frees the namespaces of a probe (or of an nsbox run just before) asynchronously: under a small
// user.max_user_namespaces they still count for a moment, and ENOSPC would blame the host for doctor's own probes. A
// probe failing so is asked again for half a second; a limit that is really reached fails it still.
ProbeResult Settled(const std::function<ProbeResult()>& probe) {
  ProbeResult result = probe();
  for (int tries = 0; !result.ok && result.err == ENOSPC && tries < 25; ++tries) {
    ::usleep(20'000);
    result = probe();
  }
  return result;
}

}  // namespace

std::vector<Check> RunAllChecks(const HostPaths& paths, const Caller& caller) {
  std::vector<Check> checks;
  std::string release = ReadTrimmed(paths.proc + "/sys/kernel/osrelease");
  if (release.empty()) {
    struct utsname u;
    if (::uname(&u) == 0) release = u.release;
  }
  checks.push_back(KernelCheck(release));

  UsernsSysctls sysctls = ReadUsernsSysctls(paths.proc);
  ProbeResult userns = Settled(ProbeUserNamespace);
  checks.push_back(UserNamespaceCheck(userns, sysctls));
  for (const auto& type : NamespaceTypes()) {
    // Without user namespaces every probe fails alike: asked once.
    auto probe_type = [&] { return ProbeNamespace(type.clone_flag, type.flag_name); };
    ProbeResult probe = userns.ok ? Settled(probe_type) : probe_type();
    checks.push_back(NamespaceCheck(type, probe, userns.ok,
                                    ReadSysctlNumber(paths.proc, std::string("sys/user/") + type.max_sysctl),
                                    !caller.root() && sysctls.apparmor_restrict_unprivileged.value_or(0) != 0));
  }
  // As root, ask for an ordinary user (nobody) instead: root is never subject to the unprivileged restrictions.
  ProbeResult unprivileged = caller.root() ? ProbeUserNamespaceAs(65534, 65534) : userns;
  checks.push_back(UnprivilegedUsernsCheck(caller, unprivileged, sysctls));
  const CgroupFacts cgroup_facts = GatherCgroupFacts(paths, caller);
  // The kernel matters where pid 1 joins v1 groups itself: not on a cgroup2 host (CLONE_INTO_CGROUP).
  const bool kernel_ok = KernelChecksOpenerForCgroupMoves() || cgroup_facts.unified;
  checks.push_back(
      NamespaceOwnerCheck(caller, InInitialUserNamespace(), kernel_ok, MissingNamespaceOwnerCapabilities()));
  checks.push_back(ProcMountCheck(userns.ok ? Settled(ProbeProcMount) : ProbeProcMount()));

  std::string user_name = std::to_string(caller.uid);
  if (struct passwd* pw = ::getpwuid(caller.uid)) user_name = pw->pw_name;
  CgroupConfig engine_config;
  engine_config.cgroup_root = paths.cgroup_root;
  engine_config.proc_self_cgroup = paths.proc + "/self/cgroup";
  auto detected = DetectCgroupBackend(engine_config);
  EngineCgroupAnswer engine{detected.ok(), detected.ok() ? *detected : detected.status().message()};
  for (auto& check : CgroupChecks(cgroup_facts, caller, user_name, engine)) checks.push_back(std::move(check));

  checks.push_back(SeccompFilterCheck(ProbeSeccompFilter()));
  checks.push_back(SeccompNotifyCheck(ProbeSeccompNotifySizes(), ProbeSeccompListener(),
                                      ReadTrimmed(paths.proc + "/sys/kernel/seccomp/actions_avail")));
  checks.push_back(OverlayCheck(ReadTrimmed(paths.proc + "/filesystems")));
  checks.push_back(HostRootfsCheck(paths));
  checks.push_back(SeccompProfilesCheck(paths));
  checks.push_back(LanguagesCheck(paths));
  checks.push_back(ImageStoreCheck(paths, caller));
  return checks;
}

bool CanRunWithDefaults(const std::vector<Check>& checks) {
  return std::none_of(checks.begin(), checks.end(),
                      [](const Check& c) { return c.required && c.verdict == Verdict::kFail; });
}

}  // namespace nsbox::doctor
