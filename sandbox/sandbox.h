// Sandbox: runs one Executor under one Policy and returns its Result; Kill() may be called from another thread.
#pragma once

#include <atomic>
#include <functional>

#include "sandbox/executor.h"
#include "sandbox/policy.h"
#include "sandbox/result.h"

namespace nsbox {

class Sandbox {
 public:
  Sandbox(Executor executor, Policy policy);
  // Runs to completion. Never throws; every failure is a Result with status kSetupError.
  Result Run();
  // Ends the sandbox early (status timeout, reason "cancelled"). Safe from any thread or signal handler.
  void Kill();
  // When set, SIGINT/SIGTERM/SIGHUP sent to nsbox are passed on to the program instead of killing nsbox.
  void ForwardSignals(bool forward) { forward_signals_ = forward; }

 private:
  Executor executor_;
  Policy policy_;
  bool forward_signals_ = false;
  std::atomic<bool> kill_requested_{false};
  int kill_eventfd_ = -1;
};

}  // namespace nsbox
