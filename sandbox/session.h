// SessionSandbox: one long-lived sandbox whose pid 1 stays between calls; execs and one resident process run in it.
#pragma once

#include "sandbox/sandbox.h"

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <atomic>
#include <functional>
#include <optional>
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
#include "sandbox/executor.h"
#include "sandbox/output_drain.h"
#include "sandbox/policy.h"
#include "sandbox/result.h"
#include "sandbox/seccomp.h"
#include "sandbox/supervisor.h"
#include "sandbox/verdict.h"
#include "sandbox/vfork_watchdog.h"

namespace nsbox {

// One exec's payload, started by a helper that joined the session's namespaces and then left it to the supervisor
// (PR_SET_CHILD_SUBREAPER), with the pipes to it.
struct SessionHelper {
  pid_t pid = -1;  // the payload, the supervisor's child; -1 when the helper failed before starting it
  UniqueFd pidfd, out, err;
  ControlChannel control;
  bool reaped = false;
  bool start_timed_out = false;  // the start could not begin by its deadline: no payload (StartHelper)
  std::optional<SetupFailure> setup_failure;
  std::optional<int> exit_status;  // from wait4, once reaped
  int64_t cpu_us = 0, max_rss_kb = 0;
  SeccompListener seccomp;  // answers (and counts) the payload's denied calls

  // Reads and drops what the output pipes hold now, without blocking (a pipe at its end is closed).
  void DiscardOutput();
  // Kills the payload's process group (its descendants that did not start a session of their own go with it).
  void Kill();
  // Waits for the payload (the supervisor's child: the subreaper its helper handed it to) and records its exit status
  // and resource usage.
  void Reap();
};

// A process of the session that lives across calls (a REPL's interpreter), spoken to on a unix socket that is its
// fd 3. The engine knows nothing of what is said: the caller frames each answer (ResidentTurnOptions::frame).
struct ResidentOptions {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // its environment when it (re)starts
  mode_t umask = 022;                      // and its umask
};

struct ResidentTurnOptions {
  std::chrono::milliseconds wall_timeout{30'000};
  uint64_t output_limit_bytes = 1 << 20;
  // Looks at what the process wrote on its channel so far: 0 while the answer is incomplete, 1 when it is complete,
  // -1 when it cannot be an answer to this request (*why says what is wrong: the channel is out of step).
  std::function<int(std::string_view bytes, std::string* why)> frame;
};

// What became of one request to a resident process.
struct ResidentTurn {
  bool answered = false;
  std::string answer;       // the channel's bytes when answered
  std::string out_of_step;  // frame's why: the process was killed
  bool timed_out = false, cancelled = false;
  bool state_lost = false;  // the process that served earlier requests died: this one is fresh
  // The process was replaced before this request because its channel held bytes no request asked for.
  bool restarted_out_of_step = false;
  // Why the session ended, when it ended while the request ran ("the session ended while the cell ran (…)").
  std::string session_ended;
  // False when nothing was tried (the session is ending, the process could not start): result says why.
  bool started = false;
  // Output, wall time; when not answered, the process's own end (MakeVerdict): it was killed and is gone.
  Result result;
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
  // client went away) the exec is killed. on_ran (may be empty) adds to the result of an exec that ran (its
  // payload was started): the changed files, say; not to a call refused before.
  // `live` (may be null) receives the output as it comes (the head up to the output limit, then the kept tail).
  Result Exec(Executor executor, int cancel_fd = -1, const std::function<void(Result&)>& on_ran = {},
              LiveOutput* live = nullptr);

  // Sends `request` to the session's resident process (started on first use, and again after it died) on its
  // channel and supervises it until options.frame says the answer is complete, it dies, the time runs out or
  // `cancel_fd` fires; in every case but an answer the process is killed, and the next request starts a fresh one.
  // One request at a time. A process whose channel holds bytes before a request is replaced first.
  ResidentTurn AskResident(const ResidentOptions& process, const std::string& request,
                           const ResidentTurnOptions& options, int cancel_fd = -1);

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
  // For a session that is the steps of one run (nsbox run of a compiled language: compile, then the program): the
  // execs' verdicts are worded as a run's ("every process of the sandbox was killed", "the memory limit"), not as
  // an exec's of a session that lives on. Before the first Exec.
  void WordExecVerdictsAsRun() { execs_worded_as_run_ = true; }
  // For a session that lives for one run (RunSteps: a compiled run, --cases, a batch job): an exec's sealed stdin
  // file (SealedStdin) is handed to its program as it is, a file with its size. In a session that lives on, a process
  // an exec leaves behind could keep such files, and their memory, which no limit of the sandbox counts: there they
  // are copied into a pipe.
  void PassSealedStdin() { pass_sealed_stdin_ = true; }
  // For the steps of one run: each exec's processes end with it, detached ones too (its group is killed), so that a
  // daemon of one --cases case does not run on through the later cases' time and CPU. A session's exec leaves them
  // to live on. Before the first Exec.
  void EndExecsWhole() { end_execs_whole_ = true; }

 private:
  explicit SessionSandbox(Policy policy) : policy_(std::move(policy)) {}
  // `join` (may be null): the cgroup descriptors the payload joins, instead of the session's (an exec's own group).
  // start_deadline: when the payload, if it has not reached its execve yet (a program of the session stopped it), is
  // killed so that the call returns (VforkWatchdog). A start that cannot begin by then (another exec's payload holds
  // the start, stopped) gives a helper with start_timed_out set and no payload.
  StatusOr<std::unique_ptr<SessionHelper>> StartHelper(
      const Executor& executor, int channel_fd, const CgroupSelfJoin* join = nullptr,
      VforkWatchdog::Clock::time_point start_deadline = VforkWatchdog::Clock::time_point::max());
  // Kills the resident process and forgets it; the next request starts a fresh one.
  void DropResident();
  // A group of the exec's own below the session's (CgroupChild): the one PrepareNextExec made, else a new one; null
  // without a cgroup.
  StatusOr<std::unique_ptr<CgroupChild>> StartExecGroup();
  // A fresh group with a memory limit of its own (never the spare, which has none).
  StatusOr<std::unique_ptr<CgroupChild>> StartExecGroup(uint64_t memory_max_bytes);
  // Keeps an ended exec's group until PrepareNextExec (or the next exec) finds it empty and removes it.
  void KeepExecGroup(std::unique_ptr<CgroupChild> group);
  void Forget(pid_t payload);
  // The verdict's inputs from the helper's reports; counters_before: the session cgroup's counters when the exec
  // began (Cgroup::ReadCounters), the exec's limits report what grew since (unset: no limits report).
  void GatherVerdict(SessionHelper& helper, const CgroupStats* counters_before, VerdictInputs* in);
  // in->limits: what the session's limits did since `counters_before` (they only grow; other execs' count too).
  void AddLimits(const CgroupStats& counters_before, VerdictInputs* in) const;
  // Why a start waited out its deadline (start_mutex_ held by another start whose payload a process stopped).
  static constexpr const char* kStartHeldUp =
      "another exec's start held the session's start lock until this one's deadline (a process of the session "
      "stopped that exec's payload before its execve)";
  // A caller's cancel descriptor's poll events: it sent a byte or went away.
  static bool CancelRequested(short revents);

  Policy policy_;
  std::atomic<pid_t> pid1_{-1};  // -1 once Terminate has reaped it; read by info requests on other threads
  UniqueFd pid1_pidfd_;
  // pid 1's user, mnt, pid, net, ipc and uts namespaces, opened while it was still dumpable (before its credentials
  // change): an unprivileged supervisor may not setns through the pidfd of a non-dumpable pid 1 (ptrace rules).
  UniqueFd ns_fds_[6];
  UniqueFd workspace_fd_;
  std::unique_ptr<Cgroup> cgroup_;  // the session's limits: pid 1 and every exec helper (and so every exec) join it
  // Exec and AskResident hold it shared for their whole call; Terminate takes it exclusively, once it has killed every
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
  uint64_t exec_group_counter_ = 0;
  bool new_network_ = true;
  bool execs_worded_as_run_ = false;
  bool pass_sealed_stdin_ = false;
  bool end_execs_whole_ = false;
  VforkWatchdog start_watchdog_;  // for payloads still starting at their exec's deadline
  OutputDrain output_drain_;      // ended execs' pipes that processes they started still write to
  // Starts one at a time: a start holds it until its payload has called execve. Timed: a process of the session can
  // stop a payload before that (SIGSTOP), and another exec's start then waits only until its own deadline
  // (StartHelper). Nothing else takes it: an exec that ends, and Terminate(), must never wait for a stopped start.
  std::timed_mutex start_mutex_;
  std::mutex payloads_mutex_;  // guards payloads_ alone
  std::set<pid_t> payloads_;  // the execs' live payloads (our children), killed and reaped by Terminate()

  // The resident process (a REPL's interpreter).
  std::timed_mutex resident_mutex_;  // one request at a time; a waiting one gives up at its time limit
  // Execs and cells under way, and how many ever started: whether one ran beside another (RequestWindow).
  std::atomic<int> requests_active_{0};
  std::atomic<uint64_t> requests_started_{0};
  // One request's time in the session: Shared() when another ran during any part of it (the counters are then not
  // this request's alone).
  class RequestWindow {
   public:
    explicit RequestWindow(SessionSandbox& s)
        : s_(s), others_at_start_(s.requests_active_++), number_(++s.requests_started_) {}
    ~RequestWindow() { --s_.requests_active_; }
    RequestWindow(const RequestWindow&) = delete;
    RequestWindow& operator=(const RequestWindow&) = delete;
    bool Shared() const { return others_at_start_ > 0 || s_.requests_started_ != number_; }

   private:
    SessionSandbox& s_;
    const int others_at_start_;
    const uint64_t number_;
  };
  std::unique_ptr<SessionHelper> resident_;
  // The resident process's own group, as an exec's: what its cells started, however detached (setsid, a double
  // fork), goes with it when it is killed. Null without a cgroup.
  std::unique_ptr<CgroupChild> resident_group_;
  UniqueFd resident_channel_;
  bool resident_lost_ = false;  // the previous one died: the next request says so
};

}  // namespace nsbox
