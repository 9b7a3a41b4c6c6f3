// nsbox doctor's checks: the verdict logic over the kernel probes' results (doctor_probes.cc) and the host's /proc and
// /sys files. Each verdict names what was found and, when it is not a pass, the fix.
#include "nsbox_config.h"
#include "src/cli/doctor_checks.h"

#include <dirent.h>
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
#include <nlohmann/json.hpp>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"
#include "sandbox/cgroup.h"
#include "sandbox/host_id_lease.h"
#include "sandbox/seccomp.h"
#include "sandbox/spec/mount_plan.h"
#include "sandbox/user_ns.h"

namespace nsbox::doctor {
namespace {

// The oldest kernel with every call nsbox makes: mount_setattr (5.12), clone3 with CLONE_INTO_CGROUP (5.7),
// close_range CLOEXEC (5.11), seccomp user notification (5.0).
constexpr KernelVersion kMinimumKernel{5, 12};
// cgroup.kill, which the cgroup v2 backend uses to end a sandbox in one write.
constexpr KernelVersion kCgroupKillKernel{5, 14};
// What the default limits need.
constexpr const char* kLimitControllersV2[] = {"memory", "pids", "cpu"};
constexpr const char* kLimitControllersV1[] = {"memory", "pids", "cpu", "cpuacct"};

std::string Join(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return root + path;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t start = s.find_first_not_of(" \t\n");
  return start == std::string::npos ? "" : s.substr(start);
}

std::string ReadTrimmed(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  return text.ok() ? Trim(*text) : "";
}

std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  std::string word;
  while (in >> word) words.push_back(word);
  return words;
}

bool Contains(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

Check Make(std::string id, std::string title, Verdict verdict, std::string detail, std::string fix, bool required) {
  return Check{std::move(id), std::move(title), verdict, std::move(detail),
               verdict == Verdict::kPass ? "" : std::move(fix), required};
}

// ---- running a probe in a child -----------------------------------------------------------------------------------

std::string ErrnoText(int err) { return fmt::format("{} ({})", strerror(err), ErrnoName(err)); }

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

// ---- cgroups -------------------------------------------------------------------------------------------------------

namespace {

struct SelfCgroup {
  std::optional<std::string> unified;             // the "0::" line's path
  std::vector<std::pair<std::string, std::string>> v1;  // controller -> path
};

SelfCgroup ParseSelfCgroup(const std::string& content) {
  SelfCgroup self;
  std::istringstream in(content);
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find(':');
    auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (line.substr(0, first) == "0" && controllers.empty()) {
      self.unified = path;
      continue;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) self.v1.emplace_back(name, path);
  }
  return self;
}

std::string JoinCgroup(const std::string& base, const std::string& relative) {
  if (relative.empty() || relative == "/") return base;
  return relative.front() == '/' ? base + relative : base + "/" + relative;
}

bool Writable(const std::string& path) { return ::access(path.c_str(), W_OK) == 0; }

}  // namespace

CgroupFacts GatherCgroupFacts(const HostPaths& paths, const Caller& caller) {
  CgroupFacts facts;
  SelfCgroup self = ParseSelfCgroup(ReadTrimmed(paths.proc + "/self/cgroup"));
  const std::string& root = paths.cgroup_root;
  facts.cgroup_root = root;
  facts.unified = PathExists(root + "/cgroup.controllers");
  facts.hybrid_v2 = !facts.unified && PathExists(root + "/unified/cgroup.controllers");
  if (facts.unified || facts.hybrid_v2) {
    std::string mount = facts.unified ? root : root + "/unified";
    // Root puts its groups under the hierarchy root; an ordinary user under its own, delegated cgroup.
    facts.v2_dir = caller.root() || !self.unified ? mount : JoinCgroup(mount, *self.unified);
    facts.v2_available = Words(ReadTrimmed(facts.v2_dir + "/cgroup.controllers"));
    facts.v2_enabled = Words(ReadTrimmed(facts.v2_dir + "/cgroup.subtree_control"));
    facts.v2_writable = Writable(facts.v2_dir) && Writable(facts.v2_dir + "/cgroup.subtree_control");
  }
  for (const char* name : kLimitControllersV1) {
    CgroupFacts::V1Controller c;
    c.name = name;
    std::string mount = root + "/" + name;
    c.mounted = PathExists(mount + "/cgroup.procs");
    if (c.mounted) {
      std::string own;
      for (const auto& [controller, path] : self.v1)
        if (controller == name) own = path;
      c.dir = caller.root() ? mount : JoinCgroup(mount, own);
      c.writable = Writable(c.dir);
    }
    facts.v1.push_back(c);
  }
  return facts;
}

std::vector<Check> CgroupChecks(const CgroupFacts& facts, const Caller& caller, const std::string& user_name,
                                const std::optional<EngineCgroupAnswer>& engine) {
  std::vector<Check> checks;
  // cgroup v2
  std::vector<std::string> missing;
  for (const char* c : kLimitControllersV2)
    if (!Contains(facts.v2_available, c)) missing.push_back(c);
  bool v2_usable = facts.unified && missing.empty() && facts.v2_writable;
  const std::string delegate_v2 = fmt::format(
      "start nsbox in a cgroup delegated to {0}: systemd-run --user --scope -p Delegate=yes nsbox ... (needs a user "
      "systemd: loginctl enable-linger {0}), or have root delegate one: mkdir {1}/GROUP; chown -R {0} {1}/GROUP; "
      "echo $$ > {1}/GROUP/cgroup.procs in the shell that starts nsbox",
      user_name, facts.unified ? facts.v2_dir : std::string("/sys/fs/cgroup/YOUR-CGROUP"));
  std::string v2_fix;
  if (!facts.unified)
    v2_fix = "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2 at the cgroup root with every controller)" +
             (caller.root() ? std::string() : "; then " + delegate_v2);
  else if (!missing.empty())
    v2_fix = caller.root() ? fmt::format(
                                 "enable the controllers: echo \"+memory +pids +cpu\" > {}/cgroup.subtree_control "
                                 "(on the way down from the root)",
                                 facts.v2_dir)
                           : "ask root to enable memory, pids and cpu for your cgroup, then " + delegate_v2;
  else
    v2_fix = caller.root() ? "nsbox runs as root but cannot write the cgroup root: is /sys/fs/cgroup mounted read-only?"
                           : delegate_v2;
  {
    const char* title = "cgroup v2: controllers available and delegated";
    std::string listing = fmt::format("cgroup.controllers \"{}\", cgroup.subtree_control \"{}\"",
                                      fmt::join(facts.v2_available, " "), fmt::join(facts.v2_enabled, " "));
    if (!facts.unified && !facts.hybrid_v2) {
      checks.push_back(Make("cgroup.v2", title, Verdict::kWarn, "no cgroup2 mount at the cgroup root", v2_fix, false));
    } else if (facts.hybrid_v2) {
      checks.push_back(
          Make("cgroup.v2", title, Verdict::kWarn,
               fmt::format("hybrid host: cgroup2 is mounted at {} beside the v1 controllers; nsbox uses v2 "
                           "only when it is the whole hierarchy ({})",
                           facts.v2_dir, listing),
               v2_fix, false));
    } else if (!missing.empty()) {
      checks.push_back(Make("cgroup.v2", title, Verdict::kWarn,
                            fmt::format("{} lacks {} ({})", facts.v2_dir, fmt::join(missing, ", "), listing), v2_fix,
                            false));
    } else if (!facts.v2_writable) {
      checks.push_back(Make("cgroup.v2", title, Verdict::kWarn,
                            fmt::format("{} has memory, pids and cpu but uid {} cannot write it: not delegated ({})",
                                        facts.v2_dir, caller.uid, listing),
                            v2_fix, false));
    } else {
      checks.push_back(Make("cgroup.v2", title, Verdict::kPass,
                            fmt::format("{} is writable and has memory, pids and cpu ({})", facts.v2_dir, listing), "",
                            false));
    }
  }
  // cgroup v1
  std::vector<std::string> unmounted, unwritable, usable;
  for (const auto& c : facts.v1) {
    if (!c.mounted) unmounted.push_back(c.name);
    else if (!c.writable) unwritable.push_back(c.dir);
    else usable.push_back(c.name);
  }
  bool v1_usable = !facts.v1.empty() && unmounted.empty() && unwritable.empty();
  {
    const char* title = "cgroup v1 fallback: memory, pids, cpu, cpuacct";
    std::vector<std::string> v1_dirs;
    for (const auto& c : facts.v1) v1_dirs.push_back(c.mounted ? c.dir : "/sys/fs/cgroup/" + c.name);
    std::string v1_fix =
        caller.root()
            ? "mount the missing v1 controllers: mkdir /sys/fs/cgroup/NAME; mount -t cgroup -o NAME cgroup "
              "/sys/fs/cgroup/NAME"
            : fmt::format("have root delegate a group of each controller to {}: for d in {}; do mkdir $d/GROUP; "
                          "chown -R {} $d/GROUP; done; then move the shell that starts nsbox into them (echo $$ > "
                          "$d/GROUP/cgroup.procs for each)",
                          user_name, fmt::join(v1_dirs, " "), user_name);
    if (v1_usable) {
      checks.push_back(Make("cgroup.v1", title, Verdict::kPass,
                            fmt::format("mounted and writable: {}", fmt::join(usable, ", ")), "", false));
    } else if (unmounted.size() == facts.v1.size()) {
      // A pure v2 host has no v1 controllers; that only matters when v2 is not usable either.
      checks.push_back(Make("cgroup.v1", title, v2_usable ? Verdict::kPass : Verdict::kWarn,
                            v2_usable ? "not mounted (not needed: cgroup v2 is usable)" : "no v1 controller is mounted",
                            v1_fix, false));
    } else {
      std::vector<std::string> problems;
      if (!unmounted.empty()) problems.push_back(fmt::format("not mounted: {}", fmt::join(unmounted, ", ")));
      if (!unwritable.empty())
        problems.push_back(fmt::format("not writable by uid {}: {}", caller.uid, fmt::join(unwritable, ", ")));
      checks.push_back(
          Make("cgroup.v1", title, Verdict::kWarn, fmt::format("{}", fmt::join(problems, "; ")), v1_fix, false));
    }
  }
  // The verdict that matters: a backend for the default memory, pids and CPU limits.
  {
    const char* title = "cgroup backend for the default limits";
    if (engine && engine->usable) {
      checks.push_back(Make("cgroup.backend", title, Verdict::kPass,
                            fmt::format("{}, as nsbox run will use it", engine->backend_or_error), "", true));
    } else if (engine && (v2_usable || v1_usable)) {
      // The files look usable but the engine refuses: its reason is the one that counts.
      checks.push_back(Make("cgroup.backend", title, Verdict::kFail, engine->backend_or_error,
                            "see the reason; or run without any limits: nsbox run --dangerously-run-without-limits",
                            true));
    } else if (v2_usable) {
      checks.push_back(
          Make("cgroup.backend", title, Verdict::kPass, fmt::format("cgroup2 under {}", facts.v2_dir), "", true));
    } else if (v1_usable) {
      checks.push_back(Make("cgroup.backend", title, Verdict::kPass, "cgroup1 (memory, pids, cpu, cpuacct)", "", true));
    } else if (!facts.unified && !facts.hybrid_v2 &&
               std::none_of(facts.v1.begin(), facts.v1.end(), [](const auto& c) { return c.mounted; })) {
      checks.push_back(Make("cgroup.backend", title, Verdict::kFail,
                            fmt::format("no cgroup file system under {} (inside a container or sandbox that hides "
                                        "/sys/fs/cgroup?); nsbox refuses to run with limits",
                                        facts.cgroup_root),
                            "run nsbox where /sys/fs/cgroup is mounted (on the host, or a container given a delegated "
                            "cgroup), or run without any limits: nsbox run --dangerously-run-without-limits",
                            true));
    } else {
      std::string fix = caller.root()
                            ? v2_fix + "; or mount the cgroup v1 memory, pids, cpu and cpuacct controllers"
                            : v2_fix + "; on a hybrid or v1 host, run as root or have root delegate v1 groups "
                                       "(see cgroup.v1)";
      checks.push_back(Make("cgroup.backend", title, Verdict::kFail,
                            "neither cgroup v2 nor v1 gives this user memory, pids and cpu limits; nsbox refuses to "
                            "run with limits",
                            fix + "; or run without any limits: nsbox run --dangerously-run-without-limits", true));
    }
  }
  return checks;
}

// ---- seccomp, overlayfs, data --------------------------------------------------------------------------------------

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

Check HostRootfsCheck(const HostPaths& paths) {
  const char* title = "default root filesystem (host view)";
  std::string data_fix = fmt::format(
      "reinstall nsbox (the data files belong in {}), or point NSBOX_DATADIR at a directory holding rootfs/host.json",
      NSBOX_DATADIR);
  // Reported, not fatal as DataDir() would be: doctor is where an untrusted data directory is diagnosed.
  auto resolved = paths.data_dir.empty() ? ResolveDataDir() : StatusOr<std::string>(paths.data_dir);
  if (!resolved.ok()) return Make("rootfs.host", title, Verdict::kFail, resolved.status().message(), data_fix, true);
  std::string data_dir = *resolved;
  std::string file = data_dir + "/rootfs/host.json";
  auto view = LoadHostView(file);
  if (!view.ok()) return Make("rootfs.host", title, Verdict::kFail, view.status().message(), data_fix, true);
  std::vector<std::string> missing;
  for (const auto& bind : view->read_only_binds)
    if (!bind.optional && !PathExists(Join(paths.host_root, bind.path))) missing.push_back(bind.path);
  if (!missing.empty())
    return Make("rootfs.host", title, Verdict::kFail,
                fmt::format("{} names host paths that do not exist: {}", file, fmt::join(missing, ", ")),
                "restore them on the host, or run with --rootfs DIR (a prepared root)", true);
  if (::access(Join(paths.host_root, "/bin/sh").c_str(), X_OK) != 0)
    return Make("rootfs.host", title, Verdict::kFail, "the host has no /bin/sh for the sandbox's shell",
                "install a shell (dash or bash)", true);
  return Make("rootfs.host", title, Verdict::kPass,
              fmt::format("{} loaded; its {} read-only paths are present", file, view->read_only_binds.size()), "",
              true);
}

Check SeccompProfilesCheck(const HostPaths& paths) {
  const char* title = "seccomp profiles (default, strict)";
  auto resolved = paths.data_dir.empty() ? ResolveDataDir() : StatusOr<std::string>(paths.data_dir);
  if (!resolved.ok())
    return Make("seccomp.profiles", title, Verdict::kFail, resolved.status().message(), "fix rootfs.host first", true);
  // As nsbox run finds them: $NSBOX_PROFILES_DIR, else the data directory's (DefaultSeccompProfilesDir, which would
  // end the process on a directory others may change, where doctor reports).
  const char* env = std::getenv("NSBOX_PROFILES_DIR");
  std::string dir = *resolved + "/seccomp-profiles";
  if (paths.data_dir.empty() && env && *env) {
    auto trusted = CheckTrustedPath(env, ::geteuid());  // as nsbox run checks it, reported rather than fatal
    if (!trusted.ok())
      return Make("seccomp.profiles", title, Verdict::kFail,
                  fmt::format("$NSBOX_PROFILES_DIR: {}", trusted.status().message()),
                  "point NSBOX_PROFILES_DIR at a directory only you or root can change, or unset it", true);
    dir = *trusted;
  }
  for (const char* name : {"default", "strict"}) {
    auto program = LoadSeccompProfile(name, dir);
    if (!program.ok())
      return Make("seccomp.profiles", title, Verdict::kFail,
                  fmt::format("profile '{}': {}", name, program.status().message()),
                  fmt::format("reinstall nsbox (the profiles belong in {}/seccomp-profiles), or point NSBOX_DATADIR or "
                              "NSBOX_PROFILES_DIR at a directory holding them",
                              NSBOX_DATADIR),
                  true);
  }
  return Make("seccomp.profiles", title, Verdict::kPass,
              fmt::format("{}: default and strict load and compile for this kernel", dir), "", true);
}

Check LanguagesCheck(const HostPaths& paths) {
  const char* title = "language interpreters and compilers (--lang) in the host view";
  auto resolved = paths.data_dir.empty() ? ResolveDataDir() : StatusOr<std::string>(paths.data_dir);
  if (!resolved.ok())
    return Make("languages", title, Verdict::kWarn, resolved.status().message(), "fix rootfs.host first", false);
  std::string file = *resolved + "/rootfs/languages.json";
  auto text = ReadFile(file, 1 << 20);
  if (!text.ok())
    return Make("languages", title, Verdict::kWarn, text.status().message(),
                "point NSBOX_DATADIR at a directory holding rootfs/languages.json", false);
  std::vector<std::string> present, missing;
  try {
    auto table = nlohmann::json::parse(*text);
    for (const auto& [name, entry] : table.items()) {
      if (!entry.is_object() || !entry.contains("argv")) continue;  // the comment, and aliases
      // A compiled language needs its compiler (its program is the compiler's output).
      std::string interpreter = entry.contains("compile") ? entry.at("compile").at("argv").at(0).get<std::string>()
                                                          : entry.at("argv").at(0).get<std::string>();
      if (::access(Join(paths.host_root, interpreter).c_str(), X_OK) == 0)
        present.push_back(fmt::format("{} ({})", name, interpreter));
      else
        missing.push_back(fmt::format("{} ({})", name, interpreter));
    }
  } catch (const nlohmann::json::exception& e) {
    return Make("languages", title, Verdict::kWarn, fmt::format("{}: malformed: {}", file, e.what()),
                "reinstall nsbox's data files", false);
  }
  std::string detail =
      fmt::format("available: {}", present.empty() ? "none" : fmt::format("{}", fmt::join(present, ", ")));
  if (missing.empty()) return Make("languages", title, Verdict::kPass, detail, "", false);
  return Make("languages", title, Verdict::kWarn, fmt::format("{}; missing: {}", detail, fmt::join(missing, ", ")),
              "install the missing interpreters and compilers on the host (e.g. apt-get install python3 nodejs g++), "
              "or use --rootfs with an image that has them (nsbox image build polyglot)",
              false);
}

Check ImageStoreCheck(const HostPaths& paths, const Caller& caller) {
  const char* title = "image store";
  struct stat st;
  if (::stat(paths.image_store.c_str(), &st) != 0)
    return Make("images", title, Verdict::kWarn,
                fmt::format("{}: {}; only --rootfs host and prepared directories can be used", paths.image_store,
                            ErrnoText(errno)),
                fmt::format("create it as root (mkdir -p {}) and build images into it", paths.image_store), false);
  if (!S_ISDIR(st.st_mode))
    return Make("images", title, Verdict::kWarn, fmt::format("{} is not a directory", paths.image_store),
                fmt::format("remove it and create a directory: mkdir -p {}", paths.image_store), false);
  // As nsbox image keeps it (docs/images.md): owned by root, mode 0711: root builds, lists and removes images; any
  // user can reach NAME/rootfs by path to run one.
  const std::string keep = fmt::format("chown root:root {} && chmod 0711 {}", paths.image_store, paths.image_store);
  if (st.st_uid != 0)
    return Make("images", title, Verdict::kWarn,
                fmt::format("{} is owned by uid {}, not root: nsbox image refuses such a store", paths.image_store,
                            st.st_uid),
                keep, false);
  const mode_t search = caller.root() ? S_IXUSR : st.st_gid == caller.gid ? S_IXGRP : S_IXOTH;
  if (!(st.st_mode & search))
    return Make("images", title, Verdict::kWarn,
                fmt::format("{} (mode {:o}) cannot be entered by uid {}: its images cannot be used", paths.image_store,
                            st.st_mode & 07777, caller.uid),
                keep, false);
  const mode_t read = caller.root() ? S_IRUSR : st.st_gid == caller.gid ? S_IRGRP : S_IROTH;
  if (!(st.st_mode & read))
    return Make("images", title, Verdict::kPass,
                fmt::format("{}: images can be used by name (listing, building and removing them is root's)",
                            paths.image_store),
                "", false);
  size_t images = 0;
  if (auto* dir = ::opendir(paths.image_store.c_str())) {
    while (auto* entry = ::readdir(dir))
      if (entry->d_name[0] != '.') ++images;
    ::closedir(dir);
  }
  return Make("images", title, Verdict::kPass,
              fmt::format("{}: {} image(s), {}", paths.image_store, images,
                          caller.root() ? "writable" : "read-only for this user (images can be used, not built)"),
              "", false);
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
