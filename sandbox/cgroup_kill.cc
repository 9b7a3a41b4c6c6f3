// Killing a group's processes and removing its directories: the async-signal-safe loops the reaper runs too.
#include "sandbox/cgroup_kill.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace nsbox::cgroup_internal {

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

// Writes THAWED to the freezer.state of every group below `dir` (a v1 freezer group), deepest last. A group that a
// killer froze (an exec's, killed on its time-out) stays frozen if that killer died before it thawed it, and its
// processes, SIGKILLed or not, can then never exit: pid 1 would wait for them for ever. Allocation-free and
// async-signal-safe: the reaper runs it.
void ThawChildGroups(const char* dir, int depth) {
  if (depth > 4) return;
  int fd = sys::Open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  size_t dir_len = strlen(dir);
  char entries[4096];
  ssize_t n;
  while ((n = sys::Getdents64(fd, entries, sizeof entries)) > 0) {
    for (ssize_t at = 0; at < n;) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(entries + at);
      at += entry->d_reclen;
      const char* name = entry->d_name;
      if (entry->d_type != DT_DIR || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
      static constexpr char kState[] = "/freezer.state";
      size_t name_len = strlen(name);
      char child[PATH_MAX];
      if (dir_len + 1 + name_len + sizeof kState > sizeof child) continue;
      memcpy(child, dir, dir_len);
      child[dir_len] = '/';
      memcpy(child + dir_len + 1, name, name_len + 1);
      memcpy(child + dir_len + 1 + name_len, kState, sizeof kState);
      RawWrite(child, "THAWED");
      child[dir_len + 1 + name_len] = '\0';
      ThawChildGroups(child, depth + 1);
    }
  }
  sys::Close(fd);
}

// ThawChildGroups of the directory that holds `state_file`.
void ThawBelow(const char* state_file) {
  const char* slash = strrchr(state_file, '/');
  if (!slash) return;
  char dir[PATH_MAX];
  size_t dir_len = static_cast<size_t>(slash - state_file);
  if (dir_len >= sizeof dir) return;
  memcpy(dir, state_file, dir_len);
  dir[dir_len] = '\0';
  ThawChildGroups(dir, 0);
}

}  // namespace

int RawKillGroup(const char* kill_file, const char* procs_file, const char* freezer_state, const char** failed_call) {
  bool use_kill_file = kill_file != nullptr && kill_file[0] != '\0';
  bool use_freezer = freezer_state != nullptr && freezer_state[0] != '\0';
  // v2 counts the groups below too (cgroup.procs lists the group's own processes only); cgroup.kill takes them.
  int populated = use_kill_file ? RawPopulated(procs_file) : -1;
  if (populated == 0) return 0;
  // v1: an empty group can still have a frozen one below it, whose processes are killed (or exit with pid 1's
  // namespace) only once thawed.
  if (use_freezer) ThawBelow(freezer_state);
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
    if (use_freezer) {
      RawWrite(freezer_state, "THAWED");  // frozen tasks die only once thawed
      ThawBelow(freezer_state);           // and those of a group below that its killer left frozen
    }
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

Status RemoveDir(const std::string& dir) {
  int err = RawRemoveDir(dir.c_str());
  return err == 0 ? OkStatus() : Status::Errno(fmt::format("rmdir({})", dir), err);
}

void RemoveSubtreeIfEmpty(const std::string& dir) {
  ::rmdir(dir.c_str());  // fails with EBUSY/ENOTEMPTY while another sandbox has a group there: fine
}

}  // namespace nsbox::cgroup_internal
