// Subprocess: posix_spawn in a new session, a poll loop over the pipes and a pidfd, and the kill of the whole process
// group.
#include "src/runtime/subprocess.h"

#include "sandbox/output_buffer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "sandbox/base/unique_fd.h"

extern char** environ;

namespace nsbox::runtime {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<std::string> InheritedEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

std::string FindExecutable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (end > start && access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

namespace {

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return Status::Errno(fmt::format("fcntl({}, O_NONBLOCK)", fd));
  return OkStatus();
}

// One stream's capture, and for SubprocessSpec::on_stdout_line its lines as they come.
class StreamCapture {
 public:
  StreamCapture(uint64_t limit, std::function<bool(std::string_view)> on_line)
      : capture_(limit), limit_(limit), on_line_(std::move(on_line)) {}
  void Append(std::string_view data) {
    if (!on_line_) return capture_.Append(data);
    size_t start = 0, scan = pending_.size();  // what is pending has no newline
    pending_.append(data);
    for (size_t end; (end = pending_.find('\n', scan)) != std::string::npos; start = scan = end + 1) {
      std::string_view line(pending_.data() + start, end - start);
      if (skipping_ || !on_line_(line)) capture_.Append(std::string_view(pending_.data() + start, end + 1 - start));
      skipping_ = false;
    }
    pending_.erase(0, start);
    if (pending_.size() > limit_) {  // an overlong line: captured, up to and with its newline, and never shown
      capture_.Append(pending_);
      pending_.clear();
      skipping_ = true;
    }
  }
  // At the end: an unfinished last line is captured.
  OutputBuffer& Finish() {
    capture_.Append(pending_);
    pending_.clear();
    return capture_;
  }

 private:
  OutputBuffer capture_;
  uint64_t limit_;
  std::function<bool(std::string_view)> on_line_;
  std::string pending_;
  bool skipping_ = false;
};

// Reads what is there; returns false at end of file.
bool Drain(int fd, StreamCapture& capture) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      capture.Append(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN;  // any other error ends the stream
  }
}

// Writes to a pipe without dying of SIGPIPE when the reader is gone: SIGPIPE is blocked in this
// thread for the write, and a SIGPIPE the write raised is taken off the pending set again.
ssize_t WriteNoSigpipe(int fd, const char* data, size_t size) {
  sigset_t pipe_set, old_set, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  ssize_t n = write(fd, data, size);
  int saved = errno;
  if (n < 0 && saved == EPIPE && !was_pending) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved;
  return n;
}

struct Pipe {
  UniqueFd read_end, write_end;
};

StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return Status::Errno("pipe2(O_CLOEXEC)");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace

StatusOr<SubprocessOutcome> RunSubprocess(const SubprocessSpec& spec) {
  if (spec.argv.empty()) return Status::Error("RunSubprocess: empty argv");
  auto out_pipe = MakePipe();
  if (!out_pipe.ok()) return out_pipe.status();
  auto err_pipe = MakePipe();
  if (!err_pipe.ok()) return err_pipe.status();
  std::optional<Pipe> in_pipe;
  if (spec.stdin_data) {
    auto p = MakePipe();
    if (!p.ok()) return p.status();
    in_pipe = std::move(*p);
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  struct SpawnCleanup {
    posix_spawn_file_actions_t* a;
    posix_spawnattr_t* b;
    ~SpawnCleanup() {
      posix_spawn_file_actions_destroy(a);
      posix_spawnattr_destroy(b);
    }
  } cleanup{&actions, &attr};
  if (in_pipe) posix_spawn_file_actions_adddup2(&actions, in_pipe->read_end.get(), 0);
  else posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe->write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe->write_end.get(), 2);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, spec.cwd.c_str());
  // Whatever descriptors this process holds (sockets of the HTTP client, say) stay out of the child.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  sigset_t empty_set, all_signals;
  sigemptyset(&empty_set);
  sigfillset(&all_signals);
  posix_spawnattr_setsigmask(&attr, &empty_set);
  posix_spawnattr_setsigdefault(&attr, &all_signals);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  Clock::time_point start = Clock::now();
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  if (rc != 0) return Status::Errno(fmt::format("posix_spawn({})", spec.argv[0]), rc);
  out_pipe->write_end.reset();
  err_pipe->write_end.reset();
  if (in_pipe) in_pipe->read_end.reset();

  SubprocessOutcome outcome;
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) {
    Status status = Status::Errno(fmt::format("pidfd_open({})", pid));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return status;
  }
  for (int fd : {out_pipe->read_end.get(), err_pipe->read_end.get()}) NSBOX_RETURN_IF_ERROR(SetNonBlocking(fd));
  if (in_pipe) NSBOX_RETURN_IF_ERROR(SetNonBlocking(in_pipe->write_end.get()));

  StreamCapture out_stream(spec.output_limit_bytes, spec.on_stdout_line), err_stream(spec.output_limit_bytes, nullptr);
  bool child_done = false, out_open = true, err_open = true;
  size_t in_offset = 0;
  // time_point::max() means "not set" (std::optional here trips GCC's maybe-uninitialized).
  constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point sigkill_at = kNever, drain_until = kNever;
  auto begin_kill = [&](Clock::time_point now) {
    if (spec.term_grace.count() > 0) {
      killpg(pid, SIGTERM);
      sigkill_at = now + spec.term_grace;
    } else {
      killpg(pid, SIGKILL);
    }
  };

  while (!child_done || out_open || err_open) {
    Clock::time_point now = Clock::now();
    milliseconds wait{100};  // the cancel flag is polled at this interval
    if (!child_done) {
      if (!outcome.cancelled && !outcome.deadline_passed) {
        if (spec.cancel && spec.cancel->load()) {
          outcome.cancelled = true;
          begin_kill(now);
        } else if (spec.deadline && now >= *spec.deadline) {
          outcome.deadline_passed = true;
          begin_kill(now);
        } else if (spec.deadline) {
          wait = std::min(wait, std::chrono::ceil<milliseconds>(*spec.deadline - now));
        }
      }
      if (sigkill_at != kNever) {
        if (now >= sigkill_at) {
          killpg(pid, SIGKILL);
          sigkill_at = kNever;
        } else {
          wait = std::min(wait, std::chrono::ceil<milliseconds>(sigkill_at - now));
        }
      }
    } else {
      // A process that left the group (setsid) may hold the pipes open: stop waiting for it soon.
      if (now >= drain_until) break;
      wait = std::min(wait, std::chrono::ceil<milliseconds>(drain_until - now));
    }

    std::vector<pollfd> fds;
    if (!child_done) fds.push_back({pidfd.get(), POLLIN, 0});
    if (out_open) fds.push_back({out_pipe->read_end.get(), POLLIN, 0});
    if (err_open) fds.push_back({err_pipe->read_end.get(), POLLIN, 0});
    bool writing = in_pipe && in_pipe->write_end.valid();
    if (writing) fds.push_back({in_pipe->write_end.get(), POLLOUT, 0});
    int ready = poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait.count(), 0)));
    if (ready < 0 && errno != EINTR) {
      Status status = Status::Errno("poll(subprocess pipes)");
      killpg(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return status;
    }
    if (ready <= 0) continue;
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == out_pipe->read_end.get()) out_open = Drain(p.fd, out_stream);
      else if (p.fd == err_pipe->read_end.get()) err_open = Drain(p.fd, err_stream);
      else if (writing && p.fd == in_pipe->write_end.get()) {
        const std::string& data = *spec.stdin_data;
        while (in_offset < data.size()) {
          ssize_t n = WriteNoSigpipe(p.fd, data.data() + in_offset, data.size() - in_offset);
          if (n > 0) in_offset += static_cast<size_t>(n);
          else break;
        }
        // Done, or the reader went away (EPIPE) or failed: either way close our end so it sees EOF.
        if (in_offset >= data.size() || (errno != EAGAIN && errno != EINTR) || (p.revents & (POLLERR | POLLHUP)))
          in_pipe->write_end.reset();
      } else if (p.fd == pidfd.get()) {
        child_done = true;
        // The program is gone; what it started in its group goes with it (nothing is left behind).
        killpg(pid, SIGKILL);
        drain_until = Clock::now() + milliseconds(2000);
      }
    }
  }
  if (in_pipe) in_pipe->write_end.reset();

  int wstatus = 0;
  struct rusage usage {};
  while (wait4(pid, &wstatus, 0, &usage) < 0) {
    if (errno != EINTR) return Status::Errno(fmt::format("wait4({})", pid));
  }
  outcome.wall_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  outcome.cpu_ms = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000 +
                   (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000;
  outcome.peak_rss_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  if (WIFEXITED(wstatus)) {
    outcome.exited = true;
    outcome.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    outcome.signal = WTERMSIG(wstatus);
  }
  const OutputBuffer& out_capture = out_stream.Finish();
  const OutputBuffer& err_capture = err_stream.Finish();
  outcome.stdout_data = out_capture.Contents();
  outcome.stderr_data = err_capture.Contents();
  outcome.stdout_bytes = out_capture.total_bytes();
  outcome.stderr_bytes = err_capture.total_bytes();
  outcome.stdout_truncated = out_capture.truncated();
  outcome.stderr_truncated = err_capture.truncated();
  return outcome;
}

}  // namespace nsbox::runtime
