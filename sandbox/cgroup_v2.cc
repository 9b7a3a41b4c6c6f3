// The cgroup v2 backend: a group per sandbox with memory.max, memory.swap.max, pids.max, cpu.max; cgroup.kill ends it.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/cgroup_backends.h"
#include "sandbox/cgroup_child.h"
#include "sandbox/cgroup_fs.h"
#include "sandbox/cgroup_kill.h"
#include "sandbox/cgroup_reaper.h"
#include "sandbox/spec/cgroup_text.h"

namespace nsbox::cgroup_internal {
namespace {

constexpr const char* kControllers[] = {"memory", "pids", "cpu"};
// The leaf that holds the group's own processes once its exec groups have memory limits (EnableMemoryBelow).
constexpr const char* kLeafName = "sandbox";

std::string ControllersLine(const std::string& path) {
  auto content = ReadFile(path);
  return content.ok() ? *content : "";
}

bool HasController(const std::string& line, const std::string& controller) {
  size_t at = 0;
  while ((at = line.find(controller, at)) != std::string::npos) {
    bool starts = at == 0 || line[at - 1] == ' ' || line[at - 1] == '+';
    bool ends = at + controller.size() == line.size() || line[at + controller.size()] == ' ' ||
                line[at + controller.size()] == '\n';
    if (starts && ends) return true;
    at += controller.size();
  }
  return false;
}

class CgroupV2 final : public Cgroup {
 public:
  // mkdir_hook: CgroupConfig::fake_fs_mkdir_hook (tests), called after each mkdir of a child group or the leaf.
  CgroupV2(std::string subtree_dir, std::string dir, std::function<void(const std::string&)> mkdir_hook)
      : subtree_dir_(std::move(subtree_dir)), dir_(std::move(dir)), mkdir_hook_(std::move(mkdir_hook)) {}
  ~CgroupV2() override {
    if (removed_) return;
    KillAll();
    if (!Remove().ok() && reaper_) reaper_->Abandon();
  }

  const char* backend() const override { return "cgroup2"; }
  int clone_into_fd() const override { return dir_fd_.get(); }
  std::string path() const override { return dir_; }
  void KeepHold(UniqueFd hold) { hold_ = std::move(hold); }

  Status AddProcess(pid_t pid) override {
    return WriteCgroupFile(dir_ + "/cgroup.procs", std::to_string(pid)).Wrap("moving a process into its cgroup");
  }

  CgroupSelfJoin self_join() const override {
    CgroupSelfJoin join;
    if (procs_fd_) join.fds[join.count++] = procs_fd_.get();
    return join;
  }

  StatusOr<std::unique_ptr<CgroupChild>> CreateChild(const std::string& name, uint64_t memory_max_bytes) override {
    // Without a memory limit no controllers need be enabled in this group's subtree_control, so pid 1 may stay in it
    // next to the child. With one, the memory controller goes to the children (EnableMemoryBelow).
    if (memory_max_bytes > 0) NSBOX_RETURN_IF_ERROR(EnableMemoryBelow().Wrap("setting the exec's memory limit"));
    ChildGroupOptions child;
    child.parent = dir_;
    child.name = name;
    child.join_file = "cgroup.procs";
    child.slot = 0;
    child.kill_file = true;
    child.memory.limit = memory_max_bytes;  // in the child's own directory (memory.parent empty)
    child.mkdir_hook = mkdir_hook_;
    return MakeCgroupChild(child);
  }

  // "No internal processes": a group that gives its children a controller holds no processes itself. The first time
  // an exec asks for a memory limit of its own, the group's processes (the session's pid 1) move into a leaf,
  // kLeafName, which is where later joins of the group go (self_join), and the children get the memory controller.
  Status EnableMemoryBelow() {
    if (HasController(ControllersLine(dir_ + "/cgroup.subtree_control"), "memory")) return OkStatus();
    const std::string leaf = dir_ + "/" + kLeafName;
    if (!leaf_procs_fd_) {
      if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return Status::Errno(fmt::format("mkdir({})", leaf));
      if (mkdir_hook_) mkdir_hook_(leaf);
      leaf_procs_fd_.reset(::open((leaf + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      if (!leaf_procs_fd_) return Status::Errno(fmt::format("open({}/cgroup.procs)", leaf));
    }
    Status enabled;
    for (int attempt = 0; attempt < 10; ++attempt) {  // a process that joins meanwhile makes the write EBUSY
      for (pid_t pid : ReadPids(dir_ + "/cgroup.procs"))
        (void)WriteCgroupFile(leaf + "/cgroup.procs", std::to_string(pid));  // one that exited meanwhile: ESRCH
      int err = 0;
      enabled = WriteCgroupFile(dir_ + "/cgroup.subtree_control", "+memory", &err);
      if (enabled.ok() || err != EBUSY) break;
    }
    NSBOX_RETURN_IF_ERROR(enabled.Wrap("giving the memory controller to the sandbox's exec groups"));
    procs_fd_ = std::move(leaf_procs_fd_);  // later joins go to the leaf
    return OkStatus();
  }

  // cpu.stat holds both the usage and the throttled time: ReadStats reads it once, through here.
  CgroupStats ReadCpuAndEvents(bool with_usage) const {
    CgroupStats stats;
    stats.oom_kills = ReadKeyedOrNote(dir_ + "/memory.events", "oom_kill", &stats.read_errors);
    stats.pids_limit_events = ReadKeyedOrNote(dir_ + "/pids.events", "max", &stats.read_errors);
    stats.pids_limit_hit = stats.pids_limit_events > 0;
    auto cpu_stat = ReadFile(dir_ + "/cpu.stat");
    if (!cpu_stat.ok()) stats.read_errors.push_back(cpu_stat.status().Wrap(dir_ + "/cpu.stat").message());
    auto cpu = ParseKeyedFile(cpu_stat.ok() ? *cpu_stat : "");
    if (with_usage) stats.cpu_usage_us = cpu["usage_usec"];
    stats.cpu_throttled_us = cpu["throttled_usec"];
    return stats;
  }

  CgroupStats ReadCounters() const override { return ReadCpuAndEvents(false); }

  CgroupStats ReadStats() const override {
    CgroupStats stats = ReadCpuAndEvents(true);
    stats.peak_memory_bytes = ReadNumber(dir_ + "/memory.peak");  // Linux 5.19+
    if (stats.peak_memory_bytes == 0)
      stats.peak_memory_bytes = ReadNumberOrNote(dir_ + "/memory.current", &stats.read_errors);
    return stats;
  }

  Status KillAll() override {
    std::string kill_file = dir_ + "/cgroup.kill";
    std::string procs_file = dir_ + "/cgroup.procs";
    const char* failed_call = "";
    int err = RawKillGroup(kill_file.c_str(), procs_file.c_str(), nullptr, &failed_call);
    if (err != 0) return Status::Errno(fmt::format("killing the processes of {}: {}", dir_, failed_call), err);
    return OkStatus();
  }

  bool RemoveInBackground() override { return LeaveRemovalToReaper(&removed_, reaper_.get()); }

  Status Remove() override {
    if (removed_) return OkStatus();
    dir_fd_.reset();
    procs_fd_.reset();
    NSBOX_RETURN_IF_ERROR(RemoveDir(dir_).Wrap("removing the sandbox's cgroup"));
    RemoveSubtreeIfEmpty(subtree_dir_);
    removed_ = true;
    if (reaper_) reaper_->Dismiss();
    return OkStatus();
  }

  LimitsReport ReportFrom(const CgroupLimits& limits, const CgroupStats& stats) const override {
    LimitsReport report;
    report.backend = "cgroup2";
    report.enforced_by = {{"memory", "cgroup2"}, {"pids", "cgroup2"}, {"cpus", "cgroup2"}};
    report.enforced_by["memory_swap"] = swap_limited_ ? "cgroup2" : "none (no swap accounting in this kernel)";
    report.enforced_by["memory_tcp"] = "cgroup2 (socket buffers count in memory.max)";
    report.memory_max_bytes = limits.memory_max_bytes;
    report.pids_max = limits.pids_max;
    report.cpus = limits.cpus;
    report.pids_limit_hit = stats.pids_limit_hit;
    report.cpu_throttled_ms = stats.cpu_throttled_us / 1000;
    report.oom_kills = stats.oom_kills;
    return report;
  }

  Status Apply(const CgroupLimits& limits) {
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/memory.max", std::to_string(limits.memory_max_bytes)));
    std::string swap = std::to_string(limits.memory_swap_max_bytes.value_or(0));
    if (PathExists(dir_ + "/memory.swap.max")) {
      NSBOX_RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/memory.swap.max", swap));
      swap_limited_ = true;
    }
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/pids.max", std::to_string(limits.pids_max)));
    // The kernel takes quotas of at least 1 ms per period.
    uint64_t quota = std::max<uint64_t>(1000, static_cast<uint64_t>(std::llround(limits.cpus * kCpuPeriodUs)));
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(dir_ + "/cpu.max", fmt::format("{} {}", quota, kCpuPeriodUs)));
    return OkStatus();
  }

  Status OpenDirFd() {
    dir_fd_.reset(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir_fd_) return Status::Errno(fmt::format("open({}, O_DIRECTORY)", dir_));
    procs_fd_.reset(::openat(dir_fd_.get(), "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!procs_fd_) return Status::Errno(fmt::format("open({}/cgroup.procs)", dir_));
    return OkStatus();
  }

  // Before the group's mkdir: a group the reaper does not know of could be left behind.
  Status StartReaper(const CgroupConfig& config) {
    ReaperPlan plan;
    plan.kill_file = dir_ + "/cgroup.kill";
    plan.procs_file = dir_ + "/cgroup.procs";
    plan.group_dirs = {dir_};
    plan.subtree_dirs = {subtree_dir_};
    return ArmReaper(config, plan, &reaper_);
  }

 private:
  std::string subtree_dir_;
  std::string dir_;
  UniqueFd hold_;  // HoldGroup: this group is in use, to other nsboxes' sweeps
  UniqueFd dir_fd_;
  UniqueFd procs_fd_;  // cgroup.procs, for self_join(): the group's, or its leaf's (EnableMemoryBelow)
  UniqueFd leaf_procs_fd_;
  std::unique_ptr<Reaper> reaper_;
  bool swap_limited_ = false;
  bool removed_ = false;
  const std::function<void(const std::string&)> mkdir_hook_;  // CgroupConfig::fake_fs_mkdir_hook (tests)
};

// Enables the controllers for dir's children; *err gets the errno of a failure.
Status EnableControllers(const std::string& dir, int* err) {
  std::string enabled = ControllersLine(dir + "/cgroup.subtree_control");
  std::string wanted;
  for (const char* controller : kControllers) {
    if (!HasController(enabled, controller)) wanted += fmt::format("{}+{}", wanted.empty() ? "" : " ", controller);
  }
  if (wanted.empty()) return OkStatus();
  return WriteCgroupFile(dir + "/cgroup.subtree_control", wanted, err);
}

}  // namespace

Status CheckCgroupV2(const CgroupConfig& config, const std::string& parent) {
  (void)config;
  std::string available = ControllersLine(parent + "/cgroup.controllers");
  std::vector<std::string> missing;
  for (const char* controller : kControllers) {
    if (!HasController(available, controller)) missing.push_back(controller);
  }
  if (!missing.empty())
    return Status::Error(fmt::format("controller(s) {} not available in {} (its cgroup.controllers lists \"{}\")",
                                     fmt::join(missing, ", "), parent,
                                     available.empty() ? "" : available.substr(0, available.find('\n'))));
  if (::access((parent + "/cgroup.subtree_control").c_str(), W_OK) != 0 || ::access(parent.c_str(), W_OK) != 0)
    return Status::Error(fmt::format("no write access to {} (not root and not delegated)", parent));
  return OkStatus();
}

StatusOr<std::unique_ptr<Cgroup>> CreateCgroupV2(const CgroupLimits& limits, const CgroupConfig& config,
                                                 const std::string& parent, bool own_cgroup) {
  int err = 0;
  Status enabled = EnableControllers(parent, &err);
  if (!enabled.ok() && err == EBUSY && own_cgroup) {
    // "No internal processes": a delegated cgroup that holds nsbox itself cannot give controllers to
    // children. Move nsbox into a leaf of its own (what systemd's delegation documentation asks for).
    bool created = false;
    std::string leaf = parent + "/" + kSupervisorLeaf;
    NSBOX_RETURN_IF_ERROR(MakeDir(leaf, config, &created, &err));
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(leaf + "/cgroup.procs", "0").Wrap("moving nsbox into " + leaf));
    enabled = EnableControllers(parent, &err);
  }
  NSBOX_RETURN_IF_ERROR(enabled.Wrap("enabling memory, pids and cpu for nsbox's cgroups"));

  std::string subtree_dir = parent + "/" + config.subtree;
  std::string dir = subtree_dir + "/" + NewGroupName();
  // From here on, its destructor removes dir.
  auto group = std::make_unique<CgroupV2>(subtree_dir, dir, config.fake_fs_mkdir_hook);
  if (config.reaper) NSBOX_RETURN_IF_ERROR(group->StartReaper(config));
  NSBOX_RETURN_IF_ERROR(MakeGroupDir(subtree_dir, dir, config, [&] {
    int prepare_err = 0;
    return EnableControllers(subtree_dir, &prepare_err);
  }).Wrap("creating the sandbox's cgroup"));
  auto hold = HoldGroup(dir);  // at once: another nsbox's sweep must see the group as live (IsStaleGroup)
  if (!hold.ok()) return hold.status().Wrap("holding the sandbox's cgroup");
  group->KeepHold(std::move(*hold));
  // A concurrent nsbox may have removed and re-created the subtree between our enabling its controllers and our
  // group appearing in it; until the group's interface files exist, enable them again.
  for (int attempt = 0; attempt < 100 && ::access((dir + "/memory.max").c_str(), F_OK) != 0; ++attempt) {
    int again_err = 0;
    (void)EnableControllers(subtree_dir, &again_err);
    if (::access((dir + "/memory.max").c_str(), F_OK) == 0) break;
    ::usleep(1000);
  }
  NSBOX_RETURN_IF_ERROR(group->Apply(limits).Wrap("setting the sandbox's cgroup limits"));
  NSBOX_RETURN_IF_ERROR(group->OpenDirFd());
  return std::unique_ptr<Cgroup>(std::move(group));
}

void SweepStaleV2(const std::string& parent, const CgroupConfig& config) {
  (void)config;
  std::string subtree_dir = parent + "/" + config.subtree;
  DIR* listing = ::opendir(subtree_dir.c_str());
  if (!listing) return;
  StaleGroupJudge judge;
  std::vector<std::string> stale;
  while (struct dirent* entry = ::readdir(listing)) {
    if (entry->d_type == DT_DIR && judge.IsStale(entry->d_name, subtree_dir + "/" + entry->d_name))
      stale.emplace_back(entry->d_name);
  }
  ::closedir(listing);
  for (const std::string& name : stale) {
    CgroupV2 adopted(subtree_dir, subtree_dir + "/" + name, {});  // its destructor kills and removes
  }
}

}  // namespace nsbox::cgroup_internal
