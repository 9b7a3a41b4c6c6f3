// SessionSandbox: one long-lived sandbox whose pid 1 stays between calls; execs and a Python REPL run inside it.
#pragma once

#include "sandbox/sandbox.h"

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/child.h"
#include "sandbox/seccomp.h"
#include "sandbox/executor.h"
#include "sandbox/policy.h"
#include "sandbox/result.h"
#include "sandbox/vfork_watchdog.h"

namespace nsbox {

// One exec's payload, started by a helper that joined the session's namespaces and then left it to the supervisor
// (PR_SET_CHILD_SUBREAPER), with the pipes to it.
struct SessionHelper {
  pid_t pid = -1;  // the payload, the supervisor's child; -1 when the helper failed before starting it
  UniqueFd pidfd, out, err, control;
  bool reaped = false;
  std::string control_bytes;
  bool have_setup_error = false, have_exit = false;
  InitMessage setup_error{}, exit_message{};
  UniqueFd seccomp_socket;                     // where the payload hands over its seccomp listener
  std::unique_ptr<SeccompNotifier> notifier;   // answers (and counts) the payload's denied calls
};

// A session's next exec, prepared ahead (SessionSandbox::PrepareNextExec): its payload parked just before execve
// (RunParkedPayload), the group it joined, the pipe that starts it and the shared mapping its program goes into.
// Owned by the session until an exec takes it (SessionSandbox::DropParked ends one that will not run).
struct ParkedExec {
  std::unique_ptr<SessionHelper> helper;
  std::unique_ptr<CgroupChild> group;
  UniqueFd park;             // the write end; one byte starts the payload
  void* mapping = nullptr;   // ParkedRequest::kMappingBytes, MAP_SHARED
  ParkedExec() = default;
  ParkedExec(const ParkedExec&) = delete;
  ParkedExec& operator=(const ParkedExec&) = delete;
  ~ParkedExec();
};

// How the persistent interpreter is started and what one cell may use.
struct ReplOptions {
  std::vector<std::string> driver_argv;      // e.g. /usr/bin/python3 -u -c <driver source>; speaks on fd 3
  std::map<std::string, std::string> env;    // the interpreter's environment when it (re)starts
  mode_t umask = 022;                        // and its umask
  std::chrono::milliseconds wall_timeout{30'000};
  uint64_t output_limit_bytes = 1 << 20;
};

class SessionSandbox {
 public:
  // Clones the session's pid 1 into fresh namespaces, sets up its root as `nsbox run` does, and returns once pid 1
  // has reported that it is ready. Its pid 1 dies with the calling thread (PR_SET_PDEATHSIG). The calling process
  // must be a child subreaper already (prctl(PR_SET_CHILD_SUBREAPER, 1), a process-wide setting the engine leaves to
  // its embedder): each exec's payload becomes its child. Fails, and starts nothing, otherwise.
  // `hooks` (may be null, must outlive the session) starts host-side services once pid 1's namespaces exist.
  static StatusOr<std::unique_ptr<SessionSandbox>> Start(Policy policy, SandboxHooks* hooks = nullptr);
  ~SessionSandbox();
  SessionSandbox(const SessionSandbox&) = delete;
  SessionSandbox& operator=(const SessionSandbox&) = delete;

  // Runs one program as a new process inside the session, under the session's policy plus the executor's time and
  // output limits. Thread-safe: several execs may run at once. When `cancel_fd` becomes readable or hangs up (the
  // client went away) the exec is killed. The result carries extra["changed_files"]: the files of /workspace it
  // created or changed ([{path, size}], paths as the sandbox sees them).
  Result Exec(Executor executor, int cancel_fd = -1);

  // Runs one cell in the session's persistent interpreter (started on first use, and again after it died). One cell
  // at a time. extra["repl"] = {value, exception, traceback, state_lost, interpreter_killed}. The interpreter answers
  // each request with one JSON object carrying the request's cell id; anything else on its channel (a cell wrote to
  // it) kills the interpreter, so that no later cell gets an earlier one's answer.
  Result RunCell(const std::string& code, const ReplOptions& options, int cancel_fd = -1);

  // Kills pid 1 (and with it every process of the session) and every exec helper; waits for pid 1. `why` says how the
  // session ended ("removed by nsbox session rm"): the execs and cells it cuts short report it as their reason.
  void Terminate(std::string_view why = {});

  pid_t pid1() const { return pid1_; }
  int pid1_pidfd() const { return pid1_pidfd_.get(); }
  bool Alive() const;
  const Policy& policy() const { return policy_; }
  // A new descriptor of the session's /workspace (O_RDONLY|O_DIRECTORY), for walks and copies; opened once, from
  // inside the session's mount namespace, at Start().
  StatusOr<UniqueFd> OpenWorkspace() const;
  // Resident memory of the session's processes plus what its tmpfs mounts hold.
  uint64_t MemoryInUseBytes() const;
  // Work an exec leaves for later, done once its answer is sent so that the next client does not wait for it:
  // removes the groups of ended execs that emptied, and makes the group the next exec will take. Thread-safe.
  void PrepareNextExec();

 private:
  explicit SessionSandbox(Policy policy) : policy_(std::move(policy)) {}
  // `join` (may be null): the cgroup descriptors the payload joins, instead of the session's (an exec's own group).
  // park_fd >= 0: the payload parks (RunParkedPayload) until a byte arrives on that pipe, to run *request.
  // start_deadline: when the payload, if it has not reached its execve yet (a program of the session stopped it), is
  // killed so that the call returns (VforkWatchdog).
  StatusOr<std::unique_ptr<SessionHelper>> StartHelper(
      const Executor& executor, int channel_fd, const CgroupSelfJoin* join = nullptr, int park_fd = -1,
      const ParkedRequest* request = nullptr,
      VforkWatchdog::Clock::time_point start_deadline = VforkWatchdog::Clock::time_point::max());
  // The parked payload, if there is one and it still waits; null otherwise (one found dead is discarded).
  std::unique_ptr<ParkedExec> TakeParked();
  // Parks the next exec's payload (PrepareNextExec), where the profile allows it.
  void Park();
  // Kills and reaps a parked payload that will not run (dead already, or its request does not fit), keeps its group.
  void DropParked(std::unique_ptr<ParkedExec> parked);
  // A group of the exec's own below the session's (CgroupChild): the one PrepareNextExec made, else a new one; null
  // without a cgroup.
  StatusOr<std::unique_ptr<CgroupChild>> StartExecGroup();
  // Keeps an ended exec's group until PrepareNextExec (or the next exec) finds it empty and removes it.
  void KeepExecGroup(std::unique_ptr<CgroupChild> group);
  void Forget(pid_t payload);
  // counters_before: the session cgroup's counters when the exec began (Cgroup::ReadCounters); the exec's limits
  // report what grew since.
  void FinishReport(SessionHelper& helper, const CgroupStats& counters_before, Result* result);

  Policy policy_;
  std::atomic<pid_t> pid1_{-1};  // -1 once Terminate has reaped it; read by info requests on other threads
  UniqueFd pid1_pidfd_;
  // pid 1's user, mnt, pid, net, ipc and uts namespaces, opened while it was still dumpable (before its credentials
  // change): an unprivileged supervisor may not setns through the pidfd of a non-dumpable pid 1 (ptrace rules).
  UniqueFd ns_fds_[6];
  UniqueFd workspace_fd_;
  std::unique_ptr<Cgroup> cgroup_;  // the session's limits: pid 1 and every exec helper (and so every exec) join it
  // Exec and RunCell hold it shared for their whole call; Terminate takes it exclusively, once it has killed every
  // process (which ends those calls), before it removes what they still use (the cgroup, the kept exec groups).
  // A session that ends at its lifetime while an exec runs would otherwise free the cgroup under that exec's report.
  std::shared_mutex calls_mutex_;
  std::atomic<bool> terminating_{false};
  std::mutex end_cause_mutex_;
  std::string end_cause_;  // Terminate's `why`, set before terminating_
  // Why a call that ended while the session ended was cut short; `what` is "exec" or "cell".
  std::string SessionEndedReason(std::string_view what);
  // /proc/self/clear_refs, written before each payload starts: see StartHelper.
  UniqueFd clear_refs_fd_;
  // Ended execs' groups that still held processes (a background server started with setsid), removed once empty.
  mutable std::mutex exec_groups_mutex_;
  std::vector<std::unique_ptr<CgroupChild>> kept_exec_groups_;
  std::unique_ptr<CgroupChild> spare_exec_group_;  // made by PrepareNextExec, empty, for the next exec
  // The next exec's payload, prepared up to its seccomp filter by PrepareNextExec and waiting for its program (with
  // the exec group it joined). Taken by an exec with no stdin of its own.
  std::unique_ptr<ParkedExec> parked_;
  bool parking_ = false;  // the profile allows parking (SeccompProgram::allows_parking), or there is none
  uint64_t exec_group_counter_ = 0;
  bool new_network_ = true;
  VforkWatchdog start_watchdog_;  // for payloads still starting at their exec's deadline
  std::mutex payloads_mutex_;
  std::set<pid_t> payloads_;  // the execs' live payloads (our children), killed and reaped by Terminate()

  // The persistent interpreter.
  std::mutex repl_mutex_;
  std::unique_ptr<SessionHelper> repl_;
  UniqueFd repl_channel_;
  bool repl_state_lost_ = false;  // the previous interpreter died: the next cell says so
  uint64_t repl_cell_id_ = 0;     // the last cell's id, sent with it and echoed in the driver's answer
};

}  // namespace nsbox
