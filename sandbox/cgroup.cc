// Cgroup backend detection and placement: which backend, where its groups go, and the group's creation.
#include "sandbox/cgroup.h"

#include <cerrno>
#include <unistd.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/cgroup_backends.h"
#include "sandbox/spec/cgroup_text.h"

namespace nsbox {

using namespace cgroup_internal;

namespace {

constexpr const char* kFixHint =
    "To give nsbox cgroups: run it as root; or, as a user, start it inside a delegated cgroup "
    "(systemd-run --user --scope -p Delegate=yes nsbox ...) on a cgroup v2 host; on a hybrid or v1 host, have root "
    "delegate a group in each of memory, pids, cpu and cpuacct to you (mkdir, chown -R, and start nsbox in it: "
    "docs/rootless.md), or boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2 with every controller).";

constexpr const char* kRootFixHint =
    "To give nsbox cgroups: start it inside a delegated cgroup (systemd-run --scope -p Delegate=yes nsbox ...) on a "
    "cgroup v2 host; on a hybrid or v1 host, boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2 with every "
    "controller); in a container, give it a writable delegated cgroup (docs/containers.md).";

bool UseOwnCgroup(const CgroupConfig& config) {
  switch (config.placement) {
    case CgroupConfig::Placement::kRootSubtree: return false;
    case CgroupConfig::Placement::kOwnCgroup: return true;
    case CgroupConfig::Placement::kAuto: break;
  }
  return ::geteuid() != 0;
}

std::string JoinPath(const std::string& base, const std::string& relative) {
  if (relative.empty() || relative == "/") return base;
  return relative.front() == '/' ? base + relative : base + "/" + relative;
}

struct Plan {
  bool v2 = false;
  std::string v2_parent;
  V1Dirs v1;
};

// Finds a usable backend and where its groups go; the error names everything missing.
StatusOr<Plan> Detect(const CgroupConfig& config) {
  auto self_content = ReadFile(config.proc_self_cgroup);
  if (!self_content.ok()) return self_content.status().Wrap("reading nsbox's own cgroup");
  SelfCgroup self = ParseSelfCgroup(*self_content);
  bool own = UseOwnCgroup(config);
  std::vector<std::string> problems;

  if (config.backend != CgroupConfig::Backend::kV1) {
    if (!self.unified_path) {
      problems.push_back("cgroup v2: nsbox is in no cgroup v2 hierarchy (no \"0::\" line in " +
                         config.proc_self_cgroup + ")");
    } else if (!PathExists(config.cgroup_root + "/cgroup.controllers")) {
      std::string note = PathExists(config.cgroup_root + "/unified/cgroup.controllers")
                             ? " (a hybrid host: the v2 tree at " + config.cgroup_root + "/unified gets no controllers)"
                             : "";
      problems.push_back("cgroup v2: " + config.cgroup_root + " is not a cgroup2 mount" + note);
    } else {
      std::string own_path = *self.unified_path;
      // After its first sandbox a non-root nsbox sits in the "supervisor" leaf it made; its groups still
      // go next to that leaf.
      size_t slash = own_path.rfind('/');
      if (slash != std::string::npos && own_path.compare(slash + 1, std::string::npos, kSupervisorLeaf) == 0)
        own_path.resize(slash);
      std::string parent = own ? JoinPath(config.cgroup_root, own_path) : config.cgroup_root;
      Status usable = CheckCgroupV2(config, parent);
      if (usable.ok()) {
        Plan plan;
        plan.v2 = true;
        plan.v2_parent = parent;
        return plan;
      }
      problems.push_back("cgroup v2: " + usable.message());
    }
  }

  if (config.backend != CgroupConfig::Backend::kV2) {
    std::vector<std::string> missing;
    auto dir_of = [&](const std::string& controller) -> std::string {
      auto path = self.v1_paths.find(controller);
      if (path == self.v1_paths.end()) {
        missing.push_back(controller);
        return "";
      }
      std::string mount = config.cgroup_root + "/" + controller;  // co-mounted hierarchies have a symlink per name
      if (!PathExists(mount + "/cgroup.procs") &&
          !PathExists((mount = config.cgroup_root + "/" + self.v1_mount_dir[controller]) + "/cgroup.procs")) {
        missing.push_back(controller + " (not mounted at " + config.cgroup_root + "/" + controller + ")");
        return "";
      }
      return own ? JoinPath(mount, path->second) : mount;
    };
    Plan plan;
    plan.v1.memory = dir_of("memory");
    plan.v1.pids = dir_of("pids");
    plan.v1.cpu = dir_of("cpu");
    plan.v1.cpuacct = dir_of("cpuacct");
    if (self.v1_paths.count("freezer")) {
      std::vector<std::string> ignored;
      std::swap(ignored, missing);
      plan.v1.freezer = dir_of("freezer");  // optional: makes the kill race-free, not required
      std::swap(ignored, missing);
      // So is a freezer the caller may not write (a user given the four limit controllers only), or whose own
      // `tasks` it may not (a chown without -R; see below): it is left out as an unmounted one is, rather than failing
      // the sandbox at its mkdir or its join.
      if (!plan.v1.freezer.empty() &&
          (::access(plan.v1.freezer.c_str(), W_OK) != 0 || ::access((plan.v1.freezer + "/tasks").c_str(), W_OK) != 0))
        plan.v1.freezer.clear();
    }
    if (missing.empty()) {
      std::vector<std::string> unwritable;
      bool read_only_mount = false;
      // The directory, for the sandboxes' groups, and its own `tasks`: pid 1 leaves the memory group for it
      // (leave_join), so a group delegated with a plain chown of the directory (not -R) serves no sandbox.
      for (const std::string* dir : {&plan.v1.memory, &plan.v1.pids, &plan.v1.cpu, &plan.v1.cpuacct}) {
        if (dir->empty()) continue;
        for (const std::string& path : {*dir, *dir + "/tasks"}) {
          if (::access(path.c_str(), W_OK) == 0) continue;
          unwritable.push_back(path);
          read_only_mount = read_only_mount || errno == EROFS;
          break;
        }
      }
      if (unwritable.empty()) return plan;
      // EROFS even for root: a container engine mounted the controllers read-only (docs/containers.md).
      problems.push_back(fmt::format("cgroup v1: no write access to {} ({})", fmt::join(unwritable, ", "),
                                     read_only_mount ? "a read-only mount, as a container engine makes it: give the "
                                                       "container a writable delegated cgroup"
                                                     : "not root and not delegated"));
    } else {
      problems.push_back(fmt::format("cgroup v1: controller(s) missing: {}", fmt::join(missing, ", ")));
    }
  }
  // "Run it as root" is no fix for root: its cgroups are read-only or missing, which only the host can change.
  return Status::Error(fmt::format("no usable cgroup backend for memory, pids and CPU limits. {}. {}{}",
                                   fmt::join(problems, "; "), ::geteuid() == 0 ? kRootFixHint : kFixHint,
                                   kRunWithoutLimitsHint));
}

}  // namespace

StatusOr<std::string> DetectCgroupBackend(const CgroupConfig& config) {
  auto plan = Detect(config);
  if (!plan.ok()) return plan.status();
  return std::string(plan->v2 ? "cgroup2" : "cgroup1");
}

StatusOr<std::unique_ptr<Cgroup>> CreateSandboxCgroup(const CgroupLimits& limits, const CgroupConfig& config) {
  if (config.subtree.empty() || config.subtree.find('/') != std::string::npos || config.subtree == "." ||
      config.subtree == "..")
    return Status::Error(fmt::format("cgroup subtree \"{}\" must be one directory name", config.subtree));
  if (limits.cpus < 0.01)
    return Status::Error(fmt::format("CgroupLimits::cpus {} is below the minimum of 0.01", limits.cpus));
  auto plan = Detect(config);
  if (!plan.ok()) return plan.status();
  if (plan->v2) {
    if (config.sweep_stale) SweepStaleV2(plan->v2_parent, config);
    return CreateCgroupV2(limits, config, plan->v2_parent, UseOwnCgroup(config));
  }
  // Stale groups are looked for in every hierarchy, whichever this group uses.
  if (config.sweep_stale) SweepStaleV1(plan->v1, config);
  V1Dirs used = plan->v1;
  if (!config.v1_cpu_accounting) used.cpuacct.clear();
  if (!config.v1_freezer) used.freezer.clear();
  return CreateCgroupV1(limits, config, used);
}

}  // namespace nsbox
