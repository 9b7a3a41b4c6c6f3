// MakeVerdict: the pure decision of what became of one sandboxed program, shared by `nsbox run` and session execs.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "sandbox/result.h"

namespace nsbox {

// A set-up step that failed in the child (InitMessage::kSetupError): the call and its errno. By construction it is
// sent only before the program's execve, so a result built from it says that nothing ran.
struct SetupFailure {
  std::string step;
  int err = 0;
  bool at_execve = false;  // the program's own execve failed (not found, not executable): exit status 127 or 126
};

// One output stream as the supervisor kept it (OutputBuffer).
struct CapturedStream {
  std::string data;
  uint64_t total_bytes = 0;
  bool truncated = false;
};

// Everything the verdict depends on, gathered by the supervisor; no system call is made from it.
struct VerdictInputs {
  // Which launch this is: the wording of a time-out and an OOM kill differ (a session lives on).
  enum class Kind { kRun, kSessionExec };
  Kind kind = Kind::kRun;
  std::optional<SetupFailure> setup_failure;
  // The program's own wait status, when it is known (a run's pid 1 reports it, an exec's payload is reaped).
  std::optional<int> program_status;
  // A run's pid 1 reported the program's execve: when pid 1 ends without a program status, the program ran.
  bool program_started = false;
  // A run's pid 1's own wait status, when nsbox reaped it.
  std::optional<int> init_status;
  bool timed_out = false;
  bool cancelled = false;  // Sandbox::Kill, a session client that went away
  std::chrono::milliseconds wall_timeout{0};
  // The limits and what they measured for this program; unset: no report. backend "none": no cgroup.
  std::optional<LimitsReport> limits;
  // The cgroup counters that could not be read ("<file>: <why>"): a SIGKILL's cause is then not known.
  std::vector<std::string> measurement_errors;
  // A session's request that ran beside others: the limits' counters are the session's, and an OOM kill among them
  // may have been another request's; a SIGKILL is then not taken for this one's OOM.
  bool counters_shared = false;
  // A session exec with a memory limit of its own (--compile-memory, an exec's own limit) below the session's: the
  // limits' memory_max_bytes is that one, and an OOM names it as the exec's.
  bool own_memory_limit = false;
  // Non-empty: the session ended while this exec ran ("the session ended while the exec ran (removed …)").
  std::string session_ended;
  CapturedStream stdout_stream, stderr_stream;
  std::string heap_exhausted_text;  // the executor's: a failure with it in stderr is an oom
  int64_t wall_ms = 0, cpu_ms = 0;
  uint64_t peak_memory_bytes = 0;
  std::map<std::string, uint64_t> denied_syscalls;
  bool denied_syscalls_capped = false;
};

// The Result: status, exit code, signal and reason from the inputs, with the measurements copied in. The order of the
// rules: a set-up failure; a time-out or cancel; the program's exit (SIGSYS a violation, SIGKILL with an OOM kill an
// OOM); a run's pid 1 killed by the OOM killer; a run's pid 1 that ended after the program started (the program died
// with it); else nothing ran (setup error). Then what the limits did besides (pids limit reached, OOM kills of other
// processes) is added to the reason.
Result MakeVerdict(VerdictInputs inputs);

// A result that says nothing ran, and why.
Result SetupError(std::string reason);
// "exited with code N" / "killed by signal N (SIGNAME)".
std::string ExitReason(int wait_status);

}  // namespace nsbox
