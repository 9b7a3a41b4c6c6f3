// SessionSandbox's execs and its resident process: the setns helper that starts a payload, its supervision and
// verdict (supervisor.h, verdict.h).
#include "sandbox/session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "sandbox/base/clone.h"
#include "sandbox/base/defer.h"
#include "sandbox/base/fd_passing.h"
#include "sandbox/base/fs.h"
#include "sandbox/child.h"
#include "sandbox/enter.h"
#include "sandbox/launch.h"
#include "sandbox/launcher.h"
#include "sandbox/spec/cgroup_text.h"
#include "sandbox/stdin_feeder.h"
#include "sandbox/user_ns.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;

// Reads and discards what is there without blocking.
void Discard(UniqueFd& fd) {
  char buffer[65536];
  while (fd) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) fd.reset();
    return;
  }
}

// Kills the exec's process group (its descendants that did not start a session of their own go with it).
void KillExec(SessionHelper& h) {
  if (h.reaped || h.pid <= 1) return;
  ::kill(-h.pid, SIGKILL);
  ::kill(h.pid, SIGKILL);
}

// Waits for the payload (our child: the supervisor is the subreaper its helper handed it to) and records its exit
// status and resource usage.
void Reap(SessionHelper& h) {
  if (h.reaped || h.pid <= 0) return;
  int status = 0;
  struct rusage usage = {};
  pid_t got;
  while ((got = ::wait4(h.pid, &status, __WALL, &usage)) < 0 && errno == EINTR) {
  }
  // ECHILD: Terminate() reaped it while ending the session; it was killed.
  if (got < 0) status = SIGKILL;
  h.reaped = true;
  h.exit_status = status;
  h.cpu_us = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL + usage.ru_utime.tv_usec +
             usage.ru_stime.tv_usec;
  h.max_rss_kb = usage.ru_maxrss;
}

// The client sent a byte or went away.
bool CancelRequested(short revents) { return revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR); }

// Bytes are waiting on the socket, or its other end is gone.
bool HasBytesWaiting(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// One REPL cell's share of what its interpreter, which outlives the cell, has used: read from /proc before and after.
struct ResidentUsage {
  std::optional<int64_t> cpu_ms;       // user + system time, its own and that of the children it waited for
  std::optional<uint64_t> peak_bytes;  // VmHWM
};

ResidentUsage ReadResidentUsage(pid_t pid) {
  ResidentUsage usage;
  static const int64_t ticks_per_second = ::sysconf(_SC_CLK_TCK);
  if (auto stat = ReadFile(fmt::format("/proc/{}/stat", pid), 4096); stat.ok() && ticks_per_second > 0) {
    if (auto ticks = cgroup_internal::ParseCpuTicks(*stat))
      usage.cpu_ms = static_cast<int64_t>(*ticks) * 1000 / ticks_per_second;
  }
  if (auto status = ReadFile(fmt::format("/proc/{}/status", pid), 64 << 10); status.ok()) {
    const size_t at = status->find("\nVmHWM:");
    unsigned long long kb = 0;
    if (at != std::string::npos && std::sscanf(status->c_str() + at, "\nVmHWM: %llu kB", &kb) == 1)
      usage.peak_bytes = static_cast<uint64_t>(kb) * 1024;
  }
  return usage;
}

// Starts the process's peak resident size afresh (clear_refs 5), so that the next VmHWM is one cell's.
bool ResetResidentPeak(pid_t pid) {
  UniqueFd fd(::open(fmt::format("/proc/{}/clear_refs", pid).c_str(), O_WRONLY | O_CLOEXEC));
  return fd && ::write(fd.get(), "5", 1) == 1;
}

}  // namespace

// Why a start waited out its deadline (start_mutex_ held by another start whose payload a process stopped).
constexpr const char* kStartHeldUp =
    "another exec's start held the session's start lock until this one's deadline (a process of the session stopped "
    "that exec's payload before its execve)";

StatusOr<std::unique_ptr<SessionHelper>> SessionSandbox::StartHelper(const Executor& ex, int channel_fd,
                                                                      const CgroupSelfJoin* join,
                                                                      VforkWatchdog::Clock::time_point start_deadline) {
  if (!Alive()) return Status::Error("the session has ended");
  EnterPlan enter;
  ChildPlan& plan = enter.payload;
  EmptyCaps no_caps;
  NSBOX_RETURN_IF_ERROR(PlanPayloadCredentials(policy_, no_caps, &plan));
  plan.new_network = new_network_;
  plan.parent_death_signal = false;  // its helper exits at once; the session's pid namespace takes it down instead
  SetPlanProgram(plan, ex);

  auto out = MakePipe(), err = MakePipe(), control = MakePipe();
  for (auto* p : {&out, &err, &control})
    if (!p->ok()) return p->status().Wrap("creating pipes");
  plan.stdin_fd = ex.stdin_fd;  // Exec's StdinFeeder: its pipe, or a sealed stdin file; or none
  plan.stdout_fd = out->write.get();
  plan.stderr_fd = err->write.get();
  for (int fd : {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd})
    NSBOX_RETURN_IF_ERROR(LetSandboxReopen(fd).Wrap("creating pipes"));
  plan.control_fd = control->write.get();
  plan.channel_fd = channel_fd;
  // The payload hands its seccomp listener over this socket when the profile asks for denial reports.
  UniqueFd seccomp_parent, seccomp_child;
  if (plan.seccomp && plan.seccomp->uses_notify) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      return Status::Errno("socketpair(AF_UNIX) for the seccomp listener");
    seccomp_parent.reset(pair[0]);
    seccomp_child.reset(pair[1]);
  }
  plan.seccomp_socket = seccomp_child.get();
  if (cgroup_) {
    plan.cgroup_join = join ? *join : cgroup_->self_join();
    if (plan.cgroup_join.count == 0) return Status::Error("the session's cgroup gives no way to join it");
  }
  enter.session_pidfd = pid1_pidfd_.get();
  for (int i = 0; i < 6; ++i) enter.ns_fds[i] = ns_fds_[i].get();
  pid_t payload = -1;
  enter.payload_pid = &payload;
  pid_t payload_started = 0;
  enter.payload_started = &payload_started;

  auto helper = std::make_unique<SessionHelper>();
  {
    // One start at a time. The helper runs vfork-style: this thread waits until the payload has called execve (or the
    // helper failed), with every signal blocked meanwhile (the helper and the payload share this thread's memory
    // until then). A Terminate() meanwhile kills pid 1, which takes the payload with it, and reaps what it finds.
    std::unique_lock start(start_mutex_, std::defer_lock);
    if (!start.try_lock_until(start_deadline)) {
      helper->start_timed_out = true;
      helper->reaped = true;
      return helper;
    }
    // Until the helper is reaped: the payload stays unreaped, its pid its own, meanwhile.
    VforkWatch watch(start_watchdog_, &payload_started, start_deadline);
    sigset_t all, old;
    sigfillset(&all);
    // The payload runs in this process's memory until its execve, which keeps the larger of that memory's high-water
    // mark and its own in the payload's peak (ru_maxrss): reset the mark to what is resident now, or every exec would
    // report the supervisor's largest size ever (a large output it held) as its peak. What stays counted is what the
    // supervisor has resident, a few MiB (it hands large buffers back to the system when it frees them: RunSupervisor).
    if (clear_refs_fd_) {
      ssize_t ignored = ::write(clear_refs_fd_.get(), "5", 1);
      (void)ignored;
    }
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t helper_pid = StartVforkChild(EnterSessionEntry, &enter);
    int start_err = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (helper_pid < 0) return Status::Errno("clone(CLONE_VM|CLONE_VFORK, exec helper)", start_err);
    // The helper has left (or is leaving): once it is reaped, the payload is our child.
    while (::waitpid(helper_pid, nullptr, __WALL) < 0 && errno == EINTR) {
    }
    helper->pid = payload;
    std::lock_guard lock(payloads_mutex_);
    if (payload > 0) payloads_.insert(payload);
  }
  helper->out = std::move(out->read);
  helper->err = std::move(err->read);
  helper->control = ControlChannel(std::move(control->read));
  helper->seccomp.socket = std::move(seccomp_parent);
  SetNonBlocking(helper->out.get());
  SetNonBlocking(helper->err.get());
  if (helper->seccomp.socket) SetNonBlocking(helper->seccomp.socket.get());
  if (payload <= 0) {
    // The helper failed before the payload existed; its report is in the control pipe.
    helper->reaped = true;
    return helper;
  }
  // Our unreaped child: its pid cannot be reused before we wait for it.
  helper->pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, payload, 0)));
  if (!helper->pidfd) {
    Status s = Status::Errno(fmt::format("pidfd_open({})", payload));
    KillExec(*helper);
    Reap(*helper);
    Forget(payload);
    return s;
  }
  return helper;
}

// What the helper reported, denied calls, and the limits: the session's counters only grow, so this exec's share is
// what they grew by while it ran.
void SessionSandbox::GatherVerdict(SessionHelper& h, const CgroupStats* counters_before, VerdictInputs* in) {
  in->kind = execs_worded_as_run_ ? VerdictInputs::Kind::kRun : VerdictInputs::Kind::kSessionExec;
  in->setup_failure = h.setup_failure;
  in->program_status = h.exit_status;
  if (h.exit_status && !h.setup_failure) {
    in->cpu_ms = h.cpu_us / 1000;
    in->peak_memory_bytes = static_cast<uint64_t>(h.max_rss_kb) * 1024;
    // The resident size counts the supervisor's pages the payload started in, which the session's group does not
    // hold for it: a figure past the limit that held it is that, not memory the program had.
    if (const auto& limits = policy_.cgroup_limits(); limits && limits->memory_max_bytes > 0)
      in->peak_memory_bytes = std::min(in->peak_memory_bytes, limits->memory_max_bytes);
  }
  h.seccomp.Report(in);
  if (counters_before) AddLimits(*counters_before, in);
}

void SessionSandbox::AddLimits(const CgroupStats& counters_before, VerdictInputs* in) const {
  if (!cgroup_) {
    in->limits = LimitsReport{};
    in->limits->backend = "none";
    return;
  }
  CgroupStats stats = cgroup_->ReadStats();
  stats.oom_kills -= std::min(stats.oom_kills, counters_before.oom_kills);
  stats.pids_limit_events -= std::min(stats.pids_limit_events, counters_before.pids_limit_events);
  stats.pids_limit_hit = stats.pids_limit_events > 0;
  stats.cpu_throttled_us -= std::min(stats.cpu_throttled_us, counters_before.cpu_throttled_us);
  in->limits = cgroup_->ReportFrom(*policy_.cgroup_limits(), stats);
  // Added to what the caller found missing already (a REPL cell's /proc figures), not in its place.
  in->measurement_errors.insert(in->measurement_errors.end(), stats.read_errors.begin(), stats.read_errors.end());
}

Result SessionSandbox::Exec(Executor ex, int cancel_fd, const std::function<void(Result&)>& on_ran,
                            LiveOutput* live) {
  const auto started = Clock::now();
  std::shared_lock call(calls_mutex_);
  if (terminating_) return SetupError("the session is ending");
  if (std::string why = CheckExecutor(ex); !why.empty()) return SetupError(why);
  RequestWindow window(*this);
  const CgroupStats counters_before = cgroup_ ? cgroup_->ReadCounters() : CgroupStats{};
  // The program's stdin is a pipe the supervisor fills, never the descriptor the client sent (stdin_feeder.h).
  StdinFeeder stdin_feeder;
  if (ex.stdin_fd >= 0) {
    if (Status s = stdin_feeder.Start(ex.stdin_fd, pass_sealed_stdin_); !s.ok())
      return SetupError(s.Wrap("creating pipes").message());
    ex.stdin_fd = stdin_feeder.child_end();
  }

  // The exec's own group: its time-out kills everything the exec started, however it detached (setsid, double fork).
  // An exec with a memory limit of its own gets a fresh group carrying it; one that cannot be set is refused.
  if (ex.memory_max_bytes > 0 && !cgroup_)
    return SetupError("the exec's own memory limit needs the session's cgroup (the session runs without limits)");
  auto made = ex.memory_max_bytes > 0 ? StartExecGroup(ex.memory_max_bytes) : StartExecGroup();
  if (!made.ok()) return SetupError(made.status().Wrap("creating the exec's cgroup").message());
  std::unique_ptr<CgroupChild> exec_group = std::move(*made);
  CgroupSelfJoin exec_join;
  if (exec_group) exec_join = exec_group->self_join();
  auto started_helper = StartHelper(ex, -1, exec_group ? &exec_join : nullptr, started + ex.wall_timeout);
  if (!started_helper.ok()) {
    KeepExecGroup(std::move(exec_group));
    return SetupError(started_helper.status().message());
  }
  std::unique_ptr<SessionHelper> helper = std::move(*started_helper);
  if (helper->start_timed_out) {  // the exec's time ran out before it could start: its verdict is the time-out
    KeepExecGroup(std::move(exec_group));
    VerdictInputs in;
    in.kind = execs_worded_as_run_ ? VerdictInputs::Kind::kRun : VerdictInputs::Kind::kSessionExec;
    in.wall_timeout = ex.wall_timeout;
    in.timed_out = true;
    in.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
    Result result = MakeVerdict(std::move(in));
    result.reason += fmt::format("; the program never started: {}", kStartHeldUp);
    return result;
  }
  stdin_feeder.ReleaseChildEnd();
  SessionHelper& h = *helper;
  Defer forget([&] {
    KillExec(h);
    if (end_execs_whole_ && exec_group) (void)exec_group->KillAll();
    Reap(h);
    Forget(h.pid);
    // What the exec started in a session of its own lives on in its group until it ends (or the session does), and
    // may go on writing to the exec's output: read on, and dropped, so that a server started with `&` lives.
    KeepExecGroup(std::move(exec_group));
    if (!end_execs_whole_) {
      output_drain_.Add(std::move(h.out));
      output_drain_.Add(std::move(h.err));
    }
  });

  VerdictInputs in;
  in.wall_timeout = ex.wall_timeout;
  in.heap_exhausted_text = ex.heap_exhausted_text;
  auto kill_exec = [&] {
    KillExec(h);
    if (exec_group) (void)exec_group->KillAll();
  };
  Supervisor supervisor(ex.output_limit_bytes);
  supervisor.AddOutput(&h.out, &h.err, live);
  supervisor.AddStdin(&stdin_feeder);
  supervisor.AddSeccompListener(&h.seccomp, policy_.seccomp() ? policy_.seccomp()->notify_errno : 0);
  supervisor.AddSource([&] { return h.control.fd(); }, POLLIN,
                       [&](short) { h.control.ReadSetupFailure(&h.setup_failure); });
  supervisor.SetDeadline(started + ex.wall_timeout, [&] {
    in.timed_out = true;
    supervisor.MarkEnding();
    kill_exec();
  });
  supervisor.AddSource([&] { return supervisor.ending() ? -1 : cancel_fd; }, POLLIN | POLLRDHUP, [&](short revents) {
    if (!revents || !CancelRequested(revents)) return;
    in.cancelled = true;
    supervisor.MarkEnding();
    kill_exec();
  });
  // The copy of the output failed (its reader is gone: EPIPE): the exec ends, as a pipeline's writer does.
  bool output_failed = false;
  supervisor.AddSource([&] { return live && !output_failed && !supervisor.ending() ? live->failed_fd() : -1; }, POLLIN,
                       [&](short revents) {
                         if (!(revents & POLLIN)) return;
                         output_failed = in.cancelled = true;
                         supervisor.MarkEnding();
                         kill_exec();
                       });
  Clock::time_point seen_ended = Clock::time_point::max();
  supervisor.AddSource([&] { return h.pidfd.get(); }, POLLIN,
                       [&](short revents) {
                         if (!(revents & POLLIN)) return;
                         Reap(h);
                         if (h.reaped && seen_ended == Clock::time_point::max()) seen_ended = Clock::now();
                       });
  if (Status s = supervisor.Run([&] { return h.reaped; }); !s.ok()) return SetupError(s.message());
  // An end first seen past the deadline is a time-out, as the deadline would have made it: nsbox was held up (stopped,
  // or starved of CPU) while the program ran on past its limit. Unlike a run's pid 1, nothing in the sandbox keeps
  // the exec's time for it.
  if (!in.timed_out && !in.cancelled && seen_ended != Clock::time_point::max() &&
      ex.wall_timeout < std::chrono::hours(24 * 365) && seen_ended - started >= ex.wall_timeout)
    in.timed_out = true;
  // The payload has exited: what it wrote is in the pipes. Descendants that still hold them are not waited for.
  supervisor.DrainOutput();
  h.control.ReadSetupFailure(&h.setup_failure);

  Result passed_on;
  supervisor.TakeOutput(&in, &passed_on.output_passed_on, &passed_on.output_write_errno);
  GatherVerdict(h, &counters_before, &in);
  uint64_t own_oom_kills = 0;  // in the exec's own group: this exec's, whatever else ran beside it
  if (in.limits && exec_group && ex.memory_max_bytes > 0) {  // the exec's own memory limit: it is what held
    own_oom_kills = exec_group->OomKillsApart();
    // Its group's peak, as a run's is its cgroup's, rather than the largest process's resident size (which for a
    // payload forked from the supervisor starts at the supervisor's own).
    if (auto peak = exec_group->PeakMemoryBytes(); peak && in.program_status) in.peak_memory_bytes = *peak;
    in.limits->oom_kills += own_oom_kills;
    in.own_memory_limit = ex.memory_max_bytes < in.limits->memory_max_bytes;
    in.limits->memory_max_bytes = std::min(in.limits->memory_max_bytes, ex.memory_max_bytes);
  }
  if (terminating_) in.session_ended = SessionEndedReason("exec");
  in.counters_shared = window.Shared() && own_oom_kills == 0;
  in.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  const bool ended_for_output = output_failed && !in.timed_out && !in.program_status;
  Result result = MakeVerdict(std::move(in));
  if (ended_for_output)
    result.reason =
        fmt::format("ended early: its output could not be passed on ({})", ErrnoName(passed_on.output_write_errno));
  result.output_passed_on = passed_on.output_passed_on;
  result.output_write_errno = passed_on.output_write_errno;
  if (on_ran) on_ran(result);
  return result;
}

void SessionSandbox::DropResident() {
  if (!resident_) return;
  KillExec(*resident_);
  if (!resident_->reaped) ::kill(resident_->pid, SIGKILL);
  if (resident_group_) {
    (void)resident_group_->KillAll();
    KeepExecGroup(std::move(resident_group_));
  }
  Reap(*resident_);
  Forget(resident_->pid);
  resident_.reset();
  resident_channel_.reset();
  resident_lost_ = true;
}

ResidentTurn SessionSandbox::AskResident(const ResidentOptions& process, const std::string& request,
                                         const ResidentTurnOptions& options, int cancel_fd) {
  const auto arrived = Clock::now();
  ResidentTurn turn;
  std::shared_lock call(calls_mutex_);
  if (terminating_) {
    turn.result = SetupError("the session is ending");
    return turn;
  }
  // Requests take turns. One that waits out its whole time limit behind another does not run, and leaves the process
  // and its state alone: it never started, so it cannot have timed out in there.
  std::unique_lock lock(resident_mutex_, std::defer_lock);
  if (options.wall_timeout >= std::chrono::hours(24 * 365)) {
    lock.lock();
  } else if (!lock.try_lock_until(arrived + options.wall_timeout)) {
    VerdictInputs waited;
    waited.kind = VerdictInputs::Kind::kSessionExec;
    waited.timed_out = true;
    waited.wall_timeout = options.wall_timeout;
    turn.result = MakeVerdict(std::move(waited));
    turn.result.signal = 0;  // nothing was killed
    turn.result.reason = fmt::format("the time limit of {} ms passed while an earlier request still held the "
                                     "process: this one did not run, and the process keeps its state",
                                     options.wall_timeout.count());
    turn.result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - arrived).count();
    return turn;
  }
  if (terminating_) {  // it ended while this request waited
    turn.result = SetupError("the session is ending");
    return turn;
  }
  // The time limit is the request's own, from when it has the process. The session's counters, as for an exec: what
  // the limits did while this request ran (an OOM kill of the process itself among it).
  const auto started = Clock::now();
  RequestWindow window(*this);
  const CgroupStats counters_before = cgroup_ ? cgroup_->ReadCounters() : CgroupStats{};
  // A process that died between requests (killed from an exec, say) is replaced, and the loss reported. So is one
  // whose channel holds bytes that no request asked for: its next answer could be anything.
  if (resident_) {
    struct pollfd fd = {resident_->pidfd.get(), POLLIN, 0};
    if (::poll(&fd, 1, 0) > 0) {
      DropResident();
    } else if (HasBytesWaiting(resident_channel_.get())) {
      DropResident();
      turn.restarted_out_of_step = true;
    }
  }
  if (!resident_) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      turn.result = SetupError(Status::Errno("socketpair(AF_UNIX, resident channel)").message());
      return turn;
    }
    UniqueFd ours(pair[0]), theirs(pair[1]);
    Executor ex;
    ex.argv = process.argv;
    ex.env = process.env;
    ex.umask = process.umask;
    auto group = StartExecGroup();
    if (!group.ok()) {
      turn.result = SetupError(group.status().Wrap("creating the REPL interpreter's cgroup").message());
      return turn;
    }
    CgroupSelfJoin join;
    if (*group) join = (*group)->self_join();
    auto helper = StartHelper(ex, theirs.get(), *group ? &join : nullptr, started + options.wall_timeout);
    if (!helper.ok() || (*helper)->start_timed_out) {
      KeepExecGroup(std::move(*group));
      turn.result = SetupError(helper.ok() ? std::string(kStartHeldUp)
                                           : helper.status().Wrap("starting the REPL interpreter").message());
      return turn;
    }
    resident_ = std::move(*helper);
    resident_group_ = std::move(*group);
    resident_channel_ = std::move(ours);
    turn.state_lost = resident_lost_;
    resident_lost_ = false;
  }
  turn.started = true;
  SessionHelper& h = *resident_;
  // Output of earlier requests' leftovers (background threads) is not this one's.
  Discard(h.out);
  Discard(h.err);
  h.control.ReadSetupFailure(&h.setup_failure);
  // The interpreter's figures so far, to take the cell's share from, and its peak started afresh for the cell.
  const ResidentUsage usage_before = ReadResidentUsage(h.pid);
  const bool peak_reset = ResetResidentPeak(h.pid);

  bool died = false;
  for (size_t done = 0; done < request.size();) {
    ssize_t n = ::send(resident_channel_.get(), request.data() + done, request.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      died = true;
      break;
    }
    done += static_cast<size_t>(n);
  }

  Supervisor supervisor(options.output_limit_bytes);
  supervisor.AddOutput(&h.out, &h.err);
  // A resident process outlives its requests: a thread answers its seccomp notifications between them.
  supervisor.AddSeccompListener(&h.seccomp, policy_.seccomp() ? policy_.seccomp()->notify_errno : 0, true);
  supervisor.AddSource([&] { return h.control.fd(); }, POLLIN,
                       [&](short) { h.control.ReadSetupFailure(&h.setup_failure); });
  supervisor.SetDeadline(started + options.wall_timeout, [&] { turn.timed_out = true; });
  std::string answer;
  supervisor.AddSource([&] { return resident_channel_.get(); }, POLLIN, [&](short revents) {
    if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
    char buffer[65536];
    ssize_t n = ::recv(resident_channel_.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      answer.append(buffer, static_cast<size_t>(n));
      std::string why;
      const int framed = options.frame(answer, &why);
      if (framed > 0) turn.answered = true;
      if (framed < 0) turn.out_of_step = why.empty() ? "the channel is out of step" : why;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      died = true;
    }
  });
  supervisor.AddSource([&] { return h.pidfd.get(); }, POLLIN, [&](short revents) {
    if (revents & POLLIN) died = true;
  });
  supervisor.AddSource([&] { return cancel_fd; }, POLLIN | POLLRDHUP, [&](short revents) {
    if (revents && CancelRequested(revents)) turn.cancelled = true;
  });
  Status polled = supervisor.Run(
      [&] { return died || turn.answered || !turn.out_of_step.empty() || turn.timed_out || turn.cancelled; });
  if (!polled.ok()) {
    turn.result = SetupError(polled.message());
    return turn;
  }
  // An interpreter whose end is first seen at or past the deadline (held up, then killed by its start's own deadline;
  // or nsbox late to look): the cell's time ran out, whatever ended the process.
  if (died && !turn.answered && !turn.cancelled && options.wall_timeout < std::chrono::hours(24 * 365) &&
      Clock::now() >= started + options.wall_timeout)
    turn.timed_out = true;
  VerdictInputs in;
  if (turn.answered) {
    turn.answer = std::move(answer);
    supervisor.DrainOutput();  // what the process printed before it answered is in the pipes by now
    supervisor.TakeOutput(&in);
    // The process lives on: the answer is the outcome, which the caller reads from it (status ok until it says).
    in.kind = VerdictInputs::Kind::kSessionExec;
    in.program_status = 0;
    const ResidentUsage usage_after = ReadResidentUsage(h.pid);
    if (usage_before.cpu_ms && usage_after.cpu_ms)
      in.cpu_ms = std::max<int64_t>(0, *usage_after.cpu_ms - *usage_before.cpu_ms);
    else
      in.measurement_errors.push_back(fmt::format("cpu_ms: /proc/{}/stat could not be read", h.pid));
    if (peak_reset && usage_after.peak_bytes)
      in.peak_memory_bytes = *usage_after.peak_bytes;
    else
      in.measurement_errors.push_back(fmt::format("peak_memory_bytes: /proc/{}/clear_refs or status", h.pid));
    AddLimits(counters_before, &in);
    in.counters_shared = window.Shared();
    turn.result = MakeVerdict(std::move(in));
  } else {
    // Timed out, cancelled, crashed or out of step: the process goes, and the next request starts a fresh one. Its
    // peak is read while it still lives; its time from its end, less what earlier requests used.
    const ResidentUsage usage_last = died ? ResidentUsage{} : ReadResidentUsage(h.pid);
    KillExec(h);
    Reap(h);
    h.control.ReadSetupFailure(&h.setup_failure);
    supervisor.DrainOutput();
    supervisor.TakeOutput(&in);
    GatherVerdict(h, &counters_before, &in);
    if (in.program_status) {
      if (usage_before.cpu_ms) in.cpu_ms = std::max<int64_t>(0, in.cpu_ms - *usage_before.cpu_ms);
      if (peak_reset && usage_last.peak_bytes) in.peak_memory_bytes = *usage_last.peak_bytes;
    }
    in.timed_out = turn.timed_out;
    in.cancelled = turn.cancelled;
    in.wall_timeout = options.wall_timeout;
    in.counters_shared = window.Shared();
    if (terminating_) turn.session_ended = SessionEndedReason("cell");
    turn.result = MakeVerdict(std::move(in));
    DropResident();
  }
  turn.result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  return turn;
}

}  // namespace nsbox
