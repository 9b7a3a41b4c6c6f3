// Groups on the cgroup file system, for both backends: control files, names, mkdir, joining (kill and rmdir are in
// cgroup_kill.cc, child groups in cgroup_child.cc).
#include "sandbox/cgroup_fs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/spec/cgroup_text.h"

namespace nsbox {
namespace cgroup_internal {

uint64_t ReadKeyed(const std::string& path, const std::string& key) {
  auto content = ReadFile(path);
  return content.ok() ? KeyedValue(*content, key) : 0;
}

uint64_t ReadNumber(const std::string& path) {
  auto content = ReadFile(path);
  if (!content.ok()) return 0;
  return std::strtoull(content->c_str(), nullptr, 10);
}

namespace {

// A keyed measurement from a file's content, or a note of why there is none.
uint64_t KeyedOrNote(const StatusOr<std::string>& content, const std::string& path, const std::string& key,
                     std::vector<std::string>* errors) {
  if (!content.ok()) {
    errors->push_back(content.status().Wrap(path).message());
    return 0;
  }
  const auto values = ParseKeyedFile(*content);
  const auto found = values.find(key);
  if (found == values.end()) {
    errors->push_back(fmt::format("{}: no \"{}\" in it", path, key));
    return 0;
  }
  return found->second;
}

uint64_t NumberOrNote(const StatusOr<std::string>& content, const std::string& path, std::vector<std::string>* errors) {
  if (!content.ok()) {
    errors->push_back(content.status().Wrap(path).message());
    return 0;
  }
  char* end = nullptr;
  uint64_t value = std::strtoull(content->c_str(), &end, 10);
  if (end == content->c_str() && !content->starts_with("max")) {
    errors->push_back(fmt::format("{}: not a number", path));
    return 0;
  }
  return value;
}

}  // namespace

uint64_t ReadKeyedOrNote(const std::string& path, const std::string& key, std::vector<std::string>* errors) {
  return KeyedOrNote(ReadFile(path), path, key, errors);
}

uint64_t ReadNumberOrNote(const std::string& path, std::vector<std::string>* errors) {
  return NumberOrNote(ReadFile(path), path, errors);
}

StatusOr<std::string> ControlFile::TryRead() const {
  if (!fd_) return ReadFile(path_);
  char buffer[4096];
  ssize_t n;
  do n = ::pread(fd_.get(), buffer, sizeof buffer, 0); while (n < 0 && errno == EINTR);
  if (n < 0) return Status::Errno("pread");
  return std::string(buffer, static_cast<size_t>(n));
}

uint64_t ControlFile::NumberOrNote(std::vector<std::string>* errors) const {
  return cgroup_internal::NumberOrNote(TryRead(), path_, errors);
}

uint64_t ControlFile::KeyedOrNote(const std::string& key, std::vector<std::string>* errors) const {
  return cgroup_internal::KeyedOrNote(TryRead(), path_, key, errors);
}

void ControlFile::Open() { fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC)); }

std::string ControlFile::Read() const {
  if (!fd_) {
    auto content = ReadFile(path_);
    return content.ok() ? *content : "";
  }
  char buffer[4096];
  ssize_t n;
  do n = ::pread(fd_.get(), buffer, sizeof buffer, 0); while (n < 0 && errno == EINTR);
  return std::string(buffer, n > 0 ? static_cast<size_t>(n) : 0);
}

uint64_t ControlFile::Number() const { return std::strtoull(Read().c_str(), nullptr, 10); }

uint64_t ControlFile::Keyed(const std::string& key) const { return KeyedValue(Read(), key); }

int ControlFile::Empty() const {
  if (!fd_) return -1;
  char probe[16];
  ssize_t n;
  do n = ::pread(fd_.get(), probe, sizeof probe, 0); while (n < 0 && errno == EINTR);
  return n == 0 ? 1 : n > 0 ? 0 : -1;
}

std::vector<pid_t> ReadPids(const std::string& path) {
  auto content = ReadFile(path);
  return content.ok() ? ParsePids(*content) : std::vector<pid_t>{};
}

namespace {

// The start time of a process in clock ticks since boot; 0 when the process is gone, or ended and not yet reaped (a
// creator killed with its reaper, whose parent has not waited for it, must not keep its groups from the sweep).
uint64_t ProcessStartTime(pid_t pid) {
  auto stat = ReadFile(fmt::format("/proc/{}/stat", pid));
  return stat.ok() && !IsEndedProcess(*stat) ? ParseStartTime(*stat) : 0;
}

}  // namespace

bool InInitialPidNamespace() {
  // The kernel's inode number of the initial pid namespace (PROC_PID_INIT_INO, include/linux/proc_ns.h): fixed.
  constexpr ino_t kInitialPidNamespaceInode = 0xEFFFFFFCu;
  struct stat st;  // not cached: a fork may be in another pid namespace than its parent
  return ::stat("/proc/self/ns/pid", &st) == 0 && st.st_ino == kInitialPidNamespaceInode;
}

std::string NewGroupName() {
  static std::atomic<uint64_t> sequence{0};
  // Cached per pid: a forked child that creates groups has a start time of its own, and a name with its
  // parent's would look stale to every other nsbox.
  static std::mutex cache_mutex;
  static pid_t cached_pid = 0;
  static uint64_t cached_start = 0;
  pid_t self = ::getpid();
  uint64_t start;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cached_pid != self) {
      cached_start = ProcessStartTime(self);
      cached_pid = self;
    }
    start = cached_start;
  }
  // In a pid namespace of its own, the pid and start time name nothing another nsbox can look up: such a group is
  // named so that sweeps judge it by its hold and age instead (IsStaleGroup).
  if (!InInitialPidNamespace()) return fmt::format("{}-{}-{}-nested", self, start, sequence++);
  return fmt::format("{}-{}-{}", self, start, sequence++);
}

StatusOr<UniqueFd> HoldGroup(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Status::Errno(fmt::format("open({})", dir));
  if (::flock(fd.get(), LOCK_SH) != 0) return Status::Errno(fmt::format("flock({}, LOCK_SH)", dir));
  return fd;
}

bool IsStaleGroup(const std::string& name, const std::string& hold_dir, std::chrono::seconds grace) {
  return StaleGroupJudge(grace).IsStale(name, hold_dir);
}

bool IsStaleGroupName(const std::string& name) { return StaleGroupJudge().IsStaleName(name); }

StaleGroupJudge::StaleGroupJudge(std::chrono::seconds grace)
    : grace_(grace), initial_pid_namespace_(InInitialPidNamespace()) {}

uint64_t StaleGroupJudge::StartTime(pid_t pid) {
  auto [it, added] = start_times_.try_emplace(pid, 0);
  if (added) it->second = ProcessStartTime(pid);
  return it->second;
}

bool StaleGroupJudge::IsStale(const std::string& name, const std::string& hold_dir) {
  unsigned long pid = 0;
  unsigned long long start = 0, seq = 0;
  int used = 0;
  if (std::sscanf(name.c_str(), "%lu-%llu-%llu%n", &pid, &start, &seq, &used) != 3 || pid == 0) return false;
  const std::string_view rest = std::string_view(name).substr(static_cast<size_t>(used));
  const bool nested = rest == "-nested";
  if (!rest.empty() && !nested) return false;  // not ours
  // A creator this process can look up is judged by its pid, as a process of the group that outlived it (a fork
  // that kept the hold) does not keep it alive.
  if (!nested && initial_pid_namespace_) return IsStaleName(name);
  // Else by its hold, and then its age: a live creator holds it within microseconds of the mkdir.
  struct stat st;
  if (::stat(hold_dir.c_str(), &st) != 0) return errno == ENOENT;  // only other hierarchies' copies are left
  UniqueFd fd(::open(hold_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return false;                                        // cannot tell: left alone
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return false;  // held: its creator (or a fork of it) lives
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return now.tv_sec - st.st_ctim.tv_sec >= grace_.count();
}

bool StaleGroupJudge::IsStaleName(const std::string& name) {
  unsigned long pid = 0;
  unsigned long long start = 0, seq = 0;
  char extra = 0;
  if (std::sscanf(name.c_str(), "%lu-%llu-%llu%c", &pid, &start, &seq, &extra) != 3) return false;  // not ours
  if (pid == 0) return false;
  // From a pid namespace of its own (or a /proc of another one), the creator of a live group may be invisible: no
  // group can be judged, and none is taken for stale (it would be killed and removed under another nsbox).
  if (!initial_pid_namespace_) return false;
  uint64_t now_start = StartTime(static_cast<pid_t>(pid));
  return now_start == 0 || now_start != start;  // creator gone, or its pid reused by another process
}

Status WriteCgroupFile(const std::string& path, std::string_view content, int* err) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) {
    if (err) *err = errno;
    return Status::Errno(fmt::format("open({}, O_WRONLY)", path));
  }
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    int saved = errno;
    if (err) *err = saved;
    return Status::Errno(fmt::format("write({}, \"{}\")", path, content), saved);
  }
  return OkStatus();
}

Status MakeDir(const std::string& dir, const CgroupConfig& config, bool* created, int* err) {
  *created = false;
  if (::mkdir(dir.c_str(), 0755) == 0) {
    *created = true;
    if (config.fake_fs_mkdir_hook) config.fake_fs_mkdir_hook(dir);
    return OkStatus();
  }
  if (errno == EEXIST) return OkStatus();
  *err = errno;
  return Status::Errno(fmt::format("mkdir({})", dir), *err);
}

}  // namespace cgroup_internal

int JoinCgroupSelf(const CgroupSelfJoin& join) {
  for (int i = 0; i < join.count; ++i) {
    ssize_t n;
    do n = ::write(join.fds[i], "0", 1); while (n < 0 && errno == EINTR);
    if (n != 1) return -1;
  }
  return 0;
}

}  // namespace nsbox
