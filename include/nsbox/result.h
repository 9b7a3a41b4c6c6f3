// Result: what happened to one sandboxed program (setup failure kept apart from the program's own outcome).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nsbox {

// kSessionLost: a session's supervisor took an exec and then died or stopped answering; the program may have run
// (a setup error says that nothing ran). kKilled: the caller ended the run (Sandbox::Kill), not its time limit.
// kCompileError: a front end's compile step before the program failed or hit its limits; the program never ran (the
// engine itself never makes it: see src/cli/compiled_program.h).
enum class RunStatus {
  kOk, kExit, kSignal, kTimeout, kOom, kViolation, kSetupError, kSessionLost, kKilled, kCompileError
};

const char* RunStatusName(RunStatus status);

// ShellExitCode of kCompileError: below timeout(1)'s and Docker's 124-127 and apart from 128+N, so that a script
// tells "the code did not compile" from every other nsbox outcome.
constexpr int kCompileExitCode = 123;

// Which mechanism enforced a limit, and what it measured; filled by the cgroup backend.
struct LimitsReport {
  std::string backend;                      // "cgroup2", "cgroup1", or "none"
  std::map<std::string, std::string> enforced_by;  // limit name -> mechanism
  uint64_t memory_max_bytes = 0;
  uint64_t pids_max = 0;
  double cpus = 0;
  bool pids_limit_hit = false;
  uint64_t cpu_throttled_ms = 0;
  uint64_t oom_kills = 0;
};

struct Result {
  RunStatus status = RunStatus::kSetupError;
  int exit_code = -1;    // the program's exit code, -1 when it did not exit normally
  int signal = 0;        // the signal that ended it, 0 if none
  std::string reason;    // human-readable: why it ended, or which setup step failed
  // kSetupError at the program's own execve (nothing of it ran): that call's errno. ENOENT or ENOTDIR is a program
  // not found, anything else one that cannot be executed. 0 for every other result.
  int exec_errno = 0;
  std::string stdout_data;
  std::string stderr_data;
  uint64_t stdout_bytes = 0;  // bytes the program produced, kept or not
  uint64_t stderr_bytes = 0;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  int64_t wall_ms = 0;
  int64_t cpu_ms = 0;
  uint64_t peak_memory_bytes = 0;
  std::optional<LimitsReport> limits;
  std::map<std::string, uint64_t> denied_syscalls;  // syscall name -> count
  // nsbox stopped answering denials after SeccompNotifier::kAnswerBudget of them: the later ones (ENOSYS from the
  // kernel) are not in denied_syscalls.
  bool denied_syscalls_capped = false;
  std::map<std::string, uint64_t> denied_hosts;     // host -> count
  // Measurements nsbox could not take ("memory.peak: open: ENOENT"): the figure it stands for is missing (0), not
  // measured as 0. A kill verdict with an unreadable OOM counter says so in its reason too.
  std::vector<std::string> measurement_errors;
  // Front-end additions (changed files, REPL value …): top-level key -> its value as JSON text. Inside nsbox,
  // sandbox/result_json.h reads and writes them (SetExtra, GetExtra).
  std::map<std::string, std::string> extra_json;
  // Not part of the JSON result: the output was already written out while the program ran (Sandbox::PassOutputOn),
  // and the errno of the write that failed there, if one did.
  bool output_passed_on = false;
  int output_write_errno = 0;

  // The process exit code nsbox itself uses for this result: the program's code, 124 time-out, 127 program not found
  // and 126 program not executable (Docker's convention; exec_errno), 125 any other setup error or session lost,
  // 128+N for signal N (137 for OOM, kill verdicts and Sandbox::Kill), 123 compile error (kCompileExitCode).
  int ShellExitCode() const;
};

}  // namespace nsbox
