// MakeVerdict: status, exit code, signal and reason of one program from what its supervisor saw; no system calls.
#include "sandbox/verdict.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "sandbox/base/status.h"

namespace nsbox {
namespace {

using Kind = VerdictInputs::Kind;

uint64_t OomKills(const VerdictInputs& in) { return in.limits ? in.limits->oom_kills : 0; }
uint64_t MemoryMax(const VerdictInputs& in) { return in.limits ? in.limits->memory_max_bytes : 0; }

// Adds to the reason what the limits did to a program that ended otherwise: the pids limit reached (a program that
// could not fork often says no more than "Resource temporarily unavailable"), processes the OOM killer ended while
// the program itself lived on (a worker, a subprocess), or in the session while other requests ran too.
void NoteLimitsHit(Result* result, bool counters_shared) {
  if (!result->limits) return;
  const LimitsReport& limits = *result->limits;
  if (limits.oom_kills > 0 && result->status != RunStatus::kOom)
    result->reason += fmt::format("; the OOM killer ended {} process{} at the memory limit of {} bytes{}",
                                  limits.oom_kills, limits.oom_kills == 1 ? "" : "es", limits.memory_max_bytes,
                                  counters_shared ? " (in the session, while other execs ran too: this program's "
                                                    "or theirs)"
                                                  : "");
  if (limits.pids_limit_hit)
    result->reason += fmt::format("; the pids limit of {} was reached (a fork or a new thread failed with EAGAIN)",
                                  limits.pids_max);
  // Without the counters a SIGKILL's cause is not known: it may have been the OOM killer (measurement_errors).
  if (!result->measurement_errors.empty() && result->status == RunStatus::kSignal && result->signal == SIGKILL)
    result->reason += fmt::format("; nsbox could not read the sandbox's cgroup counters ({}), so the OOM killer "
                                  "cannot be ruled out", result->measurement_errors.front());
}

// The program's own end: exit code, signal, seccomp violation, OOM kill.
void FromProgramStatus(const VerdictInputs& in, int ws, Result* result) {
  if (WIFEXITED(ws)) {
    result->exit_code = WEXITSTATUS(ws);
    result->status = result->exit_code == 0 ? RunStatus::kOk : RunStatus::kExit;
  } else if (WIFSIGNALED(ws)) {
    result->signal = WTERMSIG(ws);
    result->status = result->signal == SIGSYS ? RunStatus::kViolation : RunStatus::kSignal;
  }
  // The shipped profiles deny with errnos; SIGSYS is their kill of a call of another architecture (int 0x80, x32), or
  // a SIGSYS the program sent itself, which the exit status cannot tell apart.
  result->reason = result->status == RunStatus::kViolation
                       ? "killed by SIGSYS: the seccomp policy's kill (a call of another architecture), unless the "
                         "program sent itself SIGSYS"
                       : ExitReason(ws);
  if (result->signal == SIGKILL && OomKills(in) > 0 && !in.counters_shared) {
    result->status = RunStatus::kOom;
    const char* whose = in.kind != Kind::kSessionExec ? "" : in.own_memory_limit ? "exec's own " : "session's ";
    result->reason =
        fmt::format("killed by the OOM killer: the {}memory limit of {} bytes was reached", whose, MemoryMax(in));
  } else if (((result->status == RunStatus::kExit && result->exit_code == 1) ||
              (result->status == RunStatus::kSignal && result->signal == SIGABRT)) &&
             !in.heap_exhausted_text.empty() &&
             in.stderr_stream.data.find(in.heap_exhausted_text) != std::string::npos) {
    // The words, and the end the runtimes make at a full heap: Java exits 1, V8 aborts. A program that printed them
    // and ended otherwise (an OutOfMemoryError caught, then exit 2) keeps its own end.
    result->status = RunStatus::kOom;
    result->reason = fmt::format(
        "the runtime's heap, sized from the memory limit of {} bytes, was full (\"{}\" in "
        "stderr): {}",
        MemoryMax(in), in.heap_exhausted_text, result->reason);
  }
}

void Decide(const VerdictInputs& in, Result* result) {
  if (in.setup_failure) {
    result->status = RunStatus::kSetupError;
    result->reason = fmt::format("sandbox setup failed at {}: {} ({})", in.setup_failure->step,
                                 strerror(in.setup_failure->err), ErrnoName(in.setup_failure->err));
    // A mount call's ENOSPC is no disk's: the mount namespace is at the kernel's limit of mounts.
    const std::string_view step = in.setup_failure->step;
    if (in.setup_failure->err == ENOSPC && (step.starts_with("move_mount") || step.starts_with("open_tree") ||
                                            step.starts_with("mount") || step.starts_with("fsmount")))
      result->reason +=
          "; that is the kernel's limit of mounts in one namespace (fs.mount-max), not disk space: the "
          "root has too many entries for nsbox to bind one by one";
    // The program's own execve (the last step): a program not found or not executable, which the exit code tells
    // apart from nsbox's own failures (127, 126).
    if (in.setup_failure->at_execve) result->exec_errno = in.setup_failure->err;
    return;
  }
  if (in.cancelled && in.kind == Kind::kRun) {
    result->status = RunStatus::kKilled;
    result->signal = SIGKILL;
    result->reason = "cancelled by the caller (Sandbox::Kill); every process of the sandbox was killed";
    return;
  }
  if (in.timed_out || in.cancelled) {
    result->status = RunStatus::kTimeout;
    result->signal = SIGKILL;
    if (in.cancelled)
      result->reason = "cancelled";
    else if (in.kind == Kind::kSessionExec)
      result->reason = fmt::format("wall-clock time limit of {} ms exceeded; the exec and its process group were "
                                   "killed (the session lives on)", in.wall_timeout.count());
    else
      result->reason = fmt::format("wall-clock time limit of {} ms exceeded; every process of the sandbox was killed",
                                   in.wall_timeout.count());
    return;
  }
  if (in.program_status) return FromProgramStatus(in, *in.program_status, result);
  if (in.kind == Kind::kSessionExec) {
    result->status = RunStatus::kSetupError;
    result->reason = "the exec helper ended without reporting (the session is ending?)";
    return;
  }
  const int init = in.init_status.value_or(0);
  if (in.init_status && WIFSIGNALED(init) && WTERMSIG(init) == SIGKILL && OomKills(in) > 0) {
    // The OOM killer chose pid 1 (a v2 sandbox's, which is in the group: when the program's processes are all
    // smaller, a tmpfs file filling the group), and its death ended every process: the program's verdict.
    result->status = RunStatus::kOom;
    result->signal = SIGKILL;
    result->reason = fmt::format("killed by the OOM killer: the memory limit of {} bytes was reached (it ended the "
                                 "sandbox's pid 1, and with it every process)", MemoryMax(in));
  } else if (in.program_started) {
    // The program ran: its end came with pid 1's, whose death killed every process of the sandbox.
    result->status = RunStatus::kSignal;
    result->signal = SIGKILL;
    result->reason = fmt::format("killed with every process of the sandbox: its pid 1 ended while the program ran ({})",
                                 ExitReason(init));
  } else {
    result->status = RunStatus::kSetupError;
    result->reason = fmt::format("the sandbox's pid 1 ended before the program started ({})", ExitReason(init));
  }
}

}  // namespace

Result MakeVerdict(VerdictInputs in) {
  Result result;
  Decide(in, &result);
  result.limits = std::move(in.limits);
  result.measurement_errors = std::move(in.measurement_errors);
  NoteLimitsHit(&result, in.counters_shared);
  // Killed because the session ended (rm, its lifetime): say that, not only which signal.
  if (!in.session_ended.empty() && result.status == RunStatus::kSignal && result.signal == SIGKILL)
    result.reason = in.session_ended + "; the exec was killed";
  result.stdout_data = std::move(in.stdout_stream.data);
  result.stderr_data = std::move(in.stderr_stream.data);
  result.stdout_bytes = in.stdout_stream.total_bytes;
  result.stderr_bytes = in.stderr_stream.total_bytes;
  result.stdout_truncated = in.stdout_stream.truncated;
  result.stderr_truncated = in.stderr_stream.truncated;
  result.wall_ms = in.wall_ms;
  result.cpu_ms = in.cpu_ms;
  result.peak_memory_bytes = in.peak_memory_bytes;
  result.denied_syscalls = std::move(in.denied_syscalls);
  result.denied_syscalls_capped = in.denied_syscalls_capped;
  return result;
}

Result SetupError(std::string reason) {
  Result r;
  r.status = RunStatus::kSetupError;
  r.reason = std::move(reason);
  return r;
}

std::string ExitReason(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exited with code {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    if (sig >= SIGRTMIN && sig <= SIGRTMAX)
      return fmt::format("killed by signal {} (SIGRTMIN+{})", sig, sig - SIGRTMIN);
    const char* name = sigabbrev_np(sig);
    return name ? fmt::format("killed by signal {} (SIG{})", sig, name) : fmt::format("killed by signal {}", sig);
  }
  return fmt::format("ended with wait status {}", wait_status);
}

}  // namespace nsbox
