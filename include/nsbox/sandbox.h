// Sandbox: runs one Executor under one Policy and returns its Result: Run(), or RunAsync() then AwaitResult(); Kill()
// may be called from another thread.
#pragma once

#include <atomic>
#include <optional>
#include <thread>

#include <sys/types.h>

#include "nsbox/executor.h"
#include "nsbox/policy.h"
#include "nsbox/result.h"

namespace nsbox {

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
  // A run still going on (RunAsync without AwaitResult) is killed and waited for.
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Runs to completion. Never throws; every failure is a Result with status kSetupError. Once per Sandbox: a second
  // Run() (or RunAsync()) is a setup error and runs nothing.
  Result Run();
  // Starts Run() on a thread of its own and returns at once; AwaitResult() waits for it and returns its result
  // (a setup error when RunAsync was not called, or the result was taken already).
  void RunAsync();
  Result AwaitResult();
  // Ends the sandbox early: every process of it is killed, and the result has status kKilled ("killed", reason
  // "cancelled by the caller"), whatever the program was doing. Before the run starts, or while its sandbox is set
  // up, the program is not started at all ("... before the program started; nothing ran"); a Kill() after the program
  // ended, or during a time-out, leaves that verdict. Safe from any thread or signal handler.
  void Kill();
  // When set, SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to this process are passed on to the program instead: Run()
  // blocks them in the calling thread and reads them from a signalfd (an effect on signal delivery the embedder
  // opts into). The kernel gives a process's signal to any thread that does not block it: in a program with other
  // threads (RunAsync's own is one), every other thread must block them too, or one of those takes the signal.
  void ForwardSignals(bool forward) { forward_signals_ = forward; }
  // Not owned; must outlive Run().
  void SetHooks(SandboxHooks* hooks) { hooks_ = hooks; }
  // Passes the program's output on to these descriptors while it runs: each stream's head as it comes, the rest (the
  // cut marker and the tail, when cut) at the end, so what is written is exactly what the result keeps. The result
  // still holds it all; its output_passed_on and output_write_errno say what happened to the copy. A copy that fails
  // (its reader gone: EPIPE) ends the run early, as SIGPIPE ends a pipeline's writer: status kKilled, reason "ended
  // early: its output could not be passed on (EPIPE)". A reader that is there but takes nothing is waited for, until
  // a Kill(), or (with ForwardSignals) a stop signal that ended the program or came after it ended: then the rest of
  // the copy is dropped (ECANCELED). A program that survives a forwarded signal keeps its output.
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
  std::atomic<bool> ran_{false};  // Run() was called: a second call is refused
  const int kill_eventfd_;  // made with the Sandbox, closed with it
  const int kill_eventfd_errno_;
  std::thread async_run_;
  std::optional<Result> async_result_;
};

}  // namespace nsbox
