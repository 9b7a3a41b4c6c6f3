// nsbox doctor's checks: kernel probes (fork + unshare, seccomp in a child) and the pure verdict logic over what they
// and the host's /proc and /sys files show; every root is injectable so the verdicts are testable on fixture trees.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "src/cli/image_store.h"

namespace nsbox::doctor {

enum class Verdict { kPass, kWarn, kFail };
const char* VerdictName(Verdict verdict);  // "pass" / "warn" / "fail"

struct Check {
  std::string id;      // stable, for scripts: "namespace.user", "cgroup.backend" …
  std::string title;   // for people
  Verdict verdict = Verdict::kPass;
  std::string detail;  // what was found
  std::string fix;     // what to do about a warn or fail; empty on pass
  bool required = false;  // a failure means nsbox cannot run with its defaults
};

// Where the host is looked at. Tests point these at fixture directories.
struct HostPaths {
  std::string proc = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string host_root = "/";  // where the host view's paths and the interpreters are looked up
  std::string data_dir;         // rootfs/host.json and rootfs/languages.json; empty: DataDir()
  std::string image_store = cli::ImageStoreRoot();  // as `nsbox image` resolves it ($NSBOX_IMAGE_STORE)
};

// Who asks: the verdicts differ for root and for an ordinary user.
struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
  bool root() const { return uid == 0; }
};

// The outcome of one kernel probe run in a forked child.
struct ProbeResult {
  bool ok = false;
  int err = 0;          // errno of the failing call, 0 when the child was killed
  std::string step;     // the failing call, e.g. "unshare(CLONE_NEWUSER)"
  std::string Describe() const;  // "unshare(CLONE_NEWUSER): No space left on device (ENOSPC)"
};

// --- probes: each runs in a forked child and changes nothing outside it -----------------------------------------
// A user namespace, with the caller's ids mapped into it (as nsbox maps the sandbox user), and capabilities in it
// (checked by creating a mount namespace there).
ProbeResult ProbeUserNamespace();
// The same, after dropping to an ordinary uid first (root only: answers "can ordinary users?").
ProbeResult ProbeUserNamespaceAs(uid_t uid, gid_t gid);
// unshare(CLONE_NEWUSER | flag): how nsbox creates every other namespace.
ProbeResult ProbeNamespace(int clone_flag, const char* flag_name);
// A fresh proc mounted by pid 1 of a new pid namespace (fails under a /proc with masked entries).
ProbeResult ProbeProcMount();
// A seccomp filter that makes getppid fail with a chosen errno, checked to take effect.
ProbeResult ProbeSeccompFilter();
// SECCOMP_GET_NOTIF_SIZES, then a filter installed with a user-notification listener.
ProbeResult ProbeSeccompNotifySizes();
ProbeResult ProbeSeccompListener();

// --- verdicts -----------------------------------------------------------------------------------------------------
struct KernelVersion {
  int major = 0, minor = 0;
};
std::optional<KernelVersion> ParseKernelRelease(const std::string& release);
Check KernelCheck(const std::string& release);

// The namespace types nsbox creates, in the order the checks report them.
struct NamespaceType {
  const char* name;         // "mount"
  int clone_flag;           // CLONE_NEWNS
  const char* flag_name;    // "CLONE_NEWNS"
  const char* max_sysctl;   // "max_mnt_namespaces" under /proc/sys/user
  const char* kconfig;      // "CONFIG_NAMESPACES" …
};
const std::vector<NamespaceType>& NamespaceTypes();

// The sysctls that govern user namespaces; nullopt where this kernel has no such file.
struct UsernsSysctls {
  std::optional<long> unprivileged_userns_clone;        // kernel.unprivileged_userns_clone (Debian, older kernels)
  std::optional<long> max_user_namespaces;              // user.max_user_namespaces
  std::optional<long> apparmor_restrict_unprivileged;   // kernel.apparmor_restrict_unprivileged_userns (Ubuntu)
};
UsernsSysctls ReadUsernsSysctls(const std::string& proc);
std::optional<long> ReadSysctlNumber(const std::string& proc, const std::string& relative);  // "sys/user/..."

// "namespace.user": can this process create the user namespace every sandbox starts with.
Check UserNamespaceCheck(const ProbeResult& probe, const UsernsSysctls& sysctls);
// "namespace.<type>" for the other types; `userns_ok` false makes them fail for that reason alone.
// `apparmor_restricts`: Ubuntu's restriction applies to this caller, so an EPERM is most likely its doing.
Check NamespaceCheck(const NamespaceType& type, const ProbeResult& probe, bool userns_ok,
                     std::optional<long> max_sysctl_value, bool apparmor_restricts = false);
// "userns.unprivileged": can ordinary users create user namespaces (required when the caller is not root).
Check UnprivilegedUsernsCheck(const Caller& caller, const ProbeResult& unprivileged_probe,
                              const UsernsSysctls& sysctls);
// "userns.owner": whether a root-run sandbox's user namespace is owned by its own leased host uid (sandbox/user_ns.h),
// or by root, who is then charged the namespace counts of every sandbox. `initial_userns`: the caller is in the
// host's user namespace; `kernel_ok`: KernelChecksOpenerForCgroupMoves(), or a cgroup2 host; `missing_caps`:
// MissingNamespaceOwnerCapabilities().
Check NamespaceOwnerCheck(const Caller& caller, bool initial_userns, bool kernel_ok,
                          const std::vector<std::string>& missing_caps);
// "proc.mount": a fresh /proc for the sandbox's pid namespace.
Check ProcMountCheck(const ProbeResult& probe);

// What the cgroup files show, from the point of view of the caller (root: the hierarchy roots; a user: its own
// cgroup, which must be delegated). Mirrors how nsbox's cgroup backends choose where their groups go.
struct CgroupFacts {
  std::string cgroup_root;      // for messages
  bool unified = false;         // cgroup_root itself is a cgroup2 mount
  bool hybrid_v2 = false;       // cgroup2 only at cgroup_root/unified, beside v1 controllers
  std::string v2_dir;           // where nsbox would create its v2 groups
  std::vector<std::string> v2_available;  // cgroup.controllers of v2_dir
  std::vector<std::string> v2_enabled;    // cgroup.subtree_control of v2_dir
  bool v2_writable = false;     // v2_dir and its cgroup.subtree_control writable by the caller
  struct V1Controller {
    std::string name;
    bool mounted = false;
    std::string dir;            // where nsbox would create its v1 groups for this controller
    bool writable = false;
  };
  std::vector<V1Controller> v1;  // memory, pids, cpu, cpuacct
};
CgroupFacts GatherCgroupFacts(const HostPaths& paths, const Caller& caller);
// The engine's own answer (DetectCgroupBackend): the backend it would use, or its error.
struct EngineCgroupAnswer {
  bool usable = false;
  std::string backend_or_error;
};
// "cgroup.v2", "cgroup.v1" (informational) and "cgroup.backend" (required: a backend for the default limits). With
// `engine`, cgroup.backend states the engine's answer, so doctor and `nsbox run` cannot disagree; the facts add the
// detail and the fixes.
std::vector<Check> CgroupChecks(const CgroupFacts& facts, const Caller& caller, const std::string& user_name,
                                const std::optional<EngineCgroupAnswer>& engine = std::nullopt);

Check SeccompFilterCheck(const ProbeResult& probe);
Check SeccompNotifyCheck(const ProbeResult& sizes, const ProbeResult& listener, const std::string& actions_avail);
Check OverlayCheck(const std::string& proc_filesystems);
Check HostRootfsCheck(const HostPaths& paths);
// The default and strict profiles load and compile (a run without them refuses to start).
Check SeccompProfilesCheck(const HostPaths& paths);
Check LanguagesCheck(const HostPaths& paths);
Check ImageStoreCheck(const HostPaths& paths, const Caller& caller);

// Every check, in report order, probing the real kernel.
std::vector<Check> RunAllChecks(const HostPaths& paths, const Caller& caller);
// True when no required check failed: nsbox can run with its defaults.
bool CanRunWithDefaults(const std::vector<Check>& checks);

}  // namespace nsbox::doctor
