// Sandbox: one run: launch (launcher.h), supervise (supervisor.h), verdict (verdict.h); the root's plan.
#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "sandbox/base/defer.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/init.h"
#include "sandbox/launcher.h"
#include "sandbox/live_output.h"
#include "sandbox/mount_ns.h"
#include "sandbox/spec/mount_plan.h"
#include "sandbox/supervisor.h"
#include "sandbox/verdict.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

StatusOr<std::vector<ChildMount>> PlanChildRoot(const Policy& policy) {
  const HostView* host_view = policy.host_rootfs() ? policy.host_view() : nullptr;
  if (policy.host_rootfs() && !host_view)
    return Status::Error("planning the root filesystem: the policy uses the host's root but has no host view "
                         "(PolicyBuilder::SetHostViewFile)");
  MountPlanInputs inputs;
  inputs.policy = &policy;
  inputs.host_view = host_view;
  if (policy.network() == NetworkMode::kHost) {
    auto resolv = ReadFile("/etc/resolv.conf", 1 << 16);
    inputs.resolv_conf = resolv.ok() ? *resolv : "";
  } else {
    // Its network namespace has only loopback: no name server to name. A proxy the front end starts there (HTTP_PROXY)
    // resolves names itself.
    inputs.resolv_conf =
        "# nsbox: no name server: this sandbox's network has only loopback (and $HTTP_PROXY, if set)\n";
  }
  auto mount_plan = BuildMountPlan(inputs);
  if (!mount_plan.ok()) return mount_plan.status().Wrap("planning the root filesystem");
  PrepareDeviceNodeTree();  // before any clone: the child binds its device nodes from it (mount_ns.h)
  return PrepareChildMounts(*mount_plan);
}

std::string CheckOutputLimit(uint64_t bytes) {
  if (bytes <= kMaxOutputLimitBytes) return "";
  return fmt::format(
      "an output limit of {} bytes per stream is more than nsbox keeps ({} bytes, 64M; it holds the "
      "kept output outside the sandbox's memory limit, several times over as JSON): write large "
      "outputs to files instead",
      bytes, kMaxOutputLimitBytes);
}

std::string CheckExecutor(const Executor& executor) {
  if (executor.argv.empty()) return "nothing to run: empty command";
  for (size_t i = 0; i < executor.argv.size(); ++i)
    if (executor.argv[i].find('\0') != std::string::npos)
      return fmt::format("Executor::argv[{}] holds a NUL byte", i);
  for (const auto& [name, value] : executor.env) {
    if (name.empty() || name.find_first_of(std::string_view("=\0", 2)) != std::string::npos)
      return fmt::format("Executor::env: the name '{}' is empty or holds '=' or a NUL byte", name.substr(0, 64));
    if (value.find('\0') != std::string::npos)
      return fmt::format("Executor::env: the value of {} holds a NUL byte", name);
  }
  if (executor.stdin_fd >= 0) {
    // A descriptor the program's input cannot be read from would read as an empty input: an "ok" run on nothing.
    const int flags = ::fcntl(executor.stdin_fd, F_GETFL);
    if (flags < 0) return fmt::format("Executor::stdin_fd {} is not an open descriptor", executor.stdin_fd);
    if ((flags & O_ACCMODE) == O_WRONLY)
      return fmt::format("Executor::stdin_fd {} is open for writing only", executor.stdin_fd);
    struct stat st;
    if (::fstat(executor.stdin_fd, &st) == 0 && S_ISDIR(st.st_mode))
      return fmt::format("Executor::stdin_fd {} is a directory", executor.stdin_fd);
  }
  return CheckOutputLimit(executor.output_limit_bytes);
}

std::map<std::string, std::string> DefaultSandboxEnv() {
  return {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
          {"HOME", "/home/sandbox"},
          {"USER", "sandbox"},
          {"LOGNAME", "sandbox"},
          {"SHELL", "/bin/sh"},
          {"LANG", "C.UTF-8"},
          {"TMPDIR", "/tmp"}};
}

void Sandbox::Kill() {
  kill_requested_ = true;
  if (kill_eventfd_ >= 0) {
    uint64_t one = 1;
    ssize_t ignored = ::write(kill_eventfd_, &one, sizeof one);
    (void)ignored;
  }
}

Result Sandbox::Run() {
  const auto started = Clock::now();
  if (ran_.exchange(true)) return SetupError("this Sandbox has run already (once per Sandbox: make another)");
  if (std::string why = CheckExecutor(executor_); !why.empty()) return SetupError(why);
  if (executor_.wall_timeout <= std::chrono::milliseconds(0))
    return SetupError(fmt::format("a time limit of {} ms: it must be positive", executor_.wall_timeout.count()));
  if (executor_.memory_max_bytes > 0)
    return SetupError("Executor::memory_max_bytes is a session exec's own limit; a run's memory limit is its policy's "
                      "(PolicyBuilder::SetCgroupLimits)");
  auto killed_before_start = [] {
    VerdictInputs killed;
    killed.cancelled = true;
    Result result = MakeVerdict(std::move(killed));
    result.reason = "cancelled by the caller (Sandbox::Kill) before the program started; nothing ran";
    return result;
  };
  if (kill_requested_) return killed_before_start();  // Kill() came first: nothing is started
  // With SIGCHLD ignored the kernel reaps pid 1 itself, and how it ended is lost: a run would look unfinished until
  // its time limit, then time out. Refused rather than misjudged.
  if (struct sigaction child_action {}; ::sigaction(SIGCHLD, nullptr, &child_action) == 0 &&
      (child_action.sa_handler == SIG_IGN || (child_action.sa_flags & SA_NOCLDWAIT) != 0))
    return SetupError("SIGCHLD is ignored in this process (SIG_IGN or SA_NOCLDWAIT): the kernel would reap the "
                      "sandbox's pid 1 and lose how it ended; restore SIGCHLD's default action before running");
  // Last thing on every way out (declared first): the group's reaper, dismissed when the group was removed, is reaped
  // rather than left to outlive nsbox.
  Defer reap_reapers([] { WaitForDismissedReapers(); });

  // Kill requests and forwarded signals, before pid 1 exists.
  // The Sandbox's own, for its whole life (sandbox_async.cc): a Kill() before this point is already in it.
  if (kill_eventfd_ < 0) return SetupError(Status::Errno("eventfd(kill requests)", kill_eventfd_errno_).message());
  sigset_t forwarded, previous_mask;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&forwarded, sig);
  UniqueFd signal_fd;
  if (forward_signals_) {
    ::sigprocmask(SIG_BLOCK, &forwarded, &previous_mask);
    signal_fd.reset(::signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  Defer restore_mask([&] {
    if (forward_signals_) ::sigprocmask(SIG_SETMASK, &previous_mask, nullptr);
  });

  // Plan, channels, cgroup, clone, release (launcher.h).
  LaunchedRun run;
  if (Status s = LaunchRun(executor_, policy_, hooks_, started, &kill_requested_, &run); !s.ok())
    return run.cancelled_before_release ? killed_before_start() : SetupError(s.message());

  // Supervise: drain output, watch the clock, pid 1's reports, kill requests and signals.
  Supervisor supervisor(executor_.output_limit_bytes);
  // (Declared before `live`, whose writer thread reads them.)
  std::atomic<bool> signal_forwarded{false}, sandbox_gone{false}, ended_by_signal{false};
  std::optional<LiveOutput> live;
  // Writes to a reader that takes nothing give up on a Kill(), and, once nothing of the sandbox is left to write more,
  // on a signal to stop: one forwarded to the program that ended it (a program that survived it, to shut down in its
  // own time, keeps its output), or one that came after (pending: nsbox dies of it when Run() unblocks it).
  auto stop_copying = [this, forwarded, &signal_forwarded, &sandbox_gone, &ended_by_signal] {
    if (kill_requested_) return true;
    if (!sandbox_gone) return false;
    if (signal_forwarded && ended_by_signal) return true;
    sigset_t pending;
    if (forward_signals_ && ::sigpending(&pending) == 0)
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT})
        if (sigismember(&forwarded, sig) && sigismember(&pending, sig)) return true;
    return false;
  };
  if (live_stdout_fd_ >= 0 && live_stderr_fd_ >= 0) live.emplace(live_stdout_fd_, live_stderr_fd_, stop_copying);
  supervisor.AddOutput(&run.out, &run.err, live ? &*live : nullptr);
  supervisor.AddStdin(&run.stdin_feeder);
  VerdictInputs in;
  in.kind = VerdictInputs::Kind::kRun;
  in.wall_timeout = executor_.wall_timeout;
  in.heap_exhausted_text = executor_.heap_exhausted_text;
  bool gone = false;
  InitMessage gone_message{};
  // Ending the sandbox early (time-out, cancel): pid 1 is asked to kill and reap everything, so the CPU time spent
  // counts; if it has not exited soon after, its own death takes the pid namespace with it.
  Clock::time_point force_kill_at = Clock::time_point::max();
  auto end_sandbox = [&] {
    supervisor.MarkEnding();
    ::kill(run.child, KillSandboxSignal());
    force_kill_at = Clock::now() + std::chrono::milliseconds(250);
  };
  // A time limit beyond any run's life (a year; a larger one would overflow the clock's nanoseconds) is no deadline.
  const auto deadline = executor_.wall_timeout < std::chrono::hours(24 * 365) ? started + executor_.wall_timeout
                                                                                : Clock::time_point::max();
  supervisor.SetDeadline(deadline, [&] {
    if (in.timed_out) return;  // pid 1 reached its own deadline first, and ends the sandbox
    in.timed_out = true;
    end_sandbox();
  });
  supervisor.AddSource([] { return -1; }, 0, [&](short) {  // each round: the forced kill, when it is due
    if (Clock::now() < force_kill_at) return;
    force_kill_at = Clock::time_point::max();
    ::kill(run.child, SIGKILL);
    if (run.cgroup) (void)run.cgroup->KillAll();
  });
  supervisor.AddSeccompListener(&run.seccomp, policy_.seccomp() ? policy_.seccomp()->notify_errno : 0);
  auto on_message = [&](const InitMessage& msg) {
    if (msg.kind == InitMessage::kSetupError && !in.setup_failure) {
      in.setup_failure = SetupFailure{msg.text, msg.err, msg.at_execve != 0};
    } else if (msg.kind == InitMessage::kStarted) {
      in.program_started = true;
    } else if (msg.kind == InitMessage::kDeadline && !in.cancelled) {
      in.timed_out = true;  // pid 1 ended the sandbox at the deadline before nsbox did
    } else if (msg.kind == InitMessage::kExited) {
      in.program_status = msg.value;
    } else if (msg.kind == InitMessage::kGone && (!run.cgroup || msg.value == 1)) {
      // Nothing of the sandbox is left but pid 1, and no group of the sandbox's holds it (or there is none): the
      // verdict and the group's removal need not wait for pid 1's exit.
      gone_message = msg;
      gone = true;
    }
  };
  supervisor.AddControl(&run.control, on_message);
  supervisor.AddSource([&] { return kill_eventfd_; }, POLLIN, [&](short) {
    uint64_t requests;  // read, or the eventfd stays readable and every later round returns at once
    while (::read(kill_eventfd_, &requests, sizeof requests) == sizeof requests) {
    }
    // A Kill() after the program ended, or while a time-out ends the sandbox, leaves that verdict as it is.
    if (kill_requested_ && !in.cancelled && !in.timed_out && !in.program_status) {
      in.cancelled = true;
      end_sandbox();
    }
  });
  // The copy of the output failed (its reader is gone: EPIPE): the run ends, as a pipeline's writer does.
  bool output_failed = false;
  supervisor.AddSource([&] { return live && !output_failed ? live->failed_fd() : -1; }, POLLIN, [&](short revents) {
    if (!(revents & POLLIN) || output_failed) return;
    output_failed = true;
    if (!in.cancelled && !in.timed_out && !in.program_status) {
      in.cancelled = true;
      end_sandbox();
    }
  });
  supervisor.AddSource([&] { return signal_fd.get(); }, POLLIN, [&](short) {
    struct signalfd_siginfo info;
    while (signal_fd && ::read(signal_fd.get(), &info, sizeof info) == sizeof info) {
      ::kill(run.child, static_cast<int>(info.ssi_signo));
      signal_forwarded = true;
    }
  });
  struct rusage usage = {};
  int init_status = 0;
  supervisor.AddSource([&] { return run.pidfd.get(); }, POLLIN, [&](short revents) {
    if ((revents & POLLIN) && ::wait4(run.child, &init_status, __WALL, &usage) == run.child) run.reaped = true;
  });
  if (Status s = supervisor.Run([&] { return run.reaped || gone; }); !s.ok()) return SetupError(s.message());
  const auto ended = Clock::now();
  ended_by_signal = !in.program_status || WIFSIGNALED(*in.program_status);
  sandbox_gone = true;

  // Every process of the sandbox is gone now; collect the output still in the pipes.
  supervisor.DrainOutput(/*wait_rounds=*/100);
  run.control.Read(on_message);

  // The measurements, then the verdict.
  Result passed_on;
  supervisor.TakeOutput(&in, &passed_on.output_passed_on, &passed_on.output_write_errno);
  in.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(ended - started).count();
  if (run.reaped) {
    in.init_status = init_status;
    in.cpu_ms = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000 +
                (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000;
    in.peak_memory_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  } else if (gone) {  // the same figures, measured by pid 1 itself
    in.cpu_ms = gone_message.cpu_us / 1000;
    in.peak_memory_bytes = static_cast<uint64_t>(gone_message.max_rss_kb) * 1024;
  }
  run.seccomp.Report(&in);
  if (run.cgroup) {
    CgroupStats stats = run.cgroup->ReadStats();
    in.limits = run.cgroup->ReportFrom(*policy_.cgroup_limits(), stats);
    in.measurement_errors = stats.read_errors;
    if (stats.cpu_usage_us > 0) in.cpu_ms = static_cast<int64_t>(stats.cpu_usage_us / 1000);
    if (stats.peak_memory_bytes > 0) in.peak_memory_bytes = stats.peak_memory_bytes;
    // After kGone the group is empty: its reaper removes it while pid 1 still exits and the verdict is made; both are
    // reaped on the way out (~LaunchedRun, WaitForDismissedReapers).
    if (gone) {
      (void)run.cgroup->RemoveInBackground();
      run.cgroup.reset();
    }
  } else {
    in.limits = LimitsReport{};
    in.limits->backend = "none";
  }
  const bool ended_for_output = output_failed && in.cancelled && !kill_requested_;
  Result result = MakeVerdict(std::move(in));
  if (ended_for_output)
    result.reason = fmt::format("ended early: its output could not be passed on ({})",
                                ErrnoName(passed_on.output_write_errno));
  result.output_passed_on = passed_on.output_passed_on;
  result.output_write_errno = passed_on.output_write_errno;
  if (hooks_) hooks_->OnFinished(result);
  return result;
}

}  // namespace nsbox
