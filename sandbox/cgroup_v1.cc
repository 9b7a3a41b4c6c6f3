// The cgroup v1 backend for hybrid hosts: a group per sandbox in each of memory, pids, cpu, cpuacct (and freezer).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

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

// A sixteenth of the host's hard limit for the TCP buffers of all sockets together (net.ipv4.tcp_mem's third field,
// in pages), read once; 0 when unreadable. Every sandbox's socket memory counts there as well as in its group.
uint64_t HostTcpMemShare() {
  static const uint64_t share = [] {
    auto text = ReadFile("/proc/sys/net/ipv4/tcp_mem", 256);
    unsigned long long low = 0, pressure = 0, high = 0;
    if (!text.ok() || std::sscanf(text->c_str(), "%llu %llu %llu", &low, &pressure, &high) != 3) return uint64_t{0};
    return static_cast<uint64_t>(high) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) / 16;
  }();
  return share;
}

// One hierarchy's copy of the sandbox's group. Co-mounted controllers (cpu,cpuacct) share one.
struct Hierarchy {
  std::string dir;
};

class CgroupV1 final : public Cgroup {
 public:
  // parents: the hierarchy directories that hold the group, "<subtree>-<name>" in each (v1 has no rule against
  // groups next to processes, so no subtree directory is needed: one mkdir and one rmdir per hierarchy instead of
  // two); the same hierarchy reached twice counts once.
  // mkdir_hook: CgroupConfig::fake_fs_mkdir_hook (tests), called after each mkdir of a child group.
  CgroupV1(const V1Dirs& parents, const std::string& subtree, const std::string& name,
           std::function<void(const std::string&)> mkdir_hook)
      : mkdir_hook_(std::move(mkdir_hook)) {
    auto add = [&](const std::string& parent) -> std::string {
      if (parent.empty()) return "";
      std::string dir = parent + "/" + subtree + "-" + name;
      // One stat, following the symlink of a co-mounted controller's second name: the directory's identity.
      struct stat st;
      std::string key = ::stat(parent.c_str(), &st) == 0 ? fmt::format("{}:{}", st.st_dev, st.st_ino) : parent;
      if (seen_.insert(key).second) hierarchies_.push_back({dir});
      return dir;
    };
    memory_dir_ = add(parents.memory);
    pids_dir_ = add(parents.pids);
    cpu_dir_ = add(parents.cpu);
    cpuacct_dir_ = add(parents.cpuacct);
    freezer_dir_ = add(parents.freezer);
    oom_control_ = ControlFile(memory_dir_ + "/memory.oom_control");
    max_usage_ = ControlFile(memory_dir_ + "/memory.max_usage_in_bytes");
    pids_events_ = ControlFile(pids_dir_ + "/pids.events");
    cpu_stat_ = ControlFile(cpu_dir_ + "/cpu.stat");
    cpuacct_usage_ = ControlFile(cpuacct_dir_ + "/cpuacct.usage");
    // The pids group holds every process of the sandbox: pid 1 is not in the memory group (ChildMain says why).
    all_procs_dir_ = !pids_dir_.empty() ? pids_dir_ : memory_dir_;
    all_procs_ = ControlFile(all_procs_dir_ + "/cgroup.procs");
  }
  ~CgroupV1() override {
    if (removed_) return;
    KillAll();
    if (!Remove().ok() && reaper_) reaper_->Abandon();
  }

  const char* backend() const override { return "cgroup1"; }
  std::string path() const override { return memory_dir_; }
  void KeepHold(UniqueFd hold) { hold_ = std::move(hold); }

  CgroupSelfJoin self_join() const override { return Join(tasks_fds_); }
  CgroupSelfJoin leave_join() const override { return Join(parent_tasks_fds_); }

  // Opens each hierarchy's `tasks` file for self_join(), and its parent's for leave_join().
  Status OpenTasksFiles() {
    if (hierarchies_.size() > static_cast<size_t>(CgroupSelfJoin::kMax))
      return Status::Error(fmt::format("{} cgroup v1 hierarchies; at most {} are supported", hierarchies_.size(),
                                       CgroupSelfJoin::kMax));
    for (const Hierarchy& hierarchy : hierarchies_) {
      std::string path = hierarchy.dir + "/tasks";
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd) return Status::Errno(fmt::format("open({})", path));
      tasks_fds_.push_back(std::move(fd));
      std::string parent_tasks = hierarchy.dir.substr(0, hierarchy.dir.rfind('/')) + "/tasks";
      UniqueFd parent_fd(::open(parent_tasks.c_str(), O_WRONLY | O_CLOEXEC));
      if (!parent_fd) return Status::Errno(fmt::format("open({})", parent_tasks));
      parent_tasks_fds_.push_back(std::move(parent_fd));
    }
    return OkStatus();
  }

  Status AddProcess(pid_t pid) override {
    for (const Hierarchy& hierarchy : hierarchies_) {
      NSBOX_RETURN_IF_ERROR(WriteCgroupFile(hierarchy.dir + "/cgroup.procs", std::to_string(pid))
                                .Wrap("moving a process into its cgroup"));
    }
    return OkStatus();
  }

  StatusOr<std::unique_ptr<CgroupChild>> CreateChild(const std::string& name, uint64_t memory_max_bytes) override {
    // The freezer's group where there is one: its kill cannot be raced by a fork bomb. Else the pids group.
    const std::string& parent = !freezer_dir_.empty() ? freezer_dir_ : pids_dir_;
    if (parent.empty()) return Status::Error("no freezer or pids cgroup to hold an exec's processes");
    const CgroupSelfJoin join = self_join();
    int slot = -1;
    for (size_t i = 0; i < hierarchies_.size(); ++i)
      if (hierarchies_[i].dir == parent) slot = static_cast<int>(i);
    // A memory limit of its own: a group in the memory hierarchy as well (a hierarchy of its own on v1).
    ChildMemory memory{
        .limit = memory_max_bytes, .parent = memory_dir_, .slot = join.memory_index, .memsw = swap_limited_};
    if (memory_max_bytes > 0 && (memory_dir_ == parent || join.memory_index < 0))
      return Status::Error(
          "the memory controller shares a hierarchy with the exec's group; no memory limit of its own");
    ChildGroupOptions child;
    child.parent = parent;
    child.name = name;
    child.join_file = "tasks";
    child.join = join;
    child.slot = slot;
    child.freezer = parent == freezer_dir_;
    child.memory = memory;
    child.mkdir_hook = mkdir_hook_;
    return MakeCgroupChild(child);
  }

  CgroupStats ReadCounters() const override {
    CgroupStats stats;
    stats.oom_kills = oom_control_.KeyedOrNote("oom_kill", &stats.read_errors);  // Linux 4.13+
    stats.pids_limit_events = pids_events_.KeyedOrNote("max", &stats.read_errors);
    stats.pids_limit_hit = stats.pids_limit_events > 0;
    stats.cpu_throttled_us = cpu_stat_.KeyedOrNote("throttled_time", &stats.read_errors) / 1000;
    return stats;
  }

  CgroupStats ReadStats() const override {
    CgroupStats stats = ReadCounters();
    stats.peak_memory_bytes = max_usage_.NumberOrNote(&stats.read_errors);
    if (!cpuacct_dir_.empty()) stats.cpu_usage_us = cpuacct_usage_.NumberOrNote(&stats.read_errors) / 1000;
    return stats;
  }

  // The files ReadStats and KillAll read, opened while the group is new (a run makes it while its child builds the
  // root), so that reading them at the end is cheap.
  void OpenControlFiles() {
    for (ControlFile* file : {&oom_control_, &max_usage_, &pids_events_, &cpu_stat_, &all_procs_}) file->Open();
    if (!cpuacct_dir_.empty()) cpuacct_usage_.Open();
  }

  Status KillAll() override {
    if (all_procs_.Empty() == 1) return OkStatus();  // the usual case: every process is gone already
    // The pids group lists every process; else read the list from the first group that still exists.
    std::string procs_file;
    if (PathExists(all_procs_dir_)) procs_file = all_procs_dir_ + "/cgroup.procs";
    for (const Hierarchy& hierarchy : hierarchies_) {
      if (procs_file.empty() && PathExists(hierarchy.dir)) procs_file = hierarchy.dir + "/cgroup.procs";
    }
    if (procs_file.empty()) return OkStatus();
    std::string freezer_state =
        freezer_dir_.empty() || !PathExists(freezer_dir_) ? "" : freezer_dir_ + "/freezer.state";
    const char* failed_call = "";
    int err = RawKillGroup(nullptr, procs_file.c_str(), freezer_state.c_str(), &failed_call);
    if (err != 0) return Status::Errno(fmt::format("killing the processes of {}: {}", memory_dir_, failed_call), err);
    return OkStatus();
  }

  bool RemoveInBackground() override { return LeaveRemovalToReaper(&removed_, reaper_.get()); }

  Status Remove() override {
    if (removed_) return OkStatus();
    Status first_error;
    for (const Hierarchy& hierarchy : hierarchies_) {
      Status removed = RemoveDir(hierarchy.dir);
      if (!removed.ok() && first_error.ok()) first_error = removed.Wrap("removing the sandbox's cgroup");
    }
    if (!first_error.ok()) return first_error;
    removed_ = true;
    if (reaper_) reaper_->Dismiss();
    return OkStatus();
  }

  LimitsReport ReportFrom(const CgroupLimits& limits, const CgroupStats& stats) const override {
    LimitsReport report;
    report.backend = "cgroup1";
    report.enforced_by = {{"memory", "cgroup1"}, {"pids", "cgroup1"}, {"cpus", "cgroup1"}};
    report.enforced_by["memory_swap"] = swap_limited_ ? "cgroup1" : "none (no swap accounting in this kernel)";
    report.enforced_by["memory_tcp"] = "cgroup1 (memory.kmem.tcp: the memory limit again, at most 1/16 of tcp_mem)";
    report.memory_max_bytes = limits.memory_max_bytes;
    report.pids_max = limits.pids_max;
    report.cpus = limits.cpus;
    report.pids_limit_hit = stats.pids_limit_hit;
    report.cpu_throttled_ms = stats.cpu_throttled_us / 1000;
    report.oom_kills = stats.oom_kills;
    return report;
  }

  const std::vector<Hierarchy>& hierarchies() const { return hierarchies_; }

 private:
  // One descriptor per hierarchy, in the order of hierarchies_, the memory controller's marked.
  CgroupSelfJoin Join(const std::vector<UniqueFd>& fds) const {
    CgroupSelfJoin join;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (hierarchies_[i].dir == memory_dir_) join.memory_index = join.count;
      join.fds[join.count++] = fds[i].get();
    }
    return join;
  }

 public:

  Status Apply(const CgroupLimits& limits) {
    // memory.memsw (memory plus swap) may never be below memory.limit_in_bytes: set the memory limit first.
    NSBOX_RETURN_IF_ERROR(
        WriteCgroupFile(memory_dir_ + "/memory.limit_in_bytes", std::to_string(limits.memory_max_bytes)));
    // No such file: the kernel keeps no swap accounting (swapaccount=0), and there is no swap limit to set.
    const uint64_t swap = limits.memory_swap_max_bytes.value_or(0);
    if (swap > UINT64_MAX - limits.memory_max_bytes)
      return Status::Error(fmt::format("a swap limit of {} bytes: memory plus swap overflows", swap));
    uint64_t memsw = limits.memory_max_bytes + swap;
    int memsw_err = 0;
    Status memsw_set = WriteCgroupFile(memory_dir_ + "/memory.memsw.limit_in_bytes", std::to_string(memsw), &memsw_err);
    if (!memsw_set.ok() && memsw_err != ENOENT) return memsw_set;
    swap_limited_ = memsw_set.ok();
    // v1 keeps socket buffers out of memory.limit_in_bytes: a TCP socket is charged to its group only once the group's
    // memory.kmem.tcp.limit_in_bytes has been written, and only if the socket is made after that write. Unwritten, a
    // sandbox's sockets count against nothing but the host's global tcp_mem, which a few hundred loopback pairs that
    // nobody reads fill up (the host's own TCP then fails). Set here, before any process joins the group, to the
    // memory limit: the sandbox may hold at most its memory limit in memory and the same again in TCP buffers. No
    // such file (a kernel without v1 kmem accounting) is no limit: refused, as any limit that cannot be set. At most
    // a sixteenth of the host's tcp_mem, so that one sandbox (512M by default) cannot take the host's TCP alone.
    uint64_t tcp_max = limits.memory_max_bytes;
    if (uint64_t share = HostTcpMemShare(); share > 0) tcp_max = std::min(tcp_max, share);
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(memory_dir_ + "/memory.kmem.tcp.limit_in_bytes", std::to_string(tcp_max))
                              .Wrap("limiting the sandbox's TCP buffer memory (cgroup v1 kmem.tcp accounting)"));
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(pids_dir_ + "/pids.max", std::to_string(limits.pids_max)));
    // A new group's period is the kernel's default, kCpuPeriodUs (100 ms): only the quota is written.
    uint64_t quota = std::max<uint64_t>(1000, static_cast<uint64_t>(std::llround(limits.cpus * kCpuPeriodUs)));
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(cpu_dir_ + "/cpu.cfs_quota_us", std::to_string(quota)));
    return OkStatus();
  }

  // Before the first mkdir: a group the reaper does not know of could be left behind.
  Status StartReaper(const CgroupConfig& config) {
    ReaperPlan plan;
    plan.procs_file = all_procs_dir_ + "/cgroup.procs";
    if (!freezer_dir_.empty()) plan.freezer_state_file = freezer_dir_ + "/freezer.state";
    for (const Hierarchy& hierarchy : hierarchies_) plan.group_dirs.push_back(hierarchy.dir);
    return ArmReaper(config, plan, &reaper_);
  }

 private:
  std::vector<Hierarchy> hierarchies_;
  std::set<std::string> seen_;
  UniqueFd hold_;  // HoldGroup on the memory group: this group is in use, to other nsboxes' sweeps
  std::string memory_dir_, pids_dir_, cpu_dir_, cpuacct_dir_, freezer_dir_, all_procs_dir_;
  std::unique_ptr<Reaper> reaper_;
  std::vector<UniqueFd> tasks_fds_, parent_tasks_fds_;
  ControlFile oom_control_, max_usage_, pids_events_, cpu_stat_, cpuacct_usage_, all_procs_;
  bool swap_limited_ = false;
  bool removed_ = false;
  const std::function<void(const std::string&)> mkdir_hook_;  // CgroupConfig::fake_fs_mkdir_hook (tests)
};

}  // namespace

StatusOr<std::unique_ptr<Cgroup>> CreateCgroupV1(const CgroupLimits& limits, const CgroupConfig& config,
                                                 const V1Dirs& parents) {
  auto group = std::make_unique<CgroupV1>(parents, config.subtree, NewGroupName(), config.fake_fs_mkdir_hook);
  if (config.reaper) NSBOX_RETURN_IF_ERROR(group->StartReaper(config));
  for (const Hierarchy& hierarchy : group->hierarchies()) {
    // v1 needs nothing enabled anywhere: the controllers are the hierarchy's own.
    bool created = false;
    int err = 0;
    NSBOX_RETURN_IF_ERROR(MakeDir(hierarchy.dir, config, &created, &err).Wrap("creating the sandbox's cgroup"));
    if (!created) return Status::Error("mkdir(" + hierarchy.dir + "): exists already (a name clash)");
    if (hierarchy.dir == group->path()) {  // the memory group: held at once, as other nsboxes' sweeps look there
      auto hold = HoldGroup(hierarchy.dir);
      if (!hold.ok()) return hold.status().Wrap("holding the sandbox's cgroup");
      group->KeepHold(std::move(*hold));
    }
  }
  NSBOX_RETURN_IF_ERROR(group->Apply(limits).Wrap("setting the sandbox's cgroup limits"));
  NSBOX_RETURN_IF_ERROR(group->OpenTasksFiles().Wrap("opening the sandbox's cgroup for joining"));
  group->OpenControlFiles();
  return std::unique_ptr<Cgroup>(std::move(group));
}

void SweepStaleV1(const V1Dirs& parents, const CgroupConfig& config) {
  StaleGroupJudge judge;
  std::set<std::string> seen, stale;  // a group is in each hierarchy: judged once
  const std::string prefix = config.subtree + "-";
  for (const std::string* parent : {&parents.memory, &parents.pids, &parents.cpu, &parents.cpuacct, &parents.freezer}) {
    if (parent->empty()) continue;
    DIR* listing = ::opendir(parent->c_str());
    if (!listing) continue;
    while (struct dirent* entry = ::readdir(listing)) {
      std::string_view name = entry->d_name;
      if (entry->d_type != DT_DIR || !name.starts_with(prefix)) continue;
      std::string group(name.substr(prefix.size()));
      if (seen.insert(group).second && judge.IsStale(group, parents.memory + "/" + prefix + group)) stale.insert(group);
    }
    ::closedir(listing);
  }
  for (const std::string& name : stale) {
    CgroupV1 adopted(parents, config.subtree, name, {});  // its destructor kills and removes
  }
}

}  // namespace nsbox::cgroup_internal
