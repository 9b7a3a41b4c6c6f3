// Sandbox: runs one Executor under one Policy and returns its Result; Kill() may be called from another thread.
#pragma once

#include <atomic>
#include <functional>

#include <sys/types.h>

#include "sandbox/child.h"
#include "sandbox/executor.h"
#include "sandbox/policy.h"
#include "sandbox/result.h"

namespace nsbox {

// The sandbox's root as the child applies it (paths under /newroot and /oldroot), planned from the policy: the
// built-in host view (read once per process) or a prepared root, with the generated /etc. Shared by run and sessions.
StatusOr<std::vector<ChildMount>> PlanChildRoot(const Policy& policy);

// Extension points for front ends that run host-side services for one sandbox (the egress proxy).
class SandboxHooks {
 public:
  virtual ~SandboxHooks() = default;
  // After clone and the id maps, before the child goes on: its namespaces exist. An error is a setup error.
  virtual Status OnChildCreated(pid_t child) {
    (void)child;
    return OkStatus();
  }
  // After every process of the sandbox is gone (but its pid 1, which may still be exiting): adds what the service saw
  // to the result.
  virtual void OnFinished(Result& result) { (void)result; }
};

class Sandbox {
 public:
  Sandbox(Executor executor, Policy policy);
  // Runs to completion. Never throws; every failure is a Result with status kSetupError.
  Result Run();
  // Ends the sandbox early (status timeout, reason "cancelled"). Safe from any thread or signal handler.
  void Kill();
  // When set, SIGINT/SIGTERM/SIGHUP sent to nsbox are passed on to the program instead of killing nsbox.
  void ForwardSignals(bool forward) { forward_signals_ = forward; }
  // Not owned; must outlive Run().
  void SetHooks(SandboxHooks* hooks) { hooks_ = hooks; }
  // Passes the program's output on to these descriptors while it runs: each stream's head as it comes, the rest (the
  // cut marker and the tail, when cut) at the end, so what is written is exactly what the result keeps. The result
  // still holds it all; its output_passed_on and output_write_errno say what happened to the copy.
  void PassOutputOn(int stdout_fd, int stderr_fd) {
    live_stdout_fd_ = stdout_fd;
    live_stderr_fd_ = stderr_fd;
  }

 private:
  Executor executor_;
  Policy policy_;
  bool forward_signals_ = false;
  SandboxHooks* hooks_ = nullptr;
  int live_stdout_fd_ = -1, live_stderr_fd_ = -1;
  std::atomic<bool> kill_requested_{false};
  int kill_eventfd_ = -1;
};

}  // namespace nsbox
