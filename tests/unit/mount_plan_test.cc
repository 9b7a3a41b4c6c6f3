// Unit tests: the mount plan built from a Policy, against a fake host tree in a temp directory.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "sandbox/child.h"
#include "sandbox/spec/mount_plan.h"

using namespace nsbox;
using Kind = MountStep::Kind;
namespace fs = std::filesystem;

namespace {

struct FakeHost {
  fs::path root;
  FakeHost() {
    char tmpl[] = "/tmp/mount-plan-test-XXXXXX";
    root = ::mkdtemp(tmpl);
    fs::create_directories(root / "usr/bin");
    fs::create_directories(root / "etc/ssl/certs");
    fs::create_directory_symlink("usr/bin", root / "bin");
    fs::create_directories(root / "lib64");
    std::ofstream(root / "etc/ld.so.cache") << "cache";
    std::ofstream(root / "etc/shadow") << "secret";
  }
  ~FakeHost() { fs::remove_all(root); }
};

const MountStep* Find(const std::vector<MountStep>& plan, Kind kind, const std::string& target) {
  auto it =
      std::find_if(plan.begin(), plan.end(), [&](const MountStep& s) { return s.kind == kind && s.target == target; });
  return it == plan.end() ? nullptr : &*it;
}

MountPlanInputs Inputs(const Policy* policy, const HostView* view, const std::string& host_root) {
  MountPlanInputs in;
  in.policy = policy;
  in.host_view = view;
  in.host_root = host_root;
  return in;
}

HostView TestView() {
  HostView view;
  view.read_only_binds = {
      {"/usr", false}, {"/etc/ld.so.cache", true}, {"/etc/ssl/certs", true}, {"/etc/missing", true}};
  view.root_links = {"/bin", "/lib64", "/sbin"};
  return view;
}

}  // namespace

TEST_CASE("host view binds /usr read-only, recreates merged-usr links and binds real directories") {
  FakeHost host;
  auto policy = PolicyBuilder().TryBuild();
  HostView view = TestView();
  auto plan = BuildMountPlan(Inputs(&*policy, &view, host.root.string()));
  REQUIRE(plan.ok());
  const MountStep* usr = Find(*plan, Kind::kBindReadOnly, "/usr");
  REQUIRE(usr);
  CHECK(usr->source == (host.root / "usr").string());
  const MountStep* bin = Find(*plan, Kind::kSymlink, "/bin");
  REQUIRE(bin);
  CHECK(bin->data == "usr/bin");
  CHECK(Find(*plan, Kind::kBindReadOnly, "/lib64"));
  CHECK_FALSE(Find(*plan, Kind::kSymlink, "/sbin"));  // absent on the host: nothing
  CHECK(Find(*plan, Kind::kBindReadOnly, "/etc/ld.so.cache"));
  CHECK_FALSE(Find(*plan, Kind::kBindReadOnly, "/etc/missing"));
}

TEST_CASE("the host's /etc secrets never enter the plan; identity files are generated") {
  FakeHost host;
  auto policy = PolicyBuilder().TryBuild();
  HostView view = TestView();
  auto plan = BuildMountPlan(Inputs(&*policy, &view, host.root.string()));
  REQUIRE(plan.ok());
  for (const auto& step : *plan) {
    CHECK(step.source.find("shadow") == std::string::npos);
    CHECK(step.target != "/etc/shadow");
  }
  const MountStep* passwd = Find(*plan, Kind::kFile, "/etc/passwd");
  REQUIRE(passwd);
  CHECK(passwd->data.find("sandbox:x:1000:1000:") != std::string::npos);
  CHECK(Find(*plan, Kind::kFile, "/etc/hosts"));
}

TEST_CASE("proc is fresh with sensitive entries masked and /proc/sys read-only") {
  FakeHost host;
  auto policy = PolicyBuilder().TryBuild();
  HostView view = TestView();
  auto plan = BuildMountPlan(Inputs(&*policy, &view, host.root.string()));
  REQUIRE(plan.ok());
  CHECK(Find(*plan, Kind::kProc, "/proc"));
  CHECK(Find(*plan, Kind::kMaskFile, "/proc/kcore"));
  CHECK(Find(*plan, Kind::kMaskFile, "/proc/sysrq-trigger"));
  CHECK(Find(*plan, Kind::kReadOnly, "/proc/sys"));
  CHECK_FALSE(Find(*plan, Kind::kBindReadOnly, "/sys"));
  // Host facts (issue 24): the boot command line, disks, swap, and the boot id.
  for (const char* path : {"/proc/cmdline", "/proc/partitions", "/proc/diskstats", "/proc/swaps"})
    CHECK(Find(*plan, Kind::kMaskFile, path));
  // The boot id's mask comes after /proc/sys turns read-only: its recursive nodev would make the null device
  // unreadable instead of empty.
  auto index_of = [&](Kind kind, const std::string& target) {
    for (size_t i = 0; i < plan->size(); ++i)
      if ((*plan)[i].kind == kind && (*plan)[i].target == target) return static_cast<long>(i);
    return -1L;
  };
  CHECK(index_of(Kind::kMaskFile, "/proc/sys/kernel/random/boot_id") > index_of(Kind::kReadOnly, "/proc/sys"));
  CHECK(index_of(Kind::kReadOnly, "/proc/sys") >= 0);
}

TEST_CASE("tmpfs mounts carry the size cap, and a workspace dir becomes a writable bind") {
  FakeHost host;
  HostView view = TestView();
  auto policy = PolicyBuilder().SetTmpfsSize(64 << 20).SetWorkspaceDir(host.root.string()).TryBuild();
  REQUIRE(policy.ok());
  auto plan = BuildMountPlan(Inputs(&*policy, &view, host.root.string()));
  REQUIRE(plan.ok());
  const MountStep* tmp = Find(*plan, Kind::kTmpfs, "/tmp");
  REQUIRE(tmp);
  CHECK(tmp->data.find("size=67108864") != std::string::npos);
  const MountStep* ws = Find(*plan, Kind::kBindWritable, "/workspace");
  REQUIRE(ws);
  CHECK(ws->source == host.root.string());
}

TEST_CASE("user binds come last so they may cover anything") {
  FakeHost host;
  HostView view = TestView();
  auto policy = PolicyBuilder().AddReadOnlyBind(host.root.string() + "/usr", "/opt/tools").TryBuild();
  REQUIRE(policy.ok());
  auto plan = BuildMountPlan(Inputs(&*policy, &view, host.root.string()));
  REQUIRE(plan.ok());
  CHECK(plan->back().target == "/opt/tools");
  CHECK(plan->back().kind == Kind::kBindReadOnly);
}

TEST_CASE("bind destinations are normalized; the root, '.', '..' and a second bind at one place are refused") {
  FakeHost host;
  HostView view = TestView();
  const std::string usr = host.root.string() + "/usr";
  auto policy = PolicyBuilder().AddReadOnlyBind(usr, "/opt//tools/").TryBuild();
  REQUIRE(policy.ok());
  CHECK(policy->binds().back().destination == "/opt/tools");
  auto plan = BuildMountPlan(Inputs(&*policy, &view, host.root.string()));
  REQUIRE(plan.ok());
  CHECK(plan->back().target == "/opt/tools");

  auto error_of = [&](PolicyBuilder builder) {
    auto built = builder.TryBuild();
    REQUIRE_FALSE(built.ok());
    return built.status().message();
  };
  CHECK_THAT(error_of(PolicyBuilder().AddReadOnlyBind(usr, "/")), Catch::Contains("whole root"));
  CHECK_THAT(error_of(PolicyBuilder().AddWritableBind(usr, "//")), Catch::Contains("whole root"));
  CHECK_THAT(error_of(PolicyBuilder().AddReadOnlyBind(usr, "/x/.")), Catch::Contains("'.' or '..'"));
  CHECK_THAT(error_of(PolicyBuilder().AddReadOnlyBind(usr, "/x/../etc")), Catch::Contains("'.' or '..'"));
  CHECK_THAT(error_of(PolicyBuilder().AddReadOnlyBind(usr, "x")), Catch::Contains("absolute"));
  CHECK_THAT(error_of(PolicyBuilder().AddReadOnlyBind(usr, "/x").AddWritableBind(usr, "/x/")),
             Catch::Contains("bind destination '/x' is given twice"));
}

TEST_CASE("a prepared root's entries are bound, reserved mount points are not") {
  FakeHost host;
  fs::create_directories(host.root / "proc");
  fs::create_directories(host.root / "tmp");
  auto policy = PolicyBuilder().SetRootfsDir(host.root.string()).TryBuild();
  REQUIRE(policy.ok());
  auto plan = BuildMountPlan(Inputs(&*policy, nullptr, "/"));
  REQUIRE(plan.ok());
  CHECK(Find(*plan, Kind::kBindReadOnly, "/usr"));
  CHECK(Find(*plan, Kind::kSymlink, "/bin"));
  CHECK(Find(*plan, Kind::kBindReadOnly, "/etc/ld.so.cache"));
  CHECK_FALSE(Find(*plan, Kind::kBindReadOnly, "/etc/shadow"));
  CHECK_FALSE(Find(*plan, Kind::kBindReadOnly, "/proc"));
  CHECK_FALSE(Find(*plan, Kind::kBindReadOnly, "/tmp"));
}

TEST_CASE("a prepared root whose /etc is a symbolic link is refused, saying so") {
  // Its entries are bound one by one from inside, where no link in the root is followed: each bind failed with a
  // message that blamed the link's owner.
  FakeHost host;
  fs::rename(host.root / "etc", host.root / "usr/etc");
  fs::create_directory_symlink("usr/etc", host.root / "etc");
  auto policy = PolicyBuilder().SetRootfsDir(host.root.string()).TryBuild();
  REQUIRE(policy.ok());
  auto plan = BuildMountPlan(Inputs(&*policy, nullptr, "/"));
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message() ==
        fmt::format("rootfs '{}': its /etc is a symbolic link; a prepared root needs /etc to be a directory (make it "
                    "one, or move the files it points to there)",
                    host.root.string()));
}

TEST_CASE("policy builder reports its first error once") {
  auto policy = PolicyBuilder().AddReadOnlyBind("/nonexistent-source", "/x").SetTmpfsSize(1).TryBuild();
  REQUIRE_FALSE(policy.ok());
  CHECK(policy.status().message().find("/nonexistent-source") != std::string::npos);
  CHECK_FALSE(PolicyBuilder().AddReadOnlyBind("/usr", "relative").TryBuild().ok());
  CHECK_FALSE(PolicyBuilder().AddReadOnlyBind("/usr", "/a/../etc").TryBuild().ok());
  CHECK_FALSE(PolicyBuilder().SetRootfsDir("/").TryBuild().ok());
}

// The child skips the mkdir -p of a target's parent when the plan itself made that parent and nothing mounted since
// hides it: a wrong "exists" would fail the sandbox's set-up, a missed one only costs a failing mkdir.
TEST_CASE("the child's view of a plan knows which parents the plan made") {
  auto step = [](Kind kind, const std::string& target, bool optional = false) {
    MountStep s{kind, kind == Kind::kBindReadOnly ? "/host" + target : "", target, "", optional};
    return s;
  };
  const std::vector<MountStep> plan = {
      step(Kind::kBindReadOnly, "/usr"),            // 0: directly below the root
      step(Kind::kDir, "/etc/ssl"),                 // 1: /etc not made yet (a directory step makes its parents)
      step(Kind::kFile, "/etc/passwd"),             // 2: /etc made by 1
      step(Kind::kBindReadOnly, "/etc/ssl/certs"),  // 3: /etc/ssl made by 1
      step(Kind::kFile, "/usr/x"),                  // 4: /usr is the host's directory, its content unknown
      step(Kind::kDir, "/tmp/a"),                   // 5: /tmp not made yet
      step(Kind::kTmpfs, "/tmp"),                   // 6: hides /tmp/a
      step(Kind::kFile, "/tmp/a/f"),                // 7
      step(Kind::kBindReadOnly, "/opt/x", true),    // 8: optional: may make nothing
      step(Kind::kFile, "/opt/y"),                  // 9
      step(Kind::kSymlink, "/opt/z"),               // 10: /opt made by 9
      step(Kind::kBindReadOnly, "/etc"),            // 11: hides /etc/ssl
      step(Kind::kFile, "/etc/ssl/g"),              // 12
  };
  const std::vector<bool> expected = {true, false, true, true, false, false, true, false,
                                      false, false, true, true, false};
  auto child = PrepareChildMounts(plan);
  REQUIRE(child.size() == expected.size());
  for (size_t i = 0; i < child.size(); ++i) {
    INFO("step " << i << ": " << child[i].target);
    CHECK(child[i].parent_exists == expected[i]);
  }
}
