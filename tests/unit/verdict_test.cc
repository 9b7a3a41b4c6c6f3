// Unit tests: MakeVerdict, the one decision of what became of a program, for `nsbox run` and session execs alike.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "sandbox/verdict.h"

namespace {

using nsbox::MakeVerdict;
using nsbox::RunStatus;
using nsbox::VerdictInputs;
using VerdictKind = VerdictInputs::Kind;

int Exited(int code) { return code << 8; }  // a wait status, as W_EXITCODE builds it
int Signaled(int sig) { return sig; }

nsbox::LimitsReport Limits(uint64_t oom_kills = 0, bool pids_hit = false) {
  nsbox::LimitsReport limits;
  limits.backend = "cgroup1";
  limits.memory_max_bytes = 64 << 20;
  limits.pids_max = 16;
  limits.oom_kills = oom_kills;
  limits.pids_limit_hit = pids_hit;
  return limits;
}

VerdictInputs Ran(VerdictKind kind, int status) {
  VerdictInputs in;
  in.kind = kind;
  in.program_started = true;
  in.program_status = status;
  in.limits = Limits();
  return in;
}

}  // namespace

TEST_CASE("a program that exits 0 is ok, one that exits non-zero keeps its code", "[verdict]") {
  for (VerdictKind kind : {VerdictKind::kRun, VerdictKind::kSessionExec}) {
    auto ok = MakeVerdict(Ran(kind, Exited(0)));
    CHECK(ok.status == RunStatus::kOk);
    CHECK(ok.exit_code == 0);
    CHECK(ok.signal == 0);
    CHECK(ok.reason == "exited with code 0");
    auto failed = MakeVerdict(Ran(kind, Exited(3)));
    CHECK(failed.status == RunStatus::kExit);
    CHECK(failed.exit_code == 3);
    CHECK(failed.ShellExitCode() == 3);
  }
}

TEST_CASE("a program killed by a signal reports it; SIGSYS is a seccomp violation", "[verdict]") {
  auto killed = MakeVerdict(Ran(VerdictKind::kRun, Signaled(SIGSEGV)));
  CHECK(killed.status == RunStatus::kSignal);
  CHECK(killed.signal == SIGSEGV);
  CHECK(killed.exit_code == -1);
  CHECK(killed.reason == "killed by signal 11 (SIGSEGV)");
  auto violation = MakeVerdict(Ran(VerdictKind::kSessionExec, Signaled(SIGSYS)));
  CHECK(violation.status == RunStatus::kViolation);
  CHECK(violation.reason ==
        "killed by SIGSYS: the seccomp policy's kill (a call of another architecture), unless the program sent itself "
        "SIGSYS");
}

TEST_CASE("a time-out wins over the program's own end and says what was killed", "[verdict]") {
  auto run = Ran(VerdictKind::kRun, Signaled(SIGKILL));
  run.timed_out = true;
  run.wall_timeout = std::chrono::milliseconds(250);
  auto result = MakeVerdict(run);
  CHECK(result.status == RunStatus::kTimeout);
  CHECK(result.signal == SIGKILL);
  CHECK(result.reason == "wall-clock time limit of 250 ms exceeded; every process of the sandbox was killed");
  CHECK(result.ShellExitCode() == 124);
  auto exec = Ran(VerdictKind::kSessionExec, Signaled(SIGKILL));
  exec.timed_out = true;
  exec.wall_timeout = std::chrono::milliseconds(250);
  CHECK(MakeVerdict(exec).reason.ends_with("the exec and its process group were killed (the session lives on)"));
}

TEST_CASE("a cancelled run is killed by its caller, not timed out; a cancelled exec keeps its old wording",
          "[verdict]") {
  auto in = Ran(VerdictKind::kRun, Signaled(SIGKILL));
  in.cancelled = true;
  auto result = MakeVerdict(in);
  CHECK(result.status == RunStatus::kKilled);
  CHECK(result.signal == SIGKILL);
  CHECK_THAT(result.reason, Catch::StartsWith("cancelled by the caller"));
  // A session exec whose client went away: the runtimes read this as a cancel (runtime_test).
  auto exec = Ran(VerdictKind::kSessionExec, Signaled(SIGKILL));
  exec.cancelled = true;
  auto exec_result = MakeVerdict(exec);
  CHECK(exec_result.status == RunStatus::kTimeout);
  CHECK(exec_result.reason == "cancelled");
}

TEST_CASE("SIGKILL while the OOM killer counted a kill is an OOM at the limit", "[verdict]") {
  auto run = Ran(VerdictKind::kRun, Signaled(SIGKILL));
  run.limits = Limits(/*oom_kills=*/1);
  auto result = MakeVerdict(run);
  CHECK(result.status == RunStatus::kOom);
  CHECK(result.reason == "killed by the OOM killer: the memory limit of 67108864 bytes was reached");
  CHECK(result.ShellExitCode() == 137);
  auto exec = Ran(VerdictKind::kSessionExec, Signaled(SIGKILL));
  exec.limits = Limits(1);
  CHECK(MakeVerdict(exec).reason ==
        "killed by the OOM killer: the session's memory limit of 67108864 bytes was reached");
  // An exec held by a smaller limit of its own (a compile step's --compile-memory) names that one.
  exec.own_memory_limit = true;
  CHECK(MakeVerdict(exec).reason ==
        "killed by the OOM killer: the exec's own memory limit of 67108864 bytes was reached");
  // Without an OOM kill, SIGKILL is a plain signal.
  CHECK(MakeVerdict(Ran(VerdictKind::kRun, Signaled(SIGKILL))).status == RunStatus::kSignal);
}

TEST_CASE("a runtime that stops at the heap nsbox sized, saying so in stderr, is an OOM; its words alone are not",
          "[verdict]") {
  const std::string v8 = "JavaScript heap out of memory";
  auto aborted = Ran(VerdictKind::kRun, Signaled(SIGABRT));
  aborted.heap_exhausted_text = v8;
  aborted.stderr_stream.data =
      "<--- Last few GCs --->\nFATAL ERROR: Reached heap limit Allocation failed - " + v8 + "\n";
  auto result = MakeVerdict(aborted);
  CHECK(result.status == RunStatus::kOom);
  CHECK(result.signal == SIGABRT);
  CHECK(result.reason == "the runtime's heap, sized from the memory limit of 67108864 bytes, was full (\"" + v8 +
                             "\" in stderr): killed by signal 6 (SIGABRT)");
  CHECK(result.ShellExitCode() == 137);
  auto java = Ran(VerdictKind::kSessionExec, Exited(1));
  java.heap_exhausted_text = "java.lang.OutOfMemoryError: Java heap space";
  java.stderr_stream.data = "Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space\n";
  CHECK(MakeVerdict(java).status == RunStatus::kOom);
  CHECK(MakeVerdict(java).exit_code == 1);
  // Without the words, or with them and a clean exit, or with no heap sized: the program's own end.
  java.stderr_stream.data = "Exception in thread \"main\" java.lang.IllegalStateException\n";
  CHECK(MakeVerdict(java).status == RunStatus::kExit);
  auto fine = Ran(VerdictKind::kRun, Exited(0));
  fine.heap_exhausted_text = v8;
  fine.stderr_stream.data = v8;
  CHECK(MakeVerdict(fine).status == RunStatus::kOk);
  auto unsized = Ran(VerdictKind::kRun, Exited(3));
  unsized.stderr_stream.data = v8;
  CHECK(MakeVerdict(unsized).status == RunStatus::kExit);
  // The words with another end than the runtime's own at a full heap: an OutOfMemoryError caught and printed, then
  // exit 2; V8's words printed by the program, then exit 3. The program's end stands.
  java.stderr_stream.data = "java.lang.OutOfMemoryError: Java heap space\n\tat Main.main(Main.java:3)\n";
  java.program_status = Exited(2);
  CHECK(MakeVerdict(java).status == RunStatus::kExit);
  CHECK(MakeVerdict(java).exit_code == 2);
  auto printed = Ran(VerdictKind::kRun, Exited(3));
  printed.heap_exhausted_text = v8;
  printed.stderr_stream.data = "FATAL ERROR: " + v8 + "\n";
  CHECK(MakeVerdict(printed).status == RunStatus::kExit);
}

TEST_CASE("a session exec that ran beside others is not taken for the OOM kill the session's counter saw",
          "[verdict]") {
  // The counter is the session's: the OOM kill may have been another exec's, and this SIGKILL its own doing.
  auto exec = Ran(VerdictKind::kSessionExec, Signaled(SIGKILL));
  exec.limits = Limits(1);
  exec.counters_shared = true;
  auto result = MakeVerdict(exec);
  CHECK(result.status == RunStatus::kSignal);
  CHECK(result.reason == "killed by signal 9 (SIGKILL); the OOM killer ended 1 process at the memory limit of "
                         "67108864 bytes (in the session, while other execs ran too: this program's or theirs)");
}

TEST_CASE("a run whose pid 1 the OOM killer ended is an OOM, even without the program's own status", "[verdict]") {
  VerdictInputs in;
  in.program_started = true;
  in.init_status = Signaled(SIGKILL);
  in.limits = Limits(1);
  auto result = MakeVerdict(in);
  CHECK(result.status == RunStatus::kOom);
  CHECK(result.reason.find("it ended the sandbox's pid 1") != std::string::npos);
}

TEST_CASE("the OOM killer ending another process, and the pids limit, are added to the program's reason", "[verdict]") {
  auto in = Ran(VerdictKind::kRun, Exited(1));
  in.limits = Limits(/*oom_kills=*/2, /*pids_hit=*/true);
  auto result = MakeVerdict(in);
  CHECK(result.status == RunStatus::kExit);
  CHECK(result.reason == "exited with code 1; the OOM killer ended 2 processes at the memory limit of 67108864 bytes; "
                         "the pids limit of 16 was reached (a fork or a new thread failed with EAGAIN)");
  REQUIRE(result.limits);
  CHECK(result.limits->pids_limit_hit);
}

TEST_CASE("output and measurements are copied as captured, truncation included", "[verdict]") {
  auto in = Ran(VerdictKind::kRun, Exited(0));
  in.stdout_stream = {"head\n[nsbox: 10 bytes cut]\ntail", 24, true};
  in.stderr_stream = {"warning", 7, false};
  in.wall_ms = 12;
  in.cpu_ms = 5;
  in.peak_memory_bytes = 4096;
  in.denied_syscalls = {{"mount", 2}};
  in.denied_syscalls_capped = true;
  auto result = MakeVerdict(in);
  CHECK(result.status == RunStatus::kOk);  // a cut output is no failure of the program
  CHECK(result.stdout_data == "head\n[nsbox: 10 bytes cut]\ntail");
  CHECK(result.stdout_bytes == 24);
  CHECK(result.stdout_truncated);
  CHECK(result.stderr_data == "warning");
  CHECK_FALSE(result.stderr_truncated);
  CHECK(result.wall_ms == 12);
  CHECK(result.cpu_ms == 5);
  CHECK(result.peak_memory_bytes == 4096);
  CHECK(result.denied_syscalls.at("mount") == 2);
  CHECK(result.denied_syscalls_capped);
}

TEST_CASE("an exec killed because its session ended says so", "[verdict]") {
  auto in = Ran(VerdictKind::kSessionExec, Signaled(SIGKILL));
  in.session_ended = "the session ended while the exec ran (removed by nsbox session rm)";
  auto result = MakeVerdict(in);
  CHECK(result.status == RunStatus::kSignal);
  CHECK(result.reason == "the session ended while the exec ran (removed by nsbox session rm); the exec was killed");
  // A program that ended on its own keeps its own reason.
  auto exited = Ran(VerdictKind::kSessionExec, Exited(0));
  exited.session_ended = in.session_ended;
  CHECK(MakeVerdict(exited).reason == "exited with code 0");
}

TEST_CASE("a setup error only when nothing ran: a failed step, or pid 1 gone before the program", "[verdict]") {
  VerdictInputs failed_step;
  failed_step.setup_failure = nsbox::SetupFailure{"mount(proc)", EPERM};
  failed_step.init_status = Exited(1);
  auto result = MakeVerdict(failed_step);
  CHECK(result.status == RunStatus::kSetupError);
  CHECK(result.reason == "sandbox setup failed at mount(proc): Operation not permitted (EPERM)");
  CHECK(result.ShellExitCode() == 125);
  // ENOSPC from a mount call is the namespace's limit of mounts, which the reason says; from another step it is not.
  failed_step.setup_failure = nsbox::SetupFailure{"move_mount(/etc/f99072)", ENOSPC};
  CHECK_THAT(MakeVerdict(failed_step).reason,
             Catch::StartsWith("sandbox setup failed at move_mount(/etc/f99072): No space left on device (ENOSPC); "
                               "that is the kernel's limit of mounts in one namespace (fs.mount-max)"));
  failed_step.setup_failure = nsbox::SetupFailure{"write(code file)", ENOSPC};
  CHECK(MakeVerdict(failed_step).reason ==
        "sandbox setup failed at write(code file): No space left on device (ENOSPC)");

  // The program's own execve is flagged by pid 1, not recognised by its text: 127 when not found, 126 otherwise.
  VerdictInputs not_found;
  not_found.setup_failure = nsbox::SetupFailure{"execve(/no/such)", ENOENT, /*at_execve=*/true};
  CHECK(MakeVerdict(not_found).exec_errno == ENOENT);
  CHECK(MakeVerdict(not_found).ShellExitCode() == 127);
  not_found.setup_failure->err = EACCES;
  CHECK(MakeVerdict(not_found).ShellExitCode() == 126);
  VerdictInputs other_step;
  other_step.setup_failure = nsbox::SetupFailure{"execve(a helper)", ENOENT};
  CHECK(MakeVerdict(other_step).exec_errno == 0);
  CHECK(MakeVerdict(other_step).ShellExitCode() == 125);

  VerdictInputs early;
  early.init_status = Signaled(SIGKILL);
  CHECK(MakeVerdict(early).status == RunStatus::kSetupError);
  CHECK(MakeVerdict(early).reason ==
        "the sandbox's pid 1 ended before the program started (killed by signal 9 (SIGKILL))");

  // pid 1 died after the program's execve: the program ran and died with it.
  VerdictInputs late = early;
  late.program_started = true;
  auto ran = MakeVerdict(late);
  CHECK(ran.status == RunStatus::kSignal);
  CHECK(ran.signal == SIGKILL);

  VerdictInputs helper_gone;
  helper_gone.kind = VerdictKind::kSessionExec;
  CHECK(MakeVerdict(helper_gone).status == RunStatus::kSetupError);
}
