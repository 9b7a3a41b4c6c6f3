// The launcher: a sandbox's pid 1 planned, given its channels and cgroup, cloned and released.
#include "sandbox/launcher.h"

#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/base/clone.h"
#include "sandbox/base/fd_passing.h"
#include "sandbox/base/fs.h"
#include "sandbox/init.h"
#include "sandbox/net.h"
#include "sandbox/ns_release.h"
#include "sandbox/seccomp.h"
#include "sandbox/user_ns.h"

namespace nsbox {
namespace {

// A run's sandbox has its own pid namespace: its CPU time is pid 1's rusage, and pid 1's death kills it whole.
CgroupConfig RunCgroupConfig() {
  CgroupConfig config;
  config.v1_cpu_accounting = false;
  config.v1_freezer = false;
  return config;
}

StatusOr<UniqueFd> SocketPair(int type, UniqueFd* theirs, const char* what) {
  int pair[2];
  if (::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, pair) != 0)
    return Status::Errno(std::string("socketpair(AF_UNIX) for the ") + what);
  theirs->reset(pair[1]);
  return UniqueFd(pair[0]);
}

// v1: the group is made while the child builds its root, and its descriptors are sent to the child, which moves
// itself in (and, at its end, out again).
Status HandOverV1Cgroup(LaunchedRun* run, const CgroupLimits& limits, CgroupConfig config, UniqueFd cgroup_socket) {
  auto made = CreateSandboxCgroup(limits, std::move(config));
  if (!made.ok()) return made.status().Wrap("setting up the cgroup limits");
  run->cgroup = std::move(*made);
  // No descriptors (a backend that cannot be joined from inside): nsbox places the child itself, and says so with 0.
  CgroupSelfJoin join = run->cgroup->self_join();
  if (join.count == 0) NSBOX_RETURN_IF_ERROR(run->cgroup->AddProcess(run->child).Wrap("joining the sandbox's cgroup"));
  // Then the way out again, for pid 1's end (kGone).
  CgroupSelfJoin leave = join.count > 0 ? run->cgroup->leave_join() : CgroupSelfJoin{};
  bool sent = true;
  for (const CgroupSelfJoin* fds : {&join, &leave}) {
    const char header[2] = {static_cast<char>(fds->count), static_cast<char>(fds->memory_index + 1)};
    sent = sent && ::send(cgroup_socket.get(), header, sizeof header, MSG_NOSIGNAL) == sizeof header;
    for (int i = 0; sent && i < fds->count; ++i) sent = SendFd(cgroup_socket.get(), fds->fds[i]) == 0;
  }
  // EPIPE: the child failed while its group was being made, and has said why on the control pipe; the supervisor
  // reports that step, not this one.
  if (!sent && errno != EPIPE && errno != ECONNRESET)
    return Status::Errno("sendmsg(cgroup descriptors to the sandbox)");
  return OkStatus();
}

}  // namespace

Status PlanPid1(const Policy& policy, const EmptyCaps& no_caps, ChildPlan* plan) {
  auto mounts = PlanChildRoot(policy);
  if (!mounts.ok()) return mounts.status();
  plan->mounts = std::move(*mounts);
  plan->hostname = policy.hostname();
  plan->new_network = policy.network() == NetworkMode::kNone;
  plan->uid = policy.sandbox_uid();
  plan->gid = policy.sandbox_gid();
  plan->namespace_owner = NamespaceOwnerFor(policy);
  plan->may_setgroups = ::geteuid() == 0;
  if (!no_caps.get()) return Status::Errno("cap_init");
  plan->no_caps = no_caps.get();
  return OkStatus();
}

Status PlanPayloadCredentials(const Policy& policy, const EmptyCaps& no_caps, ChildPlan* plan) {
  plan->uid = policy.sandbox_uid();
  plan->gid = policy.sandbox_gid();
  plan->may_setgroups = ::geteuid() == 0;
  plan->seccomp = policy.seccomp().get();
  auto guard = GuardProgram();
  if (!guard.ok()) return guard.status();
  plan->guard = *guard;
  if (!no_caps.get()) return Status::Errno("cap_init");
  plan->no_caps = no_caps.get();
  return OkStatus();
}

uint64_t SandboxCloneFlags(const ChildPlan& plan) {
  uint64_t flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
  if (plan.new_network) flags |= CLONE_NEWNET;
  return flags;
}

StatusOr<pid_t> StartPid1(const ChildPlan& plan, int cgroup_fd, int* pidfd) {
  // pid 1 is born with KillSandboxSignal() blocked: the init of a pid namespace drops a signal it has no handler for,
  // so one sent while it still sets up (a Kill() at the start) would be lost. Blocked, it stays pending until RunInit
  // waits for it, and pid 1 starts no payload while it is pending (child.cc).
  sigset_t kill_signal, previous;
  sigemptyset(&kill_signal);
  sigaddset(&kill_signal, KillSandboxSignal());
  // The namespace's owner, the sandbox's host uid where nsbox may make it so (user_ns.h), clones it. Not where pid 1
  // moves itself into cgroup v1 groups (with the owner's euid) on a kernel that checks the move against the mover.
  const bool joins_v1 = plan.cgroup_join.count > 0 || plan.cgroup_join_socket >= 0 || plan.memory_leave_fd >= 0;
  NamespaceOwnerSwitch owner;
  NSBOX_RETURN_IF_ERROR(
      owner.Enter(joins_v1 && !KernelChecksOpenerForCgroupMoves() ? std::nullopt : plan.namespace_owner));
  ::pthread_sigmask(SIG_BLOCK, &kill_signal, &previous);
  const pid_t child = CloneWithPidfd(SandboxCloneFlags(plan), pidfd, cgroup_fd);
  if (child == 0) ChildMain(plan);  // never returns
  const int clone_errno = errno;
  owner.Leave();
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (child < 0) {
    int err = clone_errno;
    return Status::Error(Status::Errno("clone3(CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS|...)", err).message() +
                         NamespaceFailureHint(err));
  }
  return child;
}

Status ReleasePid1(pid_t child, const Policy& policy, SandboxHooks* hooks, UniqueFd sync_write,
                   const std::function<Status()>& before_release) {
  NSBOX_RETURN_IF_ERROR(WriteIdMaps(child, policy, ::geteuid() == 0).Wrap("writing the user namespace id maps"));
  if (hooks) NSBOX_RETURN_IF_ERROR(hooks->OnChildCreated(child));
  if (before_release) NSBOX_RETURN_IF_ERROR(before_release());
  const char go = 'G';
  if (::write(sync_write.get(), &go, 1) != 1) return Status::Errno("write(sync pipe)");
  return OkStatus();
}

LaunchedRun::~LaunchedRun() {
  if (child > 0 && !reaped) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, __WALL);
  }
}

Status LaunchRun(const Executor& executor, const Policy& policy, SandboxHooks* hooks,
                 std::chrono::steady_clock::time_point started, const std::atomic<bool>* cancelled,
                 LaunchedRun* run) {
  // 0. The cgroup's reaper first, while this process is small and nothing else competes (cgroup.h says why).
  CgroupConfig cgroup_config = RunCgroupConfig();
  if (policy.cgroup_limits()) {
    auto reaper = StartCgroupReaper();
    if (!reaper.ok()) return reaper.status().Wrap("setting up the cgroup limits");
    cgroup_config.prestarted_reaper = std::move(*reaper);
  }

  // 1. Plan, in the parent, as plain data.
  ChildPlan& plan = run->plan;
  NSBOX_RETURN_IF_ERROR(PlanPid1(policy, run->no_caps, &plan));
  SetPlanProgram(plan, executor);

  // 2. Channels: output pipes, control (child -> nsbox), sync (nsbox -> child), the seccomp listener's socket.
  auto out = MakePipe(), err = MakePipe(), control = MakePipe(), sync = MakePipe();
  for (auto* p : {&out, &err, &control, &sync})
    if (!p->ok()) return p->status().Wrap("creating pipes");
  // The program's stdin is a pipe nsbox fills, never the source's own descriptor (stdin_feeder.h says why).
  if (executor.stdin_fd >= 0) {
    // A run's processes all end with it: a sealed stdin file goes to the program as it is.
    NSBOX_RETURN_IF_ERROR(run->stdin_feeder.Start(executor.stdin_fd, /*pass_sealed_file=*/true).Wrap("creating pipes"));
    plan.stdin_fd = run->stdin_feeder.child_end();
  }
  plan.stdout_fd = out->write.get();
  plan.stderr_fd = err->write.get();
  for (int fd : {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd})
    NSBOX_RETURN_IF_ERROR(LetSandboxReopen(fd).Wrap("creating pipes"));
  plan.control_fd = control->write.get();
  plan.sync_fd = sync->read.get();
  UniqueFd seccomp_child;
  const SeccompProgram* seccomp = policy.seccomp().get();
  if (seccomp && seccomp->uses_notify) {
    auto ours = SocketPair(SOCK_SEQPACKET, &seccomp_child, "seccomp listener");
    if (!ours.ok()) return ours.status();
    run->seccomp.socket = std::move(*ours);
    SetNonBlocking(run->seccomp.socket.get());
  }
  plan.seccomp = seccomp;
  plan.seccomp_socket = seccomp_child.get();
  auto guard = GuardProgram();
  if (!guard.ok()) return guard.status();
  plan.guard = *guard;
  // pid 1's own deadline, a little after nsbox's (which ends the sandbox at the time-out and reports it). Beyond a
  // year the steady clock's nanoseconds could overflow: no deadline of pid 1's then.
  if (executor.wall_timeout < std::chrono::hours(24 * 365)) {
    constexpr auto kPid1Grace = std::chrono::milliseconds(500);
    plan.wall_deadline_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                (started + executor.wall_timeout + kPid1Grace).time_since_epoch()).count();
  }

  // 3. The sandbox's own cgroup; a limit that cannot be set up stops the run. v2 places the child with
  //    clone3(CLONE_INTO_CGROUP), so its group is made first. A v1 child moves itself in: its group is made while the
  //    child builds its root, and handed over on a socket before the payload is forked.
  UniqueFd cgroup_socket, cgroup_socket_child;
  const auto& limits = policy.cgroup_limits();
  if (limits) {
    if (PathExists(cgroup_config.cgroup_root + "/cgroup.controllers")) {  // a cgroup2 mount
      auto made = CreateSandboxCgroup(*limits, cgroup_config);
      if (!made.ok()) return made.status().Wrap("setting up the cgroup limits");
      run->cgroup = std::move(*made);
    } else {
      auto ours = SocketPair(SOCK_SEQPACKET, &cgroup_socket_child, "cgroup descriptors");
      if (!ours.ok()) return ours.status();
      cgroup_socket = std::move(*ours);
      plan.cgroup_join_socket = cgroup_socket_child.get();
    }
  }

  // 4. Clone into fresh user, pid, mount, network, ipc and uts namespaces (the cgroup namespace follows in the
  //    child, once it sits in its own cgroup). pid 1 is forked (a copy of nsbox's memory, not a share of it); a v2
  //    child is born in its group.
  int raw_pidfd = -1;
  auto child = StartPid1(plan, run->cgroup ? run->cgroup->clone_into_fd() : -1, &raw_pidfd);
  if (!child.ok()) return child.status();
  run->child = *child;
  run->pidfd.reset(raw_pidfd);
  // From here on the child exists: ~LaunchedRun kills and reaps it on every way out.
  run->out = std::move(out->read);
  run->err = std::move(err->read);
  run->control = ControlChannel(std::move(control->read));
  out->write.reset();
  err->write.reset();
  control->write.reset();
  sync->read.reset();
  run->stdin_feeder.ReleaseChildEnd();
  seccomp_child.reset();
  cgroup_socket_child.reset();

  // 5. Id maps, front-end services, release the child; then (v1) its cgroup, made while it builds its root.
  UniqueFd mount_ns;
  NSBOX_RETURN_IF_ERROR(ReleasePid1(run->child, policy, hooks, std::move(sync->write), [&] {
    // Now: pid 1 changes its fsuid once released, and is then no longer dumpable, which a container's root without
    // CAP_SYS_PTRACE (the owner of pid 1's namespace, user_ns.h) needs it to be.
    mount_ns = OpenMountNamespace(run->child);
    if (cancelled && cancelled->load()) {  // killed while set up: pid 1 is not released (~LaunchedRun ends it)
      run->cancelled_before_release = true;
      return Status::Error("cancelled before the program started");
    }
    return OkStatus();
  }));
  if (cgroup_socket)
    NSBOX_RETURN_IF_ERROR(HandOverV1Cgroup(run, *limits, cgroup_config, std::move(cgroup_socket)));
  // Then (pid 1 waits for its group, not for these) the namespace's release and the loopback: pid 1 finds lo up unless
  // it got there first.
  run->mount_ns_holder = HoldForAsyncRelease(std::move(mount_ns));
  if (plan.new_network && ::geteuid() == 0) {  // setns needs CAP_SYS_ADMIN here: rootless nsbox leaves it to the child
    if (auto up = BringUpLoopbackFromOutside(run->pidfd.get()); !up.ok())
      return up.status().Wrap("bringing the sandbox's loopback up");
  }
  return OkStatus();
}

}  // namespace nsbox
