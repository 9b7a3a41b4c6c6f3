// The launcher: plan -> channels -> clone -> release, for a run's pid 1 and a session's, and the plan of a session
// exec's payload. Every sandbox's pid 1 is started at one place, StartPid1.
#pragma once

#include <sys/capability.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/child.h"
#include "sandbox/executor.h"
#include "sandbox/launch.h"
#include "sandbox/policy.h"
#include "sandbox/sandbox.h"
#include "sandbox/stdin_feeder.h"
#include "sandbox/supervisor.h"

namespace nsbox {

// An empty capability set for the child's plan (cap_init before clone: the child does not allocate).
class EmptyCaps {
 public:
  EmptyCaps() : caps_(cap_init()) {}
  ~EmptyCaps() {
    if (caps_) cap_free(caps_);
  }
  EmptyCaps(const EmptyCaps&) = delete;
  EmptyCaps& operator=(const EmptyCaps&) = delete;
  cap_t get() const { return caps_; }

 private:
  cap_t caps_;
};

// The part of pid 1's plan every sandbox shares: its root (PlanChildRoot), hostname, network, the sandbox user.
Status PlanPid1(const Policy& policy, const EmptyCaps& no_caps, ChildPlan* plan);
// The payload's credentials and filters (a session exec's): the sandbox user, seccomp, pid 1's guard, no caps.
Status PlanPayloadCredentials(const Policy& policy, const EmptyCaps& no_caps, ChildPlan* plan);
// CLONE_NEWUSER|NEWPID|NEWNS|NEWIPC|NEWUTS, and NEWNET for a sandbox with a network of its own.
uint64_t SandboxCloneFlags(const ChildPlan& plan);

// Starts a sandbox's pid 1: the one place a pid 1 is cloned, a fork-like clone3 (base/clone.h); cgroup_fd >= 0: born
// in that cgroup (v2). Returns its pid and *pidfd, or a Status naming the clone and why.
StatusOr<pid_t> StartPid1(const ChildPlan& plan, int cgroup_fd, int* pidfd);
// Writes the id maps, runs the front end's hook, then before_release (may be null: what must be done while pid 1
// is still dumpable), then releases pid 1 with one byte on its sync pipe.
Status ReleasePid1(pid_t child, const Policy& policy, SandboxHooks* hooks, UniqueFd sync_write,
                   const std::function<Status()>& before_release);

// A run's sandbox from its launch to its reaping. Not movable: the child was given these channels' numbers.
// Destroyed in this order: pid 1 killed and reaped if it was not, its mount namespace let go (ns_release.h), its
// cgroup removed.
struct LaunchedRun {
  ChildPlan plan;
  EmptyCaps no_caps;
  std::unique_ptr<Cgroup> cgroup;
  UniqueFd pidfd;
  UniqueFd mount_ns_holder;
  pid_t child = -1;
  bool reaped = false;
  bool cancelled_before_release = false;
  UniqueFd out, err;
  ControlChannel control;
  SeccompListener seccomp;
  StdinFeeder stdin_feeder;
  LaunchedRun() = default;
  LaunchedRun(const LaunchedRun&) = delete;
  LaunchedRun& operator=(const LaunchedRun&) = delete;
  ~LaunchedRun();
};

// Plans, makes the channels and the cgroup (in its phases: v2 before the clone, v1 while the child builds its root,
// handed over on a socket), clones pid 1 and releases it. started: the run's start (pid 1's own deadline follows it).
// An error is a setup error: nothing of the program ran. When `cancelled` is set by the time pid 1 would be released
// (a Kill() while the sandbox was set up), pid 1 is not released and run->cancelled_before_release says so.
Status LaunchRun(const Executor& executor, const Policy& policy, SandboxHooks* hooks,
                 std::chrono::steady_clock::time_point started, const std::atomic<bool>* cancelled,
                 LaunchedRun* run);

}  // namespace nsbox
