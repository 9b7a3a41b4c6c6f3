// Cgroup backend detection and placement, shared control-file helpers, stale-group sweep and the reaper.
#include "sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/raw_syscall.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup_internal.h"

namespace nsbox {
namespace cgroup_internal {

namespace {

// The pieces of text between delimiters, as std::getline reads them (no empty piece after a final delimiter). Here
// and in Words, no stream: a run's start-up would set up std::locale for it (about 0.2 ms of page faults on a PVM
// guest), and nothing else on that path needs one.
std::vector<std::string_view> SplitOn(std::string_view text, char delimiter) {
  std::vector<std::string_view> pieces;
  while (!text.empty()) {
    size_t end = text.find(delimiter);
    pieces.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return pieces;
}

// Whitespace-separated words, as `stream >> word` reads them.
std::vector<std::string_view> Words(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  std::vector<std::string_view> words;
  for (size_t start = text.find_first_not_of(kSpace); start != std::string_view::npos;
       start = text.find_first_not_of(kSpace, start)) {
    size_t end = text.find_first_of(kSpace, start);
    words.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end;
  }
  return words;
}

}  // namespace

SelfCgroup ParseSelfCgroup(std::string_view content) {
  SelfCgroup self;
  for (std::string_view line : SplitOn(content, '\n')) {
    // "hierarchy-id:controller-list:path"; the path may itself contain ':'.
    size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view id = line.substr(0, first);
    std::string controllers(line.substr(first + 1, second - first - 1));
    std::string path(line.substr(second + 1));
    if (id == "0" && controllers.empty()) {
      self.unified_path = path;
      continue;
    }
    for (std::string_view controller : SplitOn(controllers, ',')) {
      if (controller.empty() || controller.starts_with("name=")) continue;
      self.v1_paths[std::string(controller)] = path;
      self.v1_mount_dir[std::string(controller)] = controllers;
    }
  }
  return self;
}

namespace {

// Calls f(key, value) for each "key value" pair of a keyed file whose value is a whole decimal number, in order.
template <typename F>
void ForEachKeyedNumber(std::string_view content, F&& f) {
  std::vector<std::string_view> words = Words(content);
  for (size_t i = 0; i + 1 < words.size(); i += 2) {
    std::string value(words[i + 1]);
    char* end = nullptr;
    unsigned long long number = std::strtoull(value.c_str(), &end, 10);
    if (end && *end == '\0') f(words[i], static_cast<uint64_t>(number));
  }
}

// The value of one key of a keyed file (as ParseKeyedFile would map it: the last valid one), 0 when absent: no map
// is built for the counters read at the end of every run.
uint64_t KeyedValue(std::string_view content, std::string_view key) {
  uint64_t found = 0;
  ForEachKeyedNumber(content, [&](std::string_view k, uint64_t v) {
    if (k == key) found = v;
  });
  return found;
}

}  // namespace

std::map<std::string, uint64_t> ParseKeyedFile(std::string_view content) {
  std::map<std::string, uint64_t> values;
  ForEachKeyedNumber(content, [&](std::string_view k, uint64_t v) { values[std::string(k)] = v; });
  return values;
}

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
  bool present = false;
  uint64_t found = 0;
  ForEachKeyedNumber(*content, [&](std::string_view k, uint64_t v) {
    if (k == key) {
      present = true;
      found = v;
    }
  });
  if (!present) errors->push_back(fmt::format("{}: no \"{}\" in it", path, key));
  return found;
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
  std::vector<pid_t> pids;
  auto content = ReadFile(path);
  if (!content.ok()) return pids;
  for (std::string_view word : Words(*content)) {
    std::string text(word);
    char* end = nullptr;
    long pid = std::strtol(text.c_str(), &end, 10);
    if (end == text.c_str()) break;  // where `stream >> pid` would stop
    pids.push_back(static_cast<pid_t>(pid));
  }
  return pids;
}

namespace {

// Field 22 of /proc/<pid>/stat, the start time in clock ticks since boot; 0 when the process is gone.
uint64_t ProcessStartTime(pid_t pid) {
  auto stat = ReadFile(fmt::format("/proc/{}/stat", pid));
  if (!stat.ok()) return 0;
  size_t paren = stat->rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::vector<std::string_view> fields = Words(std::string_view(*stat).substr(std::min(paren + 2, stat->size())));
  if (fields.size() < 22 - 2) return 0;  // fields 3 to 22
  return std::strtoull(std::string(fields[22 - 3]).c_str(), nullptr, 10);
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

// Writes a short string with one write(2); returns 0 or an errno value. Async-signal-safe, and safe in the reaper
// (sandbox/base/raw_syscall.h): like every function here the reaper runs, it leaves errno alone.
int RawWrite(const char* path, const char* text) {
  int fd = raw::Open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -fd;
  size_t length = std::strlen(text);
  ssize_t n = raw::Write(fd, text, length);
  raw::Close(fd);
  return n == static_cast<ssize_t>(length) ? 0 : n < 0 ? static_cast<int>(-n) : EIO;
}

// Reads a small file into buf (NUL-terminated); returns bytes read or -errno.
ssize_t RawRead(const char* path, char* buf, size_t size) {
  int fd = raw::Open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  ssize_t total = 0;
  for (;;) {
    ssize_t n = raw::Read(fd, buf + total, size - 1 - static_cast<size_t>(total));
    if (n == -EINTR) continue;
    if (n <= 0) break;
    total += n;
    if (static_cast<size_t>(total) >= size - 1) break;
  }
  raw::Close(fd);
  buf[total] = '\0';
  return total;
}

// Sends SIGKILL to every pid listed in procs_file; returns how many were listed, or -errno.
// Reads in chunks so a group of any size is covered without allocating.
long KillListed(const char* procs_file) {
  int fd = raw::Open(procs_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fd;
  char buf[4096];
  long listed = 0;
  long pid = 0;
  bool in_number = false;
  for (;;) {
    ssize_t n = raw::Read(fd, buf, sizeof buf);
    if (n == -EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
        in_number = true;
      } else if (in_number) {
        if (pid > 0) raw::Kill(static_cast<pid_t>(pid), SIGKILL);
        ++listed;
        pid = 0;
        in_number = false;
      }
    }
  }
  if (in_number) {
    if (pid > 0) raw::Kill(static_cast<pid_t>(pid), SIGKILL);
    ++listed;
  }
  raw::Close(fd);
  return listed;
}

// Waits until a v1 freezer group reports FROZEN (bounded); returns 0 or an errno value.
int RawFreeze(const char* state_file) {
  if (int err = RawWrite(state_file, "FROZEN")) return err;
  char state[64];
  for (int i = 0; i < 200; ++i) {
    if (ssize_t n = RawRead(state_file, state, sizeof state); n < 0) return static_cast<int>(-n);
    if (std::strncmp(state, "FROZEN", 6) == 0) return 0;
    raw::SleepMs(5);
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
  if (int fd = populated < 0 ? raw::Open(procs_file, O_RDONLY | O_CLOEXEC) : -1; fd >= 0) {
    char probe[16];
    ssize_t n;
    do n = raw::Read(fd, probe, sizeof probe); while (n == -EINTR);
    raw::Close(fd);
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
    raw::SleepMs(round < 10 ? 1 : 10);
  }
  *failed_call = "waiting for the group's processes to exit";
  return ETIMEDOUT;
}

namespace {

// rmdir of every directory below `dir`, deepest first, each tried once: a group still holding a dying process stays
// for the next round. Entries are read again after each removal (a directory changed under getdents may skip some).
// Allocation-free and errno-free: the reaper runs it.
void RemoveChildDirs(const char* dir, int depth) {
  if (depth > 4) return;
  size_t dir_len = strlen(dir);
  for (int pass = 0; pass < 64; ++pass) {
    int fd = raw::Open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    bool removed = false;
    char entries[4096];
    ssize_t n;
    while (!removed && (n = raw::Getdents64(fd, entries, sizeof entries)) > 0) {
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
        if (raw::Rmdir(child) == 0) removed = true;
      }
    }
    raw::Close(fd);
    if (!removed) return;
  }
}

}  // namespace

int RawRemoveDir(const char* dir) {
  // EBUSY: killed processes have left cgroup.procs but are still being torn down by the kernel, or groups below
  // this one (an exec's, in a session) are still there.
  for (int i = 0; i < 300; ++i) {
    int err = -raw::Rmdir(dir);
    if (err == 0 || err == ENOENT) return 0;
    if (err != EBUSY) return err;
    RemoveChildDirs(dir, 0);
    err = -raw::Rmdir(dir);
    if (err == 0 || err == ENOENT) return 0;
    raw::SleepMs(i < 10 ? 1 : 10);
  }
  return EBUSY;
}

namespace {

class CgroupChildGroup final : public CgroupChild {
 public:
  CgroupChildGroup(std::string dir, UniqueFd own_fd, CgroupSelfJoin join, std::string kill_file, std::string freezer_state)
      : dir_(std::move(dir)), own_fd_(std::move(own_fd)), join_(join), kill_file_(std::move(kill_file)),
        freezer_state_(std::move(freezer_state)) {}
  ~CgroupChildGroup() override { TryRemove(); }

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
    return ::rmdir(dir_.c_str()) == 0 || errno == ENOENT;
  }

 private:
  std::string dir_;
  UniqueFd own_fd_;
  CgroupSelfJoin join_;
  std::string kill_file_, freezer_state_;
};

}  // namespace

StatusOr<std::unique_ptr<CgroupChild>> MakeCgroupChild(const std::string& parent, const std::string& name,
                                                       const char* join_file, CgroupSelfJoin join, int slot,
                                                       bool kill_file, bool freezer) {
  if (slot < 0 || slot > join.count || slot >= CgroupSelfJoin::kMax)
    return Status::Error(fmt::format("{} is not one of the sandbox's groups", parent));
  std::string dir = parent + "/" + name;
  if (::mkdir(dir.c_str(), 0755) != 0) return Status::Errno(fmt::format("mkdir({})", dir));
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
  return std::unique_ptr<CgroupChild>(std::make_unique<CgroupChildGroup>(std::move(dir), std::move(own_fd), join,
                                                                         std::move(kill), std::move(freezer_state)));
}

Status RemoveDir(const std::string& dir) {
  int err = RawRemoveDir(dir.c_str());
  return err == 0 ? OkStatus() : Status::Errno(fmt::format("rmdir({})", dir), err);
}

void RemoveSubtreeIfEmpty(const std::string& dir) {
  ::rmdir(dir.c_str());  // fails with EBUSY/ENOTEMPTY while another sandbox has a group there: fine
}

namespace {

// The reaper's copy of its plan: NUL-separated fields in one buffer, as Arm sends them (see EncodePlan).
struct ArmedPlan {
  static constexpr size_t kMaxBytes = 16 << 10;
  static constexpr int kMaxDirs = 16;
  char buffer[kMaxBytes];
  const char* kill_file = nullptr;
  const char* procs_file = nullptr;
  const char* freezer_state_file = nullptr;
  const char* group_dirs[kMaxDirs] = {};
  int group_count = 0;
  const char* subtree_dirs[kMaxDirs] = {};
  int subtree_count = 0;
  bool armed = false;
};

// "A" kill_file NUL procs_file NUL freezer_state NUL, then "G" dir NUL for each group dir and "S" dir NUL for each
// subtree dir.
std::string EncodePlan(const ReaperPlan& plan) {
  std::string message = "A";
  for (const std::string* field : {&plan.kill_file, &plan.procs_file, &plan.freezer_state_file}) {
    message += *field;
    message += '\0';
  }
  for (const std::string& dir : plan.group_dirs) message += "G" + dir + '\0';
  for (const std::string& dir : plan.subtree_dirs) message += "S" + dir + '\0';
  return message;
}

// Parses a message of `size` bytes already in plan->buffer. Async-signal-safe.
void DecodePlan(ArmedPlan* plan, size_t size) {
  char* p = plan->buffer + 1;
  char* end = plan->buffer + size;
  const char** fixed[] = {&plan->kill_file, &plan->procs_file, &plan->freezer_state_file};
  plan->group_count = plan->subtree_count = 0;
  plan->armed = false;
  for (const char** field : fixed) {
    char* nul = static_cast<char*>(memchr(p, '\0', static_cast<size_t>(end - p)));
    if (!nul) return;
    *field = p;
    p = nul + 1;
  }
  while (p < end) {
    char kind = *p++;
    char* nul = static_cast<char*>(memchr(p, '\0', static_cast<size_t>(end - p)));
    if (!nul) return;
    if (kind == 'G' && plan->group_count < ArmedPlan::kMaxDirs) plan->group_dirs[plan->group_count++] = p;
    if (kind == 'S' && plan->subtree_count < ArmedPlan::kMaxDirs) plan->subtree_dirs[plan->subtree_count++] = p;
    p = nul + 1;
  }
  plan->armed = true;
}

// The reaper's state, on its own stack: a reaper shares nsbox's memory (Reaper::Start), and several may run at once.
// Messages arrive in `scratch`, so that anything but a plan leaves the last plan intact.
struct ReaperState {
  ArmedPlan plan;
  char scratch[ArmedPlan::kMaxBytes];
};

enum class Message { kNone, kArmed, kDismissed, kEnd };

// Receives one message without waiting; kNone when there is none.
Message ReceiveMessage(int socket_fd, ReaperState* state) {
  ssize_t n = raw::RecvDontWait(socket_fd, state->scratch, sizeof state->scratch);
  if (n < 0) return n == -EAGAIN || n == -EWOULDBLOCK || n == -EINTR ? Message::kNone : Message::kEnd;
  if (n == 0) return Message::kEnd;  // nsbox closed its end (exited, or Abandon)
  if (state->scratch[0] == 'D') return Message::kDismissed;
  if (state->scratch[0] == 'A') {
    memcpy(state->plan.buffer, state->scratch, static_cast<size_t>(n));
    DecodePlan(&state->plan, static_cast<size_t>(n));
    return Message::kArmed;
  }
  return Message::kNone;
}

// Runs in a process that shares nsbox's memory: system calls through sandbox/base/raw_syscall.h only (errno, like
// any thread-local, would be nsbox's), no allocation, nothing written outside its own stack.
[[noreturn]] void ReaperMain(int socket_fd, int parent_pidfd) {
  raw::Setsid();
  // SCHED_BATCH: its wakeups never preempt the running task. When nsbox hands it a group's removal (close of the
  // socket) and goes on with the verdict, the rmdirs run on another CPU, or once nsbox waits, rather than in its
  // place (a run 1.3-1.7 % faster on a 2-CPU PVM guest). A batch task keeps its fair share of CPU time, so the
  // cleanup after nsbox's death is not starved. Best effort: a refusal leaves the reaper as it was.
  struct sched_param batch = {};
  raw::Syscall(SYS_sched_setscheduler, 0, SCHED_BATCH, raw::L(&batch));
  // Hold no other descriptor of nsbox's: a copy of a sandbox's output pipe would keep nsbox from
  // seeing its end of file.
  int keep_low = std::min(socket_fd, parent_pidfd < 0 ? socket_fd : parent_pidfd);
  int keep_high = std::max(socket_fd, parent_pidfd < 0 ? socket_fd : parent_pidfd);
  if (keep_low > 0) raw::CloseRange(0u, static_cast<unsigned>(keep_low - 1));
  if (keep_high > keep_low) raw::CloseRange(static_cast<unsigned>(keep_low + 1), static_cast<unsigned>(keep_high - 1));
  raw::CloseRange(static_cast<unsigned>(keep_high + 1), ~0u);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) raw::IgnoreSignal(sig);

  ReaperState state;
  ArmedPlan& plan = state.plan;
  for (;;) {
    struct pollfd fds[2] = {{socket_fd, POLLIN, 0}, {parent_pidfd, POLLIN, 0}};
    int n = raw::Poll(fds, parent_pidfd >= 0 ? 2 : 1, nullptr);
    if (n < 0) {
      if (n == -EINTR) continue;
      break;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      Message m = ReceiveMessage(socket_fd, &state);
      if (m == Message::kDismissed) raw::ExitProcess(0);  // nsbox cleaned up itself
      if (m == Message::kEnd) break;                      // nsbox is gone, or handed the cleanup over
      continue;
    }
    if (parent_pidfd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      // nsbox exited; what it sent just before still counts (a plan, a dismissal). Without blocking: a child that
      // did not exec may still hold the other end of the socket.
      for (;;) {
        Message m = ReceiveMessage(socket_fd, &state);
        if (m == Message::kDismissed) raw::ExitProcess(0);
        if (m != Message::kArmed) break;
      }
      break;
    }
  }
  if (!plan.armed) raw::ExitProcess(0);  // no group was made under this reaper
  const char* failed_call = nullptr;
  RawKillGroup(plan.kill_file, plan.procs_file, plan.freezer_state_file, &failed_call);
  for (int i = 0; i < plan.group_count; ++i) RawRemoveDir(plan.group_dirs[i]);
  for (int i = 0; i < plan.subtree_count; ++i) raw::Rmdir(plan.subtree_dirs[i]);
  raw::ExitProcess(0);
}

// A reaper's memory of its own when it shares nsbox's: its stack, and below the stack a zeroed block its thread
// pointer (CLONE_SETTLS) points into, so that a stray thread-local access reads zeros of its own instead of racing
// with nsbox's thread. Unmapped once the reaper is reaped.
struct ReaperStack {
  static constexpr size_t kTlsBytes = 16 << 10;     // the thread pointer sits in the middle: room either side
  static constexpr size_t kStackBytes = 256 << 10;  // RemoveChildDirs nests 8 KiB frames five deep; the plan is 32 KiB
  static constexpr size_t kBytes = kTlsBytes + kStackBytes;
  void* base = nullptr;
  void* stack_top() const { return static_cast<char*>(base) + kBytes; }
  void* thread_pointer() const { return static_cast<char*>(base) + kTlsBytes / 2; }
};

// Dismissed reapers that had not exited yet: reaped without blocking on later calls, so tearing a sandbox
// down does not wait for the reaper to be scheduled (about 2 ms on a busy machine). With them, the stacks of the
// reapers that share this process's memory, unmapped once each is reaped.
std::mutex dismissed_mutex;
std::vector<pid_t> dismissed_reapers;
std::vector<std::pair<pid_t, ReaperStack>> reaper_stacks;

void ReleaseStackLocked(pid_t pid) {
  std::erase_if(reaper_stacks, [pid](const std::pair<pid_t, ReaperStack>& entry) {
    if (entry.first != pid) return false;
    ::munmap(entry.second.base, ReaperStack::kBytes);
    return true;
  });
}

void ReapDismissed(pid_t also) {
  std::lock_guard<std::mutex> lock(dismissed_mutex);
  if (also > 0) dismissed_reapers.push_back(also);
  std::erase_if(dismissed_reapers, [](pid_t pid) {
    pid_t done = ::waitpid(pid, nullptr, WNOHANG);
    bool gone = done == pid || (done < 0 && errno == ECHILD);  // ECHILD: someone else reaped it
    if (gone) ReleaseStackLocked(pid);
    return gone;
  });
}

int ReaperEntry(void* arg) {
  const int* fds = static_cast<const int*>(arg);
  ReaperMain(fds[0], fds[1]);
}

}  // namespace

// Where system calls bypass errno (raw::kDirect), the reaper is a clone that shares this process's memory: no page
// tables to copy, none to tear down when it exits (measured: 0.08-0.10 ms of a run). Elsewhere it is forked.
StatusOr<std::unique_ptr<Reaper>> Reaper::Start() {
  ReapDismissed(0);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    return Status::Errno("socketpair(AF_UNIX, SOCK_SEQPACKET) for the cgroup reaper");
  UniqueFd reaper_end(fds[0]);
  UniqueFd nsbox_end(fds[1]);
  pid_t parent = ::getpid();
  // Opened before the clone so there is no window in which the parent's pid could be reused.
  UniqueFd parent_pidfd(static_cast<int>(::syscall(SYS_pidfd_open, parent, 0)));  // -1 before Linux 5.3: socket only
  pid_t pid;
  if constexpr (raw::kDirect) {
    ReaperStack stack;
    stack.base = ::mmap(nullptr, ReaperStack::kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                        -1, 0);
    if (stack.base == MAP_FAILED) return Status::Errno("mmap(cgroup reaper stack)");
    // The x86-64 thread control block starts with pointers to itself (glibc's tcbhead_t: tcb, dtv, self).
    void** tcb = static_cast<void**>(stack.thread_pointer());
    tcb[0] = tcb;
    tcb[2] = tcb;
    // Read by the reaper before the clone returns here: the descriptors' numbers, on the reaper's own stack.
    int* args = static_cast<int*>(stack.stack_top()) - 4;
    args[0] = reaper_end.get();
    args[1] = parent_pidfd.get();
    std::lock_guard<std::mutex> lock(dismissed_mutex);
    pid = ::clone(ReaperEntry, args, CLONE_VM | CLONE_SETTLS | SIGCHLD, args, nullptr, tcb, nullptr);
    if (pid < 0) {
      int err = errno;
      ::munmap(stack.base, ReaperStack::kBytes);
      return Status::Errno("clone(CLONE_VM) for the cgroup reaper", err);
    }
    reaper_stacks.emplace_back(pid, stack);
    // On the CPU nsbox runs on now, for its whole life: its few wakeups then neither wake an idle CPU nor bring
    // nsbox's memory, which it shares, onto a second one (about 1.5 % of a run, tools/bench side by side). It sleeps
    // but for those, and the kernel moves it elsewhere should that CPU go offline or leave nsbox's cpuset. Best
    // effort: a refusal leaves it free to run anywhere.
    const int cpu = ::sched_getcpu();
    if (cpu >= 0 && cpu < CPU_SETSIZE) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      (void)::sched_setaffinity(pid, sizeof one, &one);
    }
  } else {
    pid = ::fork();
    if (pid < 0) return Status::Errno("fork(cgroup reaper)");
    if (pid == 0) {
      ::close(nsbox_end.get());
      ReaperMain(reaper_end.get(), parent_pidfd.get());
    }
  }
  return std::unique_ptr<Reaper>(new Reaper(pid, nsbox_end.release()));
}

StatusOr<std::unique_ptr<Reaper>> Reaper::Start(const ReaperPlan& plan) {
  auto reaper = Start();
  if (!reaper.ok()) return reaper.status();
  NSBOX_RETURN_IF_ERROR((*reaper)->Arm(plan));
  return reaper;
}

Status Reaper::Arm(const ReaperPlan& plan) {
  if (pid_ <= 0) return Status::Error("arming a cgroup reaper that was dismissed");
  std::string message = EncodePlan(plan);
  if (message.size() > ArmedPlan::kMaxBytes || plan.group_dirs.size() > ArmedPlan::kMaxDirs ||
      plan.subtree_dirs.size() > ArmedPlan::kMaxDirs)
    return Status::Error(fmt::format("cgroup reaper plan too large ({} bytes)", message.size()));
  ssize_t n;
  do n = ::send(socket_fd_, message.data(), message.size(), MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(message.size())) return Status::Errno("send(plan to the cgroup reaper)");
  return OkStatus();
}

void Reaper::Dismiss() {
  if (pid_ <= 0) return;
  const char dismiss = 'D';
  while (::send(socket_fd_, &dismiss, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  ::close(socket_fd_);
  socket_fd_ = -1;
  ReapDismissed(pid_);
  pid_ = -1;
}

void Reaper::Abandon() {
  if (pid_ <= 0) return;
  ::close(socket_fd_);  // end of file without a dismissal: the reaper cleans up now
  socket_fd_ = -1;
  ReapDismissed(pid_);  // reaped once it is done, by a later call
  pid_ = -1;
}

Reaper::~Reaper() { Dismiss(); }

bool LeaveRemovalToReaper(bool* removed, Reaper* reaper) {
  if (*removed || !reaper) return false;
  *removed = true;
  reaper->Abandon();
  return true;
}

Status ArmReaper(const CgroupConfig& config, const ReaperPlan& plan, std::unique_ptr<Reaper>* reaper) {
  if (config.prestarted_reaper && config.prestarted_reaper->reaper) {
    *reaper = std::move(config.prestarted_reaper->reaper);
    return (*reaper)->Arm(plan);
  }
  auto started = Reaper::Start(plan);
  if (!started.ok()) return started.status();
  *reaper = std::move(started.value());
  return OkStatus();
}

}  // namespace cgroup_internal

using namespace cgroup_internal;

void WaitForDismissedReapers() {
  std::lock_guard<std::mutex> lock(dismissed_mutex);
  for (pid_t pid : dismissed_reapers) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    ReleaseStackLocked(pid);
  }
  dismissed_reapers.clear();
}

namespace {

std::mutex early_reaper_mutex;
std::unique_ptr<Reaper> early_reaper;

void DismissEarlyReaper() {
  {
    std::lock_guard<std::mutex> lock(early_reaper_mutex);
    early_reaper.reset();
  }
  WaitForDismissedReapers();
}

}  // namespace

void PrestartCgroupReaper() {
  auto reaper = Reaper::Start();
  if (!reaper.ok()) return;
  std::lock_guard<std::mutex> lock(early_reaper_mutex);
  early_reaper = std::move(*reaper);
  std::atexit(DismissEarlyReaper);
}

StatusOr<std::shared_ptr<PrestartedReaper>> StartCgroupReaper() {
  {
    std::lock_guard<std::mutex> lock(early_reaper_mutex);
    if (early_reaper) {
      auto prestarted = std::make_shared<PrestartedReaper>();
      prestarted->reaper = std::move(early_reaper);
      return prestarted;
    }
  }
  auto reaper = Reaper::Start();
  if (!reaper.ok()) return reaper.status();
  auto prestarted = std::make_shared<PrestartedReaper>();
  prestarted->reaper = std::move(reaper.value());
  return prestarted;
}

int JoinCgroupSelf(const CgroupSelfJoin& join) {
  for (int i = 0; i < join.count; ++i) {
    ssize_t n;
    do n = ::write(join.fds[i], "0", 1); while (n < 0 && errno == EINTR);
    if (n != 1) return -1;
  }
  return 0;
}

namespace {

constexpr const char* kFixHint =
    "To give nsbox cgroups: run it as root; or, as a user, start it inside a delegated cgroup "
    "(systemd-run --user --scope -p Delegate=yes nsbox ...) on a cgroup v2 host; on a hybrid or v1 host, "
    "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2 with every controller) or run as root. "
    "Or run without any limits (PolicyBuilder::DangerDisableCgroupLimits).";

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
      problems.push_back("cgroup v2: nsbox is in no cgroup v2 hierarchy (no \"0::\" line in " + config.proc_self_cgroup + ")");
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
    }
    if (missing.empty()) {
      std::vector<std::string> unwritable;
      for (const std::string* dir : {&plan.v1.memory, &plan.v1.pids, &plan.v1.cpu, &plan.v1.cpuacct}) {
        if (!dir->empty() && ::access(dir->c_str(), W_OK) != 0) unwritable.push_back(*dir);
      }
      if (unwritable.empty()) return plan;
      problems.push_back(fmt::format("cgroup v1: no write access to {} (not root and not delegated)",
                                     fmt::join(unwritable, ", ")));
    } else {
      problems.push_back(fmt::format("cgroup v1: controller(s) missing: {}", fmt::join(missing, ", ")));
    }
  }
  return Status::Error(fmt::format("no usable cgroup backend for memory, pids and CPU limits. {}. {}",
                                   fmt::join(problems, "; "), kFixHint));
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
  if (limits.cpus < 0.01) return Status::Error(fmt::format("CgroupLimits::cpus {} is below the minimum of 0.01", limits.cpus));
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
