// Unit tests: nsbox doctor's verdicts (pass/warn/fail, required, fix text) from probe results and fixture /proc, /sys
// and data trees; no privileges and no kernel probes.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "nsbox_config.h"
#include "src/cli/doctor_checks.h"

using namespace nsbox::doctor;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  fs::path root;
  Fixture() {
    char tmpl[] = "/tmp/doctor-test-XXXXXX";
    root = ::mkdtemp(tmpl);
  }
  ~Fixture() { fs::remove_all(root); }
  void Write(const std::string& relative, const std::string& content) {
    fs::create_directories((root / relative).parent_path());
    std::ofstream(root / relative) << content;
  }
  void Executable(const std::string& relative) {
    Write(relative, "#!/bin/sh\n");
    fs::permissions(root / relative, fs::perms::owner_all);
  }
  std::string Path(const std::string& relative = "") const {
    return relative.empty() ? root.string() : (root / relative).string();
  }
};

const Check& Find(const std::vector<Check>& checks, const std::string& id) {
  auto it = std::find_if(checks.begin(), checks.end(), [&](const Check& c) { return c.id == id; });
  REQUIRE(it != checks.end());
  return *it;
}

ProbeResult Failed(int err, std::string step = "unshare(CLONE_NEWUSER)") { return {false, err, std::move(step)}; }
ProbeResult Passed() { return {true, 0, ""}; }

const Caller kRoot{0, 0};
const Caller kUser{1001, 1001};

}  // namespace

TEST_CASE("kernel: older than 5.12 fails naming the version needed, 5.12-5.13 warns, newer passes") {
  Check old = KernelCheck("4.19.0-26-amd64");
  CHECK(old.verdict == Verdict::kFail);
  CHECK(old.required);
  CHECK_THAT(old.fix, Catch::Contains("5.12"));
  CHECK(KernelCheck("5.13.0").verdict == Verdict::kWarn);
  Check current = KernelCheck("6.1.0-18-amd64");
  CHECK(current.verdict == Verdict::kPass);
  CHECK(current.fix.empty());
  CHECK(KernelCheck("not-a-version").verdict == Verdict::kFail);
}

TEST_CASE("user namespace sysctls are read from the proc tree, and absent files stay unknown") {
  Fixture proc;
  proc.Write("sys/user/max_user_namespaces", "0\n");
  proc.Write("sys/kernel/apparmor_restrict_unprivileged_userns", "1\n");
  UsernsSysctls s = ReadUsernsSysctls(proc.Path());
  CHECK(s.max_user_namespaces == 0L);
  CHECK(s.apparmor_restrict_unprivileged == 1L);
  CHECK_FALSE(s.unprivileged_userns_clone.has_value());
}

TEST_CASE("a user namespace refused with ENOSPC under user.max_user_namespaces=0 fails with the sysctl to raise") {
  UsernsSysctls s;
  s.max_user_namespaces = 0;
  Check c = UserNamespaceCheck(Failed(ENOSPC), s);
  CHECK(c.verdict == Verdict::kFail);
  CHECK(c.required);
  CHECK_THAT(c.detail, Catch::Contains("ENOSPC") && Catch::Contains("user.max_user_namespaces is 0"));
  CHECK_THAT(c.fix, Catch::Contains("sysctl -w user.max_user_namespaces="));
}

TEST_CASE("a user namespace refused without a sysctl to blame gets the fix for its errno") {
  CHECK_THAT(UserNamespaceCheck(Failed(EPERM), {}).fix, Catch::Contains("security policy"));
  CHECK_THAT(UserNamespaceCheck(Failed(EINVAL), {}).fix, Catch::Contains("CONFIG_USER_NS"));
  CHECK_THAT(UserNamespaceCheck(Failed(ENOSPC), {}).fix, Catch::Contains("user.max_user_namespaces"));
  CHECK(UserNamespaceCheck(Passed(), {}).verdict == Verdict::kPass);
}

TEST_CASE(
    "unprivileged user namespaces: an ordinary user blocked by kernel.unprivileged_userns_clone fails, required") {
  UsernsSysctls s;
  s.unprivileged_userns_clone = 0;
  Check c = UnprivilegedUsernsCheck(kUser, Failed(EPERM), s);
  CHECK(c.verdict == Verdict::kFail);
  CHECK(c.required);
  CHECK_THAT(c.fix, Catch::Contains("sysctl -w kernel.unprivileged_userns_clone=1"));
}

TEST_CASE("unprivileged user namespaces: Ubuntu's AppArmor restriction is named with a profile and the sysctl") {
  UsernsSysctls s;
  s.apparmor_restrict_unprivileged = 1;
  Check c = UnprivilegedUsernsCheck(kUser, Failed(EACCES, "write(/proc/self/uid_map)"), s);
  CHECK(c.verdict == Verdict::kFail);
  CHECK_THAT(c.detail, Catch::Contains("apparmor_restrict_unprivileged_userns is 1"));
  CHECK_THAT(c.fix, Catch::Contains("userns,") && Catch::Contains("kernel.apparmor_restrict_unprivileged_userns=0"));
}

TEST_CASE("unprivileged user namespaces: for root a blocked ordinary user is a warning, not a failure") {
  UsernsSysctls s;
  s.unprivileged_userns_clone = 0;
  Check c = UnprivilegedUsernsCheck(kRoot, Failed(EPERM), s);
  CHECK(c.verdict == Verdict::kWarn);
  CHECK_FALSE(c.required);
  CHECK_THAT(c.fix, Catch::Contains("unprivileged_userns_clone=1"));
  // The AppArmor switch set but the caller's probe succeeding (a profile allows nsbox): pass.
  UsernsSysctls restricted;
  restricted.apparmor_restrict_unprivileged = 1;
  CHECK(UnprivilegedUsernsCheck(kUser, Passed(), restricted).verdict == Verdict::kPass);
}

TEST_CASE("other namespace types: blamed on the user namespace when it failed, else on their own limit or kconfig") {
  const NamespaceType& net = *std::find_if(NamespaceTypes().begin(), NamespaceTypes().end(),
                                           [](const NamespaceType& t) { return std::string(t.name) == "net"; });
  Check after_userns = NamespaceCheck(net, Failed(ENOSPC), false, std::nullopt);
  CHECK(after_userns.verdict == Verdict::kFail);
  CHECK_THAT(after_userns.fix, Catch::Contains("namespace.user"));
  CHECK_THAT(NamespaceCheck(net, Failed(ENOSPC), true, 0L).fix, Catch::Contains("user.max_net_namespaces"));
  CHECK_THAT(NamespaceCheck(net, Failed(EINVAL), true, std::nullopt).fix, Catch::Contains("CONFIG_NET_NS"));
  CHECK(NamespaceCheck(net, Passed(), true, std::nullopt).verdict == Verdict::kPass);
  CHECK_THAT(NamespaceCheck(net, Failed(EPERM), true, std::nullopt, true).fix, Catch::Contains("apparmor"));
  CHECK_THAT(NamespaceCheck(net, Failed(EPERM), true, std::nullopt, false).fix, Catch::Contains("security policy"));
  CHECK(NamespaceTypes().size() == 6);  // mount, pid, net, ipc, uts, cgroup (user has its own check)
}

TEST_CASE("the namespace owner: root with its capabilities passes; a container's root is warned of shared quotas") {
  Check full = NamespaceOwnerCheck(kRoot, true, true, {});
  CHECK(full.verdict == Verdict::kPass);
  CHECK_THAT(full.detail, Catch::Contains("leased host uid"));
  // A container given CAP_SETUID and CAP_SETGID only: root owns every sandbox's namespace.
  Check container = NamespaceOwnerCheck(kRoot, true, true, {"CAP_SETPCAP", "CAP_SYS_ADMIN", "CAP_KILL"});
  CHECK(container.verdict == Verdict::kWarn);
  CHECK_FALSE(container.required);
  CHECK_THAT(container.detail, Catch::Contains("without CAP_SETPCAP, CAP_SYS_ADMIN, CAP_KILL, root owns"));
  CHECK_THAT(container.fix, Catch::Contains("give nsbox CAP_SETPCAP, CAP_SYS_ADMIN, CAP_KILL"));
  CHECK_THAT(NamespaceOwnerCheck(kRoot, true, false, {}).detail, Catch::Contains("before 5.16"));
  CHECK(NamespaceOwnerCheck(kRoot, false, true, {}).verdict == Verdict::kWarn);
  CHECK_THAT(NamespaceOwnerCheck(kRoot, false, true, {}).detail, Catch::Contains("nested user namespace"));
  // Rootless: the caller owns them, as it must.
  CHECK(NamespaceOwnerCheck(kUser, true, true, {"CAP_SETUID"}).verdict == Verdict::kPass);
}

TEST_CASE("a proc mount refused with EPERM points at the masked /proc of an enclosing sandbox") {
  Check c = ProcMountCheck(Failed(EPERM, "mount(proc, /proc)"));
  CHECK(c.verdict == Verdict::kFail);
  CHECK(c.required);
  CHECK_THAT(c.fix, Catch::Contains("masked"));
  // Refused earlier, at unshare, it is the namespaces' fault, not /proc's.
  CHECK_THAT(ProcMountCheck(Failed(EPERM, "unshare(CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS)")).fix,
             !Catch::Contains("masked"));
}

TEST_CASE("cgroup: a pure v2 host with memory, pids and cpu gives root the cgroup2 backend") {
  Fixture sys, proc;
  sys.Write("cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
  sys.Write("cgroup.subtree_control", "cpu memory pids\n");
  proc.Write("self/cgroup", "0::/init.scope\n");
  HostPaths paths;
  paths.proc = proc.Path();
  paths.cgroup_root = sys.Path();
  CgroupFacts facts = GatherCgroupFacts(paths, kRoot);
  CHECK(facts.unified);
  CHECK(facts.v2_dir == sys.Path());
  auto checks = CgroupChecks(facts, kRoot, "root");
  CHECK(Find(checks, "cgroup.backend").verdict == Verdict::kPass);
  CHECK_THAT(Find(checks, "cgroup.backend").detail, Catch::Contains("cgroup2"));
  CHECK(Find(checks, "cgroup.v1").verdict == Verdict::kPass);  // not needed
}

TEST_CASE("cgroup: a hybrid host warns about v2 without controllers and uses the v1 controllers") {
  Fixture sys, proc;
  sys.Write("unified/cgroup.controllers", "hugetlb\n");
  sys.Write("unified/cgroup.subtree_control", "");
  for (const char* c : {"memory", "pids", "cpu", "cpuacct"}) sys.Write(std::string(c) + "/cgroup.procs", "");
  proc.Write("self/cgroup", "4:memory:/jobs/a\n2:cpuacct:/\n1:cpu:/\n8:pids:/\n0::/\n");
  HostPaths paths;
  paths.proc = proc.Path();
  paths.cgroup_root = sys.Path();
  auto checks = CgroupChecks(GatherCgroupFacts(paths, kRoot), kRoot, "root");
  CHECK(Find(checks, "cgroup.v2").verdict == Verdict::kWarn);
  CHECK_THAT(Find(checks, "cgroup.v2").detail, Catch::Contains("hybrid"));
  CHECK(Find(checks, "cgroup.v1").verdict == Verdict::kPass);
  CHECK_THAT(Find(checks, "cgroup.backend").detail, Catch::Contains("cgroup1"));
}

TEST_CASE("cgroup: an ordinary user's groups go under its own cgroup, in v2 and in each v1 controller") {
  Fixture sys, proc;
  sys.Write("user.slice/user-1001.slice/job.scope/cgroup.controllers", "cpu memory pids\n");
  sys.Write("user.slice/user-1001.slice/job.scope/cgroup.subtree_control", "memory\n");
  sys.Write("cgroup.controllers", "cpu memory pids\n");
  sys.Write("memory/cgroup.procs", "");
  proc.Write("self/cgroup", "4:memory:/delegated\n0::/user.slice/user-1001.slice/job.scope\n");
  HostPaths paths;
  paths.proc = proc.Path();
  paths.cgroup_root = sys.Path();
  CgroupFacts facts = GatherCgroupFacts(paths, kUser);
  CHECK(facts.v2_dir == sys.Path("user.slice/user-1001.slice/job.scope"));
  CHECK(facts.v2_available == std::vector<std::string>{"cpu", "memory", "pids"});
  CHECK(facts.v2_enabled == std::vector<std::string>{"memory"});
  CHECK(facts.v1[0].name == "memory");
  CHECK(facts.v1[0].dir == sys.Path("memory") + "/delegated");
  CHECK_FALSE(facts.v1[1].mounted);  // pids
}

TEST_CASE(
    "cgroup: an ordinary user without a delegated cgroup fails, with systemd-run and the danger option as fixes") {
  CgroupFacts facts;
  facts.cgroup_root = "/sys/fs/cgroup";
  facts.unified = true;
  facts.v2_dir = "/sys/fs/cgroup/user.slice/user-1001.slice/session-1.scope";
  facts.v2_available = {"cpu", "memory", "pids"};
  facts.v2_writable = false;
  auto checks = CgroupChecks(facts, kUser, "alice");
  const Check& v2 = Find(checks, "cgroup.v2");
  CHECK(v2.verdict == Verdict::kWarn);
  CHECK_THAT(v2.detail, Catch::Contains("not delegated"));
  const Check& backend = Find(checks, "cgroup.backend");
  CHECK(backend.verdict == Verdict::kFail);
  CHECK(backend.required);
  CHECK_THAT(backend.fix, Catch::Contains("systemd-run --user --scope -p Delegate=yes") &&
                              Catch::Contains("chown -R alice") &&
                              Catch::Contains("--dangerously-run-without-limits"));
}

TEST_CASE("cgroup: a delegated v2 cgroup lacking cpu is not enough; a writable one with all three is") {
  CgroupFacts facts;
  facts.cgroup_root = "/sys/fs/cgroup";
  facts.unified = true;
  facts.v2_dir = "/sys/fs/cgroup/delegated";
  facts.v2_available = {"memory", "pids"};
  facts.v2_writable = true;
  auto lacking = CgroupChecks(facts, kUser, "alice");
  CHECK_THAT(Find(lacking, "cgroup.v2").detail, Catch::Contains("lacks cpu"));
  CHECK(Find(lacking, "cgroup.backend").verdict == Verdict::kFail);
  facts.v2_available.push_back("cpu");
  CHECK(Find(CgroupChecks(facts, kUser, "alice"), "cgroup.backend").verdict == Verdict::kPass);
}

TEST_CASE("cgroup: writable v1 controllers delegated to a user make a backend; one unwritable does not") {
  CgroupFacts facts;
  facts.cgroup_root = "/sys/fs/cgroup";
  for (const char* c : {"memory", "pids", "cpu", "cpuacct"})
    facts.v1.push_back({c, true, std::string("/sys/fs/cgroup/") + c + "/group", true});
  CHECK(Find(CgroupChecks(facts, kUser, "alice"), "cgroup.backend").verdict == Verdict::kPass);
  facts.v1[2].writable = false;
  auto checks = CgroupChecks(facts, kUser, "alice");
  CHECK(Find(checks, "cgroup.backend").verdict == Verdict::kFail);
  CHECK_THAT(Find(checks, "cgroup.v1").detail, Catch::Contains("/sys/fs/cgroup/cpu/group"));
}

TEST_CASE("cgroup: the engine's own answer decides the backend verdict; the facts still give the fixes") {
  CgroupFacts facts;
  facts.cgroup_root = "/sys/fs/cgroup";
  for (const char* c : {"memory", "pids", "cpu", "cpuacct"})
    facts.v1.push_back({c, true, std::string("/sys/fs/cgroup/") + c + "/group", true});
  auto agreed = CgroupChecks(facts, kUser, "alice", EngineCgroupAnswer{true, "cgroup1"});
  CHECK(Find(agreed, "cgroup.backend").verdict == Verdict::kPass);
  CHECK_THAT(Find(agreed, "cgroup.backend").detail, Catch::Contains("cgroup1, as nsbox run will use it"));
  auto refused = CgroupChecks(facts, kUser, "alice", EngineCgroupAnswer{false, "cgroup v1: freezer is odd"});
  CHECK(Find(refused, "cgroup.backend").verdict == Verdict::kFail);
  CHECK(Find(refused, "cgroup.backend").detail == "cgroup v1: freezer is odd");
  // Both agree nothing is usable: the facts' own detail and fixes.
  facts.v1[0].writable = false;
  auto neither = CgroupChecks(facts, kUser, "alice", EngineCgroupAnswer{false, "no usable cgroup backend"});
  CHECK_THAT(Find(neither, "cgroup.backend").fix, Catch::Contains("Delegate=yes"));
}

TEST_CASE("cgroup: no cgroup file system at all (inside a sandbox) fails naming the missing mount") {
  Fixture sys, proc;
  proc.Write("self/cgroup", "0::/\n");
  HostPaths paths;
  paths.proc = proc.Path();
  paths.cgroup_root = sys.Path("absent");
  auto checks = CgroupChecks(GatherCgroupFacts(paths, kUser), kUser, "alice");
  const Check& backend = Find(checks, "cgroup.backend");
  CHECK(backend.verdict == Verdict::kFail);
  CHECK_THAT(backend.detail, Catch::Contains("no cgroup file system"));
}

TEST_CASE("seccomp: filters that cannot be installed, and a listener refused with EBUSY, fail with their fixes") {
  Check filter = SeccompFilterCheck(Failed(EINVAL, "seccomp_load"));
  CHECK(filter.verdict == Verdict::kFail);
  CHECK_THAT(filter.fix, Catch::Contains("CONFIG_SECCOMP_FILTER"));
  Check nested = SeccompNotifyCheck(Passed(), Failed(EBUSY, "seccomp_load(SECCOMP_FILTER_FLAG_NEW_LISTENER)"), "allow");
  CHECK(nested.verdict == Verdict::kFail);
  CHECK(nested.required);
  CHECK_THAT(nested.fix, Catch::Contains("already has a listener"));
  CHECK(SeccompNotifyCheck(Passed(), Passed(), "user_notif").verdict == Verdict::kPass);
}

TEST_CASE("overlayfs is found in /proc/filesystems; its absence is a warning with modprobe as the fix") {
  CHECK(OverlayCheck("nodev\ttmpfs\nnodev\toverlay\n").verdict == Verdict::kPass);
  Check missing = OverlayCheck("nodev\ttmpfs\n\text4\n");
  CHECK(missing.verdict == Verdict::kWarn);
  CHECK_FALSE(missing.required);
  CHECK_THAT(missing.fix, Catch::Contains("modprobe overlay"));
}

TEST_CASE("the host view passes when its required paths exist and fails naming those that do not") {
  Fixture data, host;
  data.Write("rootfs/host.json",
             R"({"read_only_binds": [{"path": "/usr"}, {"path": "/etc/mime.types", "optional": true}],
                 "root_links": {"paths": ["/bin"]}})");
  HostPaths paths;
  paths.data_dir = data.Path();
  paths.host_root = host.Path();
  Check missing = HostRootfsCheck(paths);
  CHECK(missing.verdict == Verdict::kFail);
  CHECK_THAT(missing.detail, Catch::Contains("/usr"));
  fs::create_directories(host.root / "usr");
  host.Executable("bin/sh");
  CHECK(HostRootfsCheck(paths).verdict == Verdict::kPass);
  paths.data_dir = data.Path("nowhere");
  CHECK_THAT(HostRootfsCheck(paths).fix, Catch::Contains("NSBOX_DATADIR"));
}

TEST_CASE("the seccomp profiles check fails naming a missing or broken profile; the shipped ones pass") {
  // nsbox run refuses to start without them: doctor said ok.
  Fixture data;
  HostPaths paths;
  paths.data_dir = data.Path();
  Check missing = SeccompProfilesCheck(paths);
  CHECK(missing.verdict == Verdict::kFail);
  CHECK(missing.required);
  CHECK_THAT(missing.detail, Catch::StartsWith("profile 'default': "));
  CHECK_THAT(missing.fix, Catch::Contains("NSBOX_DATADIR"));
  std::filesystem::create_directories(data.root / "seccomp-profiles");
  std::filesystem::copy_file(std::string(NSBOX_SOURCE_DIR) + "/seccomp-profiles/default.json",
                             data.root / "seccomp-profiles/default.json");
  data.Write("seccomp-profiles/strict.json", "{ not json");
  CHECK_THAT(SeccompProfilesCheck(paths).detail, Catch::StartsWith("profile 'strict': "));
  paths.data_dir = NSBOX_SOURCE_DIR;
  CHECK(SeccompProfilesCheck(paths).verdict == Verdict::kPass);
  // $NSBOX_PROFILES_DIR that others may change: nsbox run refuses it, so doctor fails it (it passed).
  std::filesystem::create_directories(data.root / "open");
  ::chmod((data.root / "open").c_str(), 0777);
  ::setenv("NSBOX_PROFILES_DIR", (data.root / "open").c_str(), 1);
  Check open = SeccompProfilesCheck(HostPaths{});
  ::unsetenv("NSBOX_PROFILES_DIR");
  CHECK(open.verdict == Verdict::kFail);
  CHECK_THAT(open.detail, Catch::Contains("writable by others"));
}

TEST_CASE("languages: present interpreters and compilers are listed, missing ones warn with how to install them") {
  Fixture data, host;
  data.Write("rootfs/languages.json",
             R"({"comment": "x", "python": {"argv": ["/usr/bin/python3"], "file": "m.py"},
                 "python3": {"alias": "python"}, "node": {"argv": ["/usr/bin/node"], "file": "m.js"},
                 "c": {"compile": {"argv": ["/usr/bin/gcc"], "source": "m.c", "output": "m"}, "argv": ["{output}"]}})");
  host.Executable("usr/bin/python3");
  HostPaths paths;
  paths.data_dir = data.Path();
  paths.host_root = host.Path();
  Check c = LanguagesCheck(paths);
  CHECK(c.verdict == Verdict::kWarn);
  CHECK_FALSE(c.required);
  CHECK_THAT(c.detail, Catch::Contains("available: python (/usr/bin/python3)") && Catch::Contains("missing: ") &&
                           Catch::Contains("node (/usr/bin/node)") && Catch::Contains("c (/usr/bin/gcc)"));
  host.Executable("usr/bin/node");
  host.Executable("usr/bin/gcc");
  CHECK(LanguagesCheck(paths).verdict == Verdict::kPass);
}

TEST_CASE("image store: missing is a warning; present counts its images") {
  Fixture store;
  HostPaths paths;
  paths.image_store = store.Path("images");
  Check missing = ImageStoreCheck(paths, kRoot);
  CHECK(missing.verdict == Verdict::kWarn);
  CHECK_THAT(missing.fix, Catch::Contains("mkdir -p " + paths.image_store));
  fs::create_directories(store.root / "images/python");
  fs::create_directories(store.root / "images/node");
  Check present = ImageStoreCheck(paths, kRoot);
  CHECK(present.verdict == Verdict::kPass);
  CHECK_THAT(present.detail, Catch::Contains("2 image(s)"));
}

TEST_CASE("image store: judged as nsbox image keeps it, root-owned 0711, for root and for a user") {
  Fixture store;
  HostPaths paths;
  paths.image_store = store.Path("images");
  fs::create_directories(store.root / "images/python");
  REQUIRE(::chmod(paths.image_store.c_str(), 0711) == 0);
  const Caller user{1000, 1000};
  Check kept = ImageStoreCheck(paths, user);  // the docs' mode: usable by name, not listed
  CHECK(kept.verdict == Verdict::kPass);
  CHECK_THAT(kept.detail, Catch::Contains("images can be used by name"));
  CHECK(ImageStoreCheck(paths, kRoot).verdict == Verdict::kPass);
  REQUIRE(::chmod(paths.image_store.c_str(), 0700) == 0);
  Check shut = ImageStoreCheck(paths, user);
  CHECK(shut.verdict == Verdict::kWarn);
  CHECK_THAT(shut.detail, Catch::Contains("cannot be entered by uid 1000"));
  CHECK_THAT(shut.fix, Catch::Contains("chmod 0711 " + paths.image_store));
  REQUIRE(::chown(paths.image_store.c_str(), 1000, 1000) == 0);  // nsbox image refuses a store root does not own
  Check foreign = ImageStoreCheck(paths, kRoot);
  CHECK(foreign.verdict == Verdict::kWarn);
  CHECK_THAT(foreign.detail, Catch::Contains("owned by uid 1000, not root"));
  CHECK_THAT(foreign.fix, Catch::StartsWith("chown root:root " + paths.image_store));
}

TEST_CASE("image store: doctor looks where nsbox image does, $NSBOX_IMAGE_STORE included") {
  Fixture store;
  fs::create_directories(store.root / "images/python");
  ::setenv("NSBOX_IMAGE_STORE", store.Path("images").c_str(), 1);
  HostPaths paths;
  Check check = ImageStoreCheck(paths, kRoot);
  ::unsetenv("NSBOX_IMAGE_STORE");
  CHECK(paths.image_store == store.Path("images"));
  CHECK(check.verdict == Verdict::kPass);
  CHECK_THAT(check.detail, Catch::StartsWith(store.Path("images") + ": 1 image(s)"));
  CHECK(HostPaths{}.image_store == "/var/lib/nsbox/images");
}

TEST_CASE(
    "nsbox can run with its defaults unless a required check fails; warnings and optional failures do not count") {
  std::vector<Check> checks = {{"a", "", Verdict::kPass, "", "", true},
                               {"b", "", Verdict::kWarn, "", "x", true},
                               {"c", "", Verdict::kFail, "", "x", false}};
  CHECK(CanRunWithDefaults(checks));
  checks.push_back({"d", "", Verdict::kFail, "", "x", true});
  CHECK_FALSE(CanRunWithDefaults(checks));
}
