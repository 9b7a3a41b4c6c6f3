// Sandbox: the parent side: plan, clone into new namespaces, id maps, supervise (output, time, signals), verdict.
#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "sandbox/base/clone.h"
#include "sandbox/base/defer.h"
#include "sandbox/base/fd_passing.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/child.h"
#include "sandbox/launch.h"
#include "sandbox/init.h"
#include "sandbox/live_output.h"
#include "sandbox/mount_ns.h"
#include "sandbox/net.h"
#include "sandbox/ns_release.h"
#include "sandbox/output_buffer.h"
#include "sandbox/seccomp.h"
#include "sandbox/spec/mount_plan.h"
#include "sandbox/stdin_feeder.h"
#include "sandbox/user_ns.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;

// A run's sandbox has its own pid namespace: its CPU time is pid 1's rusage, and pid 1's death kills it whole.
CgroupConfig RunCgroupConfig() {
  CgroupConfig config;
  config.v1_cpu_accounting = false;
  config.v1_freezer = false;
  return config;
}

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
    inputs.resolv_conf = "# nsbox: this sandbox has no network\n";
  }
  auto mount_plan = BuildMountPlan(inputs);
  if (!mount_plan.ok()) return mount_plan.status().Wrap("planning the root filesystem");
  PrepareDeviceNodeTree();  // before any clone: the child binds its device nodes from it (mount_ns.h)
  return PrepareChildMounts(*mount_plan);
}

std::string CheckOutputLimit(uint64_t bytes) {
  if (bytes <= kMaxOutputLimitBytes) return "";
  return fmt::format("an output limit of {} bytes per stream is more than nsbox keeps in its memory ({} bytes, 64M): "
                     "write large outputs to files in the workspace directory (PolicyBuilder::SetWorkspaceDir) instead", bytes, kMaxOutputLimitBytes);
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
  if (executor_.argv.empty()) return SetupError("nothing to run: empty command");
  if (std::string why = CheckOutputLimit(executor_.output_limit_bytes); !why.empty()) return SetupError(why);
  // Last thing on every way out (declared first): the group's reaper, dismissed when the group was removed, is reaped
  // rather than left to outlive nsbox.
  Defer reap_reapers([] { WaitForDismissedReapers(); });
  // 0. The cgroup's reaper first, while this process is small and nothing else competes (cgroup.h says why).
  CgroupConfig cgroup_config = RunCgroupConfig();
  if (policy_.cgroup_limits()) {
    auto reaper = StartCgroupReaper();
    if (!reaper.ok()) return SetupError(reaper.status().Wrap("setting up the cgroup limits").message());
    cgroup_config.prestarted_reaper = std::move(*reaper);
  }

  // 1. Plan, in the parent, as plain data.
  auto mounts = PlanChildRoot(policy_);
  if (!mounts.ok()) return SetupError(mounts.status().message());
  ChildPlan plan;
  plan.mounts = std::move(*mounts);
  plan.hostname = policy_.hostname();
  plan.new_network = policy_.network() == NetworkMode::kNone;
  plan.uid = policy_.sandbox_uid();
  plan.gid = policy_.sandbox_gid();
  const bool privileged = ::geteuid() == 0;
  plan.may_setgroups = privileged;
  SetPlanProgram(plan, executor_);
  cap_t no_caps = cap_init();
  if (!no_caps) return SetupError(Status::Errno("cap_init").message());
  Defer free_caps([&] { cap_free(no_caps); });
  plan.no_caps = no_caps;

  // 2. Channels: output pipes, control (child -> nsbox), sync (nsbox -> child), kill requests, signals.
  auto out = MakePipe(), err = MakePipe(), control = MakePipe(), sync = MakePipe();
  for (auto* p : {&out, &err, &control, &sync})
    if (!p->ok()) return SetupError(p->status().Wrap("creating pipes").message());
  // The program's stdin is a pipe nsbox fills, never the source's own descriptor (stdin_feeder.h says why).
  StdinFeeder stdin_feeder;
  if (executor_.stdin_fd >= 0) {
    if (Status s = stdin_feeder.Start(executor_.stdin_fd); !s.ok()) return SetupError(s.Wrap("creating pipes").message());
    plan.stdin_fd = stdin_feeder.child_end();
  }
  plan.stdout_fd = out->write.get();
  plan.stderr_fd = err->write.get();
  plan.control_fd = control->write.get();
  plan.sync_fd = sync->read.get();
  // The payload hands its seccomp listener over this socket when the profile asks for denial reports.
  UniqueFd seccomp_parent, seccomp_child;
  const SeccompProgram* seccomp = policy_.seccomp().get();
  if (seccomp && seccomp->uses_notify) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
      return SetupError(Status::Errno("socketpair(AF_UNIX) for the seccomp listener").message());
    seccomp_parent.reset(pair[0]);
    seccomp_child.reset(pair[1]);
    SetNonBlocking(seccomp_parent.get());
  }
  plan.seccomp = seccomp;
  auto guard = Pid1GuardProgram();
  if (!guard.ok()) return SetupError(guard.status().message());
  plan.pid1_guard = *guard;
  // pid 1's own deadline, a little after nsbox's (which ends the sandbox at the time-out and reports it). Beyond a
  // year the steady clock's nanoseconds could overflow: no deadline of pid 1's then.
  if (executor_.wall_timeout < std::chrono::hours(24 * 365)) {
    constexpr auto kPid1Grace = std::chrono::milliseconds(500);
    plan.wall_deadline_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>((started + executor_.wall_timeout + kPid1Grace)
                                                                 .time_since_epoch()).count();
  }
  plan.seccomp_socket = seccomp_child.get();
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

  // 3. The sandbox's own cgroup; a limit that cannot be set up stops the run. v2 places the child with
  //    clone3(CLONE_INTO_CGROUP), so its group is made first. A v1 child moves itself in: its group is made while the
  //    child builds its root, and handed over on a socket before the payload is forked.
  std::unique_ptr<Cgroup> cgroup;
  UniqueFd cgroup_socket, cgroup_socket_child;
  const auto& limits = policy_.cgroup_limits();
  if (limits) {
    if (PathExists(cgroup_config.cgroup_root + "/cgroup.controllers")) {  // a cgroup2 mount
      auto made = CreateSandboxCgroup(*limits, cgroup_config);
      if (!made.ok()) return SetupError(made.status().Wrap("setting up the cgroup limits").message());
      cgroup = std::move(*made);
    } else {
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
        return SetupError(Status::Errno("socketpair(AF_UNIX) for the cgroup descriptors").message());
      cgroup_socket.reset(pair[0]);
      cgroup_socket_child.reset(pair[1]);
      plan.cgroup_join_socket = cgroup_socket_child.get();
    }
  }

  // 4. Clone into fresh user, pid, mount, network, ipc and uts namespaces (the cgroup namespace follows in the
  //    child, once it sits in its own cgroup).
  //    pid 1 is forked (a copy of nsbox's memory, not a share of it); a v2 child is born in its group.
  uint64_t flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
  if (plan.new_network) flags |= CLONE_NEWNET;
  int raw_pidfd = -1;
  pid_t child = CloneWithPidfd(flags, &raw_pidfd, cgroup ? cgroup->clone_into_fd() : -1);
  if (child < 0) {
    int err = errno;
    return SetupError(Status::Errno("clone3(CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS|...)", err).message() +
                      NamespaceFailureHint(err));
  }
  if (child == 0) ChildMain(plan);  // never returns
  UniqueFd pidfd(raw_pidfd);
  // Declared before kill_child, so that it closes after pid 1 is reaped (ns_release.h).
  UniqueFd mount_ns_holder;
  // From here on the child exists: every path out must kill and reap it. After kGone (pid 1 alone, and out of the
  // sandbox's groups) that waits until the verdict is made and the groups are removed: pid 1's exit (about 0.1 ms,
  // its mount namespace left to mount_ns_holder) runs meanwhile.
  bool reaped = false, gone = false;
  Defer kill_child([&] {
    if (!reaped) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, __WALL);
    }
  });
  out->write.reset();
  err->write.reset();
  control->write.reset();
  sync->read.reset();
  stdin_feeder.ReleaseChildEnd();
  seccomp_child.reset();
  cgroup_socket_child.reset();

  // 5. Id maps, front-end services, release the child; then (v1) its cgroup, made while it builds its root.
  if (Status s = WriteIdMaps(child, policy_, privileged); !s.ok())
    return SetupError(s.Wrap("writing the user namespace id maps").message());
  if (hooks_) {
    if (Status s = hooks_->OnChildCreated(child); !s.ok()) return SetupError(s.message());
  }
  UniqueFd mount_ns = OpenMountNamespace(child);  // while pid 1 is still dumpable: it changes its fsuid once released
  const char go = 'G';
  if (::write(sync->write.get(), &go, 1) != 1) return SetupError(Status::Errno("write(sync pipe)").message());
  sync->write.reset();
  if (cgroup_socket) {
    auto made = CreateSandboxCgroup(*limits, cgroup_config);
    if (!made.ok()) return SetupError(made.status().Wrap("setting up the cgroup limits").message());
    cgroup = std::move(*made);
    // No descriptors (a backend that cannot be joined from inside): nsbox places the child itself, and says so with 0.
    CgroupSelfJoin join = cgroup->self_join();
    if (join.count == 0) {
      if (Status s = cgroup->AddProcess(child); !s.ok()) return SetupError(s.Wrap("joining the sandbox's cgroup").message());
    }
    // Then the way out again, for pid 1's end (kGone).
    CgroupSelfJoin leave = join.count > 0 ? cgroup->leave_join() : CgroupSelfJoin{};
    bool sent = true;
    for (const CgroupSelfJoin* fds : {&join, &leave}) {
      const char header[2] = {static_cast<char>(fds->count), static_cast<char>(fds->memory_index + 1)};
      sent = sent && ::send(cgroup_socket.get(), header, sizeof header, MSG_NOSIGNAL) == sizeof header;
      for (int i = 0; sent && i < fds->count; ++i) sent = SendFd(cgroup_socket.get(), fds->fds[i]) == 0;
    }
    // EPIPE: the child failed while its group was being made, and has said why on the control pipe; the loop below
    // reports that step, not this one.
    if (!sent && errno != EPIPE && errno != ECONNRESET)
      return SetupError(Status::Errno("sendmsg(cgroup descriptors to the sandbox)").message());
    cgroup_socket.reset();
  }
  // Then (pid 1 waits for its group, not for these) the namespace's release and the loopback: pid 1 finds lo up unless
  // it got there first.
  mount_ns_holder = HoldForAsyncRelease(std::move(mount_ns));
  if (plan.new_network && privileged) {  // setns needs CAP_SYS_ADMIN here: rootless nsbox leaves it to the child
    if (auto up = BringUpLoopbackFromOutside(pidfd.get()); !up.ok())
      return SetupError(up.status().Wrap("bringing the sandbox's loopback up").message());
  }

  // 6. Supervise: drain output, watch the clock, the child, kill requests and signals.
  OutputBuffer stdout_buf(executor_.output_limit_bytes), stderr_buf(executor_.output_limit_bytes);
  SetNonBlocking(out->read.get());
  SetNonBlocking(err->read.get());
  const auto deadline = started + executor_.wall_timeout;
  bool timed_out = false, cancelled = false, child_exited = false;
  InitMessage setup_error{}, exit_message{}, gone_message{};
  bool have_setup_error = false, have_exit = false, program_started = false;
  std::string control_bytes;
  // Not zeroed: on this kind of VM every page nsbox touches first costs a fault of about 12 us, and a read fills only
  // what it returns (a quiet program's output touches one page of the 16).
  constexpr size_t kReadChunk = 1 << 16;
  std::unique_ptr<char[]> buffer(new char[kReadChunk]);

  std::optional<LiveOutput> live;
  if (live_stdout_fd_ >= 0 && live_stderr_fd_ >= 0) live.emplace(live_stdout_fd_, live_stderr_fd_);
  auto drain = [&](UniqueFd& fd, OutputBuffer& sink) {
    for (;;) {
      ssize_t n = ::read(fd.get(), buffer.get(), kReadChunk);
      if (n > 0) {
        std::string_view chunk(buffer.get(), static_cast<size_t>(n));
        if (live) live->Add(&sink == &stdout_buf ? 1 : 2, chunk.substr(0, std::min<uint64_t>(chunk.size(), sink.HeadRoom())));
        sink.Append(chunk);
        continue;
      }
      if (n == 0) fd.reset();
      return;  // EAGAIN or EOF
    }
  };
  std::unique_ptr<SeccompNotifier> notifier;
  auto receive_listener = [&] {
    if (!seccomp_parent) return;
    int fd = ReceiveFd(seccomp_parent.get());
    if (fd < 0 && errno == EAGAIN) return;
    if (fd >= 0) {
      notifier = std::make_unique<SeccompNotifier>(UniqueFd(fd), seccomp->notify_errno);  // answered in this loop
    }
    seccomp_parent.reset();  // one listener per sandbox; end-of-file means the payload never got that far
  };

  auto read_control = [&] {
    while (control->read) {
      ssize_t n = ::read(control->read.get(), buffer.get(), kReadChunk);
      if (n > 0) {
        control_bytes.append(buffer.get(), static_cast<size_t>(n));
        continue;
      }
      // End of file: stop polling it, or poll() would report the hang-up again and again.
      if (n == 0) control->read.reset();
      if (n == 0 || errno != EINTR) break;
    }
    while (control_bytes.size() >= sizeof(InitMessage)) {
      InitMessage msg;
      memcpy(&msg, control_bytes.data(), sizeof msg);
      control_bytes.erase(0, sizeof msg);
      if (msg.kind == InitMessage::kSetupError && !have_setup_error) {
        setup_error = msg;
        have_setup_error = true;
      } else if (msg.kind == InitMessage::kStarted) {
        program_started = true;
      } else if (msg.kind == InitMessage::kDeadline && !cancelled) {
        timed_out = true;  // pid 1 ended the sandbox at the deadline before nsbox did
      } else if (msg.kind == InitMessage::kExited) {
        exit_message = msg;
        have_exit = true;
      } else if (msg.kind == InitMessage::kGone && (!cgroup || msg.value == 1)) {
        // Nothing of the sandbox is left but pid 1, and no group of the sandbox's holds it (or there is none): the
        // verdict and the group's removal need not wait for pid 1's exit.
        gone_message = msg;
        gone = true;
      }
    }
  };
  SetNonBlocking(control->read.get());

  struct rusage usage = {};
  int init_status = 0;
  // Ending the sandbox early (time-out, cancel): pid 1 is asked to kill and reap everything, so the CPU time spent
  // counts; if it has not exited soon after, its own death takes the pid namespace with it.
  Clock::time_point force_kill_at = Clock::time_point::max();
  auto end_sandbox = [&] {
    ::kill(child, KillSandboxSignal());
    force_kill_at = Clock::now() + std::chrono::milliseconds(250);
  };
  while (!child_exited && !gone) {
    auto now = Clock::now();
    if (!timed_out && !cancelled && now >= deadline) {
      timed_out = true;
      end_sandbox();
    }
    if (now >= force_kill_at) {
      force_kill_at = Clock::time_point::max();
      ::kill(child, SIGKILL);
      if (cgroup) (void)cgroup->KillAll();
    }
    int wait_ms = timed_out || cancelled ? 50 :
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    struct pollfd fds[10];
    int nfds = 0;
    auto add = [&](int fd) {
      if (fd >= 0) fds[nfds++] = {fd, POLLIN, 0};
    };
    const int listener = notifier ? notifier->listener_fd() : -1;
    add(listener);
    add(pidfd.get());
    add(out->read.get());
    add(err->read.get());
    add(control->read.get());
    add(kill_eventfd_);
    add(signal_fd.get());
    add(seccomp_parent.get());
    const int feeder_index = nfds;
    nfds += stdin_feeder.AddPollFds(fds + nfds);
    int rc = ::poll(fds, static_cast<nfds_t>(nfds), wait_ms);
    if (rc < 0 && errno != EINTR) return SetupError(Status::Errno("poll").message());
    if (listener >= 0 && rc > 0) notifier->OnReady(fds[0].revents);
    receive_listener();
    if (rc > 0) stdin_feeder.OnPoll(fds + feeder_index);
    if (out->read) drain(out->read, stdout_buf);
    if (err->read) drain(err->read, stderr_buf);
    read_control();
    if (kill_requested_ && !cancelled) {
      cancelled = true;
      end_sandbox();
    }
    if (signal_fd) {
      struct signalfd_siginfo info;
      while (::read(signal_fd.get(), &info, sizeof info) == sizeof info) ::kill(child, static_cast<int>(info.ssi_signo));
    }
    for (int i = 0; i < nfds; ++i) {
      if (fds[i].fd == pidfd.get() && (fds[i].revents & POLLIN)) {
        if (::wait4(child, &init_status, __WALL, &usage) == child) {
          reaped = true;
          child_exited = true;
        }
      }
    }
  }
  const auto ended = Clock::now();

  // 7. Every process of the sandbox is gone now; collect the output still in the pipes.
  for (int round = 0; round < 100 && (out->read || err->read); ++round) {
    struct pollfd fds[2];
    int nfds = 0;
    if (out->read) fds[nfds++] = {out->read.get(), POLLIN, 0};
    if (err->read) fds[nfds++] = {err->read.get(), POLLIN, 0};
    ::poll(fds, static_cast<nfds_t>(nfds), 20);
    if (out->read) drain(out->read, stdout_buf);
    if (err->read) drain(err->read, stderr_buf);
  }
  read_control();

  // 8. The verdict.
  Result result;
  result.stdout_data = stdout_buf.Contents();
  result.stderr_data = stderr_buf.Contents();
  if (live) {  // the rest of what is kept, after the head passed on while the program ran
    live->Add(1, std::string_view(result.stdout_data).substr(stdout_buf.head_size()));
    live->Add(2, std::string_view(result.stderr_data).substr(stderr_buf.head_size()));
    result.output_passed_on = true;
    result.output_write_errno = live->Finish();
  }
  result.stdout_bytes = stdout_buf.total_bytes();
  result.stderr_bytes = stderr_buf.total_bytes();
  result.stdout_truncated = stdout_buf.truncated();
  result.stderr_truncated = stderr_buf.truncated();
  result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(ended - started).count();
  if (reaped) {
    result.cpu_ms = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000 +
                    (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000;
    result.peak_memory_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  } else if (gone) {  // the same figures, measured by pid 1 itself
    result.cpu_ms = gone_message.cpu_us / 1000;
    result.peak_memory_bytes = static_cast<uint64_t>(gone_message.max_rss_kb) * 1024;
  }

  if (notifier) {
    notifier->Stop();
    result.denied_syscalls = notifier->Denied();
    result.denied_syscalls_capped = notifier->Capped();
  }
  CgroupStats stats;
  if (cgroup) {
    stats = cgroup->ReadStats();
    result.limits = cgroup->ReportFrom(*policy_.cgroup_limits(), stats);
    result.measurement_errors = stats.read_errors;
    if (stats.cpu_usage_us > 0) result.cpu_ms = static_cast<int64_t>(stats.cpu_usage_us / 1000);
    if (stats.peak_memory_bytes > 0) result.peak_memory_bytes = stats.peak_memory_bytes;
    // After kGone the group is empty: its reaper removes it while pid 1 still exits and the verdict is made; both are
    // reaped on the way out (kill_child, WaitForDismissedReapers).
    if (gone) {
      (void)cgroup->RemoveInBackground();
      cgroup.reset();
    }
  } else {
    LimitsReport none;
    none.backend = "none";
    result.limits = none;
  }

  if (have_setup_error) {
    result.status = RunStatus::kSetupError;
    result.reason = fmt::format("sandbox setup failed at {}: {} ({})", setup_error.text, strerror(setup_error.err),
                                ErrnoName(setup_error.err));
  } else if (timed_out || cancelled) {
    result.status = cancelled ? RunStatus::kKilled : RunStatus::kTimeout;
    result.signal = SIGKILL;
    result.reason = cancelled ? "cancelled by the caller (Sandbox::Kill); every process of the sandbox was killed" :
        fmt::format("wall-clock time limit of {} ms exceeded; every process of the sandbox was killed",
                    executor_.wall_timeout.count());
  } else if (have_exit) {
    int ws = exit_message.value;
    if (WIFEXITED(ws)) {
      result.exit_code = WEXITSTATUS(ws);
      result.status = result.exit_code == 0 ? RunStatus::kOk : RunStatus::kExit;
    } else if (WIFSIGNALED(ws)) {
      result.signal = WTERMSIG(ws);
      result.status = result.signal == SIGSYS ? RunStatus::kViolation : RunStatus::kSignal;
    }
    result.reason = result.status == RunStatus::kViolation ? "killed by the seccomp policy (SIGSYS)" : ExitReason(ws);
    if (result.signal == SIGKILL && stats.oom_kills > 0) {
      result.status = RunStatus::kOom;
      result.reason = fmt::format("killed by the OOM killer: the memory limit of {} bytes was reached",
                                  policy_.cgroup_limits()->memory_max_bytes);
    }
  } else if (reaped && WIFSIGNALED(init_status) && WTERMSIG(init_status) == SIGKILL && stats.oom_kills > 0) {
    // The OOM killer chose pid 1 (a v2 sandbox's, which is in the group: when the program's processes are all
    // smaller, a tmpfs file filling the group), and its death ended every process: the program's verdict.
    result.status = RunStatus::kOom;
    result.signal = SIGKILL;
    result.reason = fmt::format("killed by the OOM killer: the memory limit of {} bytes was reached (it ended the "
                                "sandbox's pid 1, and with it every process)",
                                policy_.cgroup_limits()->memory_max_bytes);
  } else if (program_started) {
    // The program ran: its end came with pid 1's, whose death killed every process of the sandbox.
    result.status = RunStatus::kSignal;
    result.signal = SIGKILL;
    result.reason = fmt::format("killed with every process of the sandbox: its pid 1 ended while the program ran ({})",
                                ExitReason(init_status));
  } else {
    result.status = RunStatus::kSetupError;
    result.reason = fmt::format("the sandbox's pid 1 ended before the program started ({})", ExitReason(init_status));
  }
  NoteLimitsHit(&result);
  if (hooks_) hooks_->OnFinished(result);
  return result;
}

}  // namespace nsbox
