// An exec's group inside a sandbox's group (CgroupChild), for both backends: its mkdir, join and memory limit.
#include "sandbox/cgroup_child.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup_fs.h"
#include "sandbox/cgroup_kill.h"

namespace nsbox::cgroup_internal {

namespace {

class CgroupChildGroup final : public CgroupChild {
 public:
  CgroupChildGroup(std::string dir, UniqueFd own_fd, CgroupSelfJoin join, std::string kill_file,
                   std::string freezer_state)
      : dir_(std::move(dir)),
        own_fd_(std::move(own_fd)),
        join_(join),
        kill_file_(std::move(kill_file)),
        freezer_state_(std::move(freezer_state)) {}
  ~CgroupChildGroup() override { TryRemove(); }

  // v1: the child's group in the memory hierarchy, whose tasks file replaces the sandbox's in join.fds[slot].
  void SetMemoryGroup(std::string dir, UniqueFd tasks_fd, int slot) {
    memory_dir_ = std::move(dir);
    memory_fd_ = std::move(tasks_fd);
    join_.fds[slot] = memory_fd_.get();
    oom_control_ = ControlFile(memory_dir_ + "/memory.oom_control");
  }
  uint64_t OomKillsApart() const override { return memory_dir_.empty() ? 0 : oom_control_.Keyed("oom_kill"); }
  // v2: the limit is in the child's own directory, which has its own memory.peak.
  void SetOwnMemoryV2() { peak_file_ = dir_ + "/memory.peak"; }
  std::optional<uint64_t> PeakMemoryBytes() const override {
    const std::string file = !memory_dir_.empty() ? memory_dir_ + "/memory.max_usage_in_bytes" : peak_file_;
    if (file.empty()) return std::nullopt;
    auto text = ReadFile(file, 64);
    if (!text.ok() || text->empty() || !std::isdigit(static_cast<unsigned char>((*text)[0]))) return std::nullopt;
    return std::strtoull(text->c_str(), nullptr, 10);
  }

  CgroupSelfJoin self_join() const override { return join_; }
  std::string path() const override { return dir_; }

  Status KillAll() override {
    std::string procs_file = dir_ + "/cgroup.procs";
    const char* failed_call = "";
    int err = RawKillGroup(kill_file_.empty() ? nullptr : kill_file_.c_str(), procs_file.c_str(),
                           freezer_state_.empty() ? nullptr : freezer_state_.c_str(), &failed_call);
    if (err != 0) return Status::Errno(fmt::format("killing the processes of {}: {}", dir_, failed_call), err);
    return OkStatus();
  }

  bool TryRemove() override {
    own_fd_.reset();
    if (!memory_dir_.empty()) {
      memory_fd_.reset();
      if (::rmdir(memory_dir_.c_str()) != 0 && errno != ENOENT) return false;
      memory_dir_.clear();
    }
    return ::rmdir(dir_.c_str()) == 0 || errno == ENOENT;
  }

 private:
  std::string dir_;
  UniqueFd own_fd_;
  std::string memory_dir_;
  std::string peak_file_;
  UniqueFd memory_fd_;
  ControlFile oom_control_;
  CgroupSelfJoin join_;
  std::string kill_file_, freezer_state_;
};

}  // namespace

StatusOr<std::unique_ptr<CgroupChild>> MakeCgroupChild(const ChildGroupOptions& options) {
  const std::string& parent = options.parent;
  const std::string& name = options.name;
  const ChildMemory& memory = options.memory;
  const auto& mkdir_hook = options.mkdir_hook;
  const int slot = options.slot;
  CgroupSelfJoin join = options.join;
  if (slot < 0 || slot > join.count || slot >= CgroupSelfJoin::kMax)
    return Status::Error(fmt::format("{} is not one of the sandbox's groups", parent));
  if (memory.limit > 0 && !memory.parent.empty() && (memory.slot < 0 || memory.slot >= join.count))
    return Status::Error(fmt::format("{} is not one of the sandbox's groups", memory.parent));
  std::string dir = parent + "/" + name;
  if (::mkdir(dir.c_str(), 0755) != 0) return Status::Errno(fmt::format("mkdir({})", dir));
  if (mkdir_hook) mkdir_hook(dir);
  UniqueFd own_fd(::open((dir + "/" + options.join_file).c_str(), O_WRONLY | O_CLOEXEC));
  if (!own_fd) {
    Status s = Status::Errno(fmt::format("open({}/{})", dir, options.join_file));
    ::rmdir(dir.c_str());
    return s;
  }
  join.fds[slot] = own_fd.get();
  if (slot == join.count) ++join.count;
  std::string kill = options.kill_file ? dir + "/cgroup.kill" : "";
  std::string freezer_state = options.freezer ? dir + "/freezer.state" : "";
  const std::string limit_dir = memory.parent.empty() ? dir : memory.parent + "/" + name;
  auto child = std::make_unique<CgroupChildGroup>(std::move(dir), std::move(own_fd), join, std::move(kill),
                                                  std::move(freezer_state));
  if (memory.limit == 0) return std::unique_ptr<CgroupChild>(std::move(child));
  const std::string limit = std::to_string(memory.limit);
  if (memory.parent.empty()) {  // v2: the child's own directory; the destructor removes it on failure
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(limit_dir + "/memory.max", limit).Wrap("setting the exec's memory limit"));
    if (PathExists(limit_dir + "/memory.swap.max"))
      NSBOX_RETURN_IF_ERROR(
          WriteCgroupFile(limit_dir + "/memory.swap.max", "0").Wrap("setting the exec's memory limit"));
    child->SetOwnMemoryV2();
    return std::unique_ptr<CgroupChild>(std::move(child));
  }
  // v1: a group in the memory hierarchy, set up before the child owns it so that a failure removes it here.
  if (::mkdir(limit_dir.c_str(), 0755) != 0)
    return Status::Errno(fmt::format("mkdir({})", limit_dir)).Wrap("setting the exec's memory limit");
  if (mkdir_hook) mkdir_hook(limit_dir);
  auto set_up = [&]() -> StatusOr<UniqueFd> {
    NSBOX_RETURN_IF_ERROR(WriteCgroupFile(limit_dir + "/memory.limit_in_bytes", limit));
    if (memory.memsw) NSBOX_RETURN_IF_ERROR(WriteCgroupFile(limit_dir + "/memory.memsw.limit_in_bytes", limit));
    UniqueFd tasks(::open((limit_dir + "/tasks").c_str(), O_WRONLY | O_CLOEXEC));
    if (!tasks) return Status::Errno(fmt::format("open({}/tasks)", limit_dir));
    return tasks;
  };
  auto tasks = set_up();
  if (!tasks.ok()) {
    ::rmdir(limit_dir.c_str());
    return tasks.status().Wrap("setting the exec's memory limit");
  }
  child->SetMemoryGroup(limit_dir, std::move(*tasks), memory.slot);
  return std::unique_ptr<CgroupChild>(std::move(child));
}

}  // namespace nsbox::cgroup_internal
