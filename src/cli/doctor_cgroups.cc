// nsbox doctor's cgroup checks: what the cgroup files show the caller (GatherCgroupFacts), and the verdicts on the v2
// and v1 hierarchies and on the backend for the default limits.
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sandbox/base/fs.h"
#include "src/cli/doctor_checks.h"
#include "src/cli/doctor_text.h"

namespace nsbox::doctor {

using namespace text;

namespace {

// What the default limits need.
constexpr const char* kLimitControllersV2[] = {"memory", "pids", "cpu"};
constexpr const char* kLimitControllersV1[] = {"memory", "pids", "cpu", "cpuacct"};

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

}  // namespace nsbox::doctor
