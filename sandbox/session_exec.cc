// SessionSandbox's execs: the setns helper that starts a payload, its supervision and verdict (supervisor.h,
// verdict.h). The resident process is in session_resident.cc.
#include "sandbox/session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "sandbox/stdin_feeder.h"
#include "sandbox/user_ns.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void SessionHelper::DiscardOutput() {
  for (UniqueFd* fd : {&out, &err}) {
    char buffer[65536];
    while (*fd) {
      ssize_t n = ::read(fd->get(), buffer, sizeof buffer);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) fd->reset();
      break;
    }
  }
}

void SessionHelper::Kill() {
  if (reaped || pid <= 1) return;
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
}

void SessionHelper::Reap() {
  if (reaped || pid <= 0) return;
  int status = 0;
  struct rusage usage = {};
  pid_t got;
  while ((got = ::wait4(pid, &status, __WALL, &usage)) < 0 && errno == EINTR) {
  }
  // ECHILD: Terminate() reaped it while ending the session; it was killed.
  if (got < 0) status = SIGKILL;
  reaped = true;
  exit_status = status;
  cpu_us =
      (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
  max_rss_kb = usage.ru_maxrss;
}

bool SessionSandbox::CancelRequested(short revents) { return revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR); }

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
    helper->Kill();
    helper->Reap();
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
    h.Kill();
    if (end_execs_whole_ && exec_group) (void)exec_group->KillAll();
    h.Reap();
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
    h.Kill();
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
  supervisor.AddSource([&] { return h.pidfd.get(); }, POLLIN,
                       [&](short revents) {
                         if (!(revents & POLLIN)) return;
                         // An end first seen past the deadline is a time-out, as the deadline would have made it: nsbox
                         // was held up (stopped, or starved of CPU) while the program ran on past its limit. Unlike a
                         // run's pid 1, nothing in the sandbox keeps the exec's time for it. As the deadline would, it
                         // ends what the exec left running: before the reap, while the payload's zombie still holds its
                         // process group (an exec without a cgroup has only that).
                         if (!in.timed_out && !in.cancelled && ex.wall_timeout < std::chrono::hours(24 * 365) &&
                             Clock::now() - started >= ex.wall_timeout) {
                           in.timed_out = true;
                           kill_exec();
                         }
                         h.Reap();
                       });
  if (Status s = supervisor.Run([&] { return h.reaped; }); !s.ok()) return SetupError(s.message());
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

}  // namespace nsbox
