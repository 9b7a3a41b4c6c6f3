// Groups on the cgroup file system, for both backends: control files, names, mkdir, kill and rmdir, child groups.
#include "sandbox/cgroup_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

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

// The start time of a process in clock ticks since boot; 0 when the process is gone.
uint64_t ProcessStartTime(pid_t pid) {
  auto stat = ReadFile(fmt::format("/proc/{}/stat", pid));
  return stat.ok() ? ParseStartTime(*stat) : 0;
}

}  // namespace

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
  return fmt::format("{}-{}-{}", self, start, sequence++);
}

bool IsStaleGroupName(const std::string& name) {
  unsigned long pid = 0;
  unsigned long long start = 0, seq = 0;
  char extra = 0;
  if (std::sscanf(name.c_str(), "%lu-%llu-%llu%c", &pid, &start, &seq, &extra) != 3) return false;  // not ours
  if (pid == 0) return false;
  uint64_t now_start = ProcessStartTime(static_cast<pid_t>(pid));
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

namespace {

// The system calls the kill and rmdir loops make, each returning what the call returns or -errno. Async-signal-safe,
// as the reaper (a fork of a process that may have threads) needs.
namespace sys {
int Fail() { return -errno; }
int Open(const char* path, int flags) {
  int fd = ::open(path, flags);
  return fd < 0 ? Fail() : fd;
}
ssize_t Read(int fd, void* buf, size_t n) {
  ssize_t got = ::read(fd, buf, n);
  return got < 0 ? Fail() : got;
}
ssize_t Write(int fd, const void* buf, size_t n) {
  ssize_t put = ::write(fd, buf, n);
  return put < 0 ? Fail() : put;
}
void Close(int fd) { ::close(fd); }
int Rmdir(const char* path) { return ::rmdir(path) == 0 ? 0 : Fail(); }
void Kill(pid_t pid, int sig) { ::kill(pid, sig); }
ssize_t Getdents64(int fd, void* buf, size_t n) {
  ssize_t got = ::getdents64(fd, buf, n);
  return got < 0 ? Fail() : got;
}
// Sleeps `ms` milliseconds, resuming after signals.
void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}
}  // namespace sys

// Writes a short string with one write(2); returns 0 or an errno value. Async-signal-safe.
int RawWrite(const char* path, const char* text) {
  int fd = sys::Open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -fd;
  size_t length = std::strlen(text);
  ssize_t n = sys::Write(fd, text, length);
  sys::Close(fd);
  return n == static_cast<ssize_t>(length) ? 0 : n < 0 ? static_cast<int>(-n) : EIO;
}

// Reads a small file into buf (NUL-terminated); returns bytes read or -errno.
ssize_t RawRead(const char* path, char* buf, size_t size) {
  int fd = sys::Open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  ssize_t total = 0;
  for (;;) {
    ssize_t n = sys::Read(fd, buf + total, size - 1 - static_cast<size_t>(total));
    if (n == -EINTR) continue;
    if (n <= 0) break;
    total += n;
    if (static_cast<size_t>(total) >= size - 1) break;
  }
  sys::Close(fd);
  buf[total] = '\0';
  return total;
}

// Sends SIGKILL to every pid listed in procs_file; returns how many were listed, or -errno.
// Reads in chunks so a group of any size is covered without allocating.
long KillListed(const char* procs_file) {
  int fd = sys::Open(procs_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  char buf[4096];
  long listed = 0;
  long pid = 0;
  bool in_number = false;
  for (;;) {
    ssize_t n = sys::Read(fd, buf, sizeof buf);
    if (n == -EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
        in_number = true;
      } else if (in_number) {
        if (pid > 0) sys::Kill(static_cast<pid_t>(pid), SIGKILL);
        ++listed;
        pid = 0;
        in_number = false;
      }
    }
  }
  if (in_number) {
    if (pid > 0) sys::Kill(static_cast<pid_t>(pid), SIGKILL);
    ++listed;
  }
  sys::Close(fd);
  return listed;
}

// Waits until a v1 freezer group reports FROZEN (bounded); returns 0 or an errno value.
int RawFreeze(const char* state_file) {
  if (int err = RawWrite(state_file, "FROZEN")) return err;
  char state[64];
  for (int i = 0; i < 200; ++i) {
    if (ssize_t n = RawRead(state_file, state, sizeof state); n < 0) return static_cast<int>(-n);
    if (std::strncmp(state, "FROZEN", 6) == 0) return 0;
    sys::SleepMs(5);
  }
  return 0;  // still FREEZING: kill what is listed anyway; the loop goes round again
}

// v2: 1 when the group or a group below it (a session's exec) holds a process, 0 when none does, from the
// cgroup.events beside procs_file; -1 where there is no such file (v1). Allocation-free.
int RawPopulated(const char* procs_file) {
  const char* slash = strrchr(procs_file, '/');
  if (!slash) return -1;
  static constexpr char kEvents[] = "/cgroup.events";
  char path[PATH_MAX];
  size_t dir_len = static_cast<size_t>(slash - procs_file);
  if (dir_len + sizeof kEvents > sizeof path) return -1;
  memcpy(path, procs_file, dir_len);
  memcpy(path + dir_len, kEvents, sizeof kEvents);
  char events[256];
  ssize_t n = RawRead(path, events, sizeof events - 1);
  if (n <= 0) return -1;
  events[n] = '\0';
  const char* line = strstr(events, "populated ");
  if (!line) return -1;
  return line[10] == '0' ? 0 : 1;
}

}  // namespace

int RawKillGroup(const char* kill_file, const char* procs_file, const char* freezer_state, const char** failed_call) {
  bool use_kill_file = kill_file != nullptr && kill_file[0] != '\0';
  bool use_freezer = freezer_state != nullptr && freezer_state[0] != '\0';
  // v2 counts the groups below too (cgroup.procs lists the group's own processes only); cgroup.kill takes them.
  int populated = use_kill_file ? RawPopulated(procs_file) : -1;
  if (populated == 0) return 0;
  // Already empty, the usual case once pid 1 is reaped: no process can enter an empty group but by being moved.
  if (int fd = populated < 0 ? sys::Open(procs_file, O_RDONLY | O_CLOEXEC) : -1; fd >= 0) {
    char probe[16];
    ssize_t n;
    do n = sys::Read(fd, probe, sizeof probe); while (n == -EINTR);
    sys::Close(fd);
    if (n == 0) return 0;
  }
  if (use_kill_file) {
    int err = RawWrite(kill_file, "1");
    if (err == ENOENT) {
      use_kill_file = false;  // cgroup.kill is Linux 5.14+; kill pid by pid instead
    } else if (err != 0) {
      *failed_call = "write(cgroup.kill, \"1\")";
      return err;
    }
  }
  // About 5 s in all: a SIGKILLed process is gone within milliseconds unless it is stuck in the kernel.
  for (int round = 0; round < 500; ++round) {
    if (use_freezer) {
      if (int err = RawFreeze(freezer_state)) {
        *failed_call = "write(freezer.state, \"FROZEN\")";
        return err;
      }
    }
    long listed = use_kill_file ? 0 : KillListed(procs_file);
    if (use_freezer) RawWrite(freezer_state, "THAWED");  // frozen tasks die only once thawed
    if (use_kill_file && (populated = RawPopulated(procs_file)) >= 0) {
      listed = populated;
    } else if (use_kill_file) {
      char buf[64];
      ssize_t n = RawRead(procs_file, buf, sizeof buf);
      if (n < 0) {
        *failed_call = "read(cgroup.procs)";
        return static_cast<int>(-n);
      }
      listed = n;
    }
    if (listed < 0) {
      *failed_call = "read(cgroup.procs)";
      return static_cast<int>(-listed);
    }
    if (listed == 0) return 0;
    sys::SleepMs(round < 10 ? 1 : 10);
  }
  *failed_call = "waiting for the group's processes to exit";
  return ETIMEDOUT;
}

namespace {

// rmdir of every directory below `dir`, deepest first, each tried once: a group still holding a dying process stays
// for the next round. Entries are read again after each removal (a directory changed under getdents may skip some).
// Allocation-free and async-signal-safe: the reaper runs it.
void RemoveChildDirs(const char* dir, int depth) {
  if (depth > 4) return;
  size_t dir_len = strlen(dir);
  for (int pass = 0; pass < 64; ++pass) {
    int fd = sys::Open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    bool removed = false;
    char entries[4096];
    ssize_t n;
    while (!removed && (n = sys::Getdents64(fd, entries, sizeof entries)) > 0) {
      for (ssize_t at = 0; at < n;) {
        const auto* entry = reinterpret_cast<const struct dirent64*>(entries + at);
        at += entry->d_reclen;
        const char* name = entry->d_name;
        if (entry->d_type != DT_DIR || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        size_t name_len = strlen(name);
        char child[PATH_MAX];
        if (dir_len + 1 + name_len >= sizeof child) continue;
        memcpy(child, dir, dir_len);
        child[dir_len] = '/';
        memcpy(child + dir_len + 1, name, name_len + 1);
        RemoveChildDirs(child, depth + 1);
        if (sys::Rmdir(child) == 0) removed = true;
      }
    }
    sys::Close(fd);
    if (!removed) return;
  }
}

}  // namespace

int RawRemoveDir(const char* dir) {
  // EBUSY: killed processes have left cgroup.procs but are still being torn down by the kernel, or groups below
  // this one (an exec's, in a session) are still there.
  for (int i = 0; i < 300; ++i) {
    int err = -sys::Rmdir(dir);
    if (err == 0 || err == ENOENT) return 0;
    if (err != EBUSY) return err;
    RemoveChildDirs(dir, 0);
    err = -sys::Rmdir(dir);
    if (err == 0 || err == ENOENT) return 0;
    sys::SleepMs(i < 10 ? 1 : 10);
  }
  return EBUSY;
}

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
  UniqueFd memory_fd_;
  ControlFile oom_control_;
  CgroupSelfJoin join_;
  std::string kill_file_, freezer_state_;
};

}  // namespace

StatusOr<std::unique_ptr<CgroupChild>> MakeCgroupChild(const std::string& parent, const std::string& name,
                                                       const char* join_file, CgroupSelfJoin join, int slot,
                                                       bool kill_file, bool freezer, const ChildMemory& memory,
                                                       const std::function<void(const std::string&)>& mkdir_hook) {
  if (slot < 0 || slot > join.count || slot >= CgroupSelfJoin::kMax)
    return Status::Error(fmt::format("{} is not one of the sandbox's groups", parent));
  if (memory.limit > 0 && !memory.parent.empty() && (memory.slot < 0 || memory.slot >= join.count))
    return Status::Error(fmt::format("{} is not one of the sandbox's groups", memory.parent));
  std::string dir = parent + "/" + name;
  if (::mkdir(dir.c_str(), 0755) != 0) return Status::Errno(fmt::format("mkdir({})", dir));
  if (mkdir_hook) mkdir_hook(dir);
  UniqueFd own_fd(::open((dir + "/" + join_file).c_str(), O_WRONLY | O_CLOEXEC));
  if (!own_fd) {
    Status s = Status::Errno(fmt::format("open({}/{})", dir, join_file));
    ::rmdir(dir.c_str());
    return s;
  }
  join.fds[slot] = own_fd.get();
  if (slot == join.count) ++join.count;
  std::string kill = kill_file ? dir + "/cgroup.kill" : "";
  std::string freezer_state = freezer ? dir + "/freezer.state" : "";
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

Status RemoveDir(const std::string& dir) {
  int err = RawRemoveDir(dir.c_str());
  return err == 0 ? OkStatus() : Status::Errno(fmt::format("rmdir({})", dir), err);
}

void RemoveSubtreeIfEmpty(const std::string& dir) {
  ::rmdir(dir.c_str());  // fails with EBUSY/ENOTEMPTY while another sandbox has a group there: fine
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
