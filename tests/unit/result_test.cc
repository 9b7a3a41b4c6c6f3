// Unit tests: the JSON result object, its key names, exit-code mapping and UTF-8 safety.
#include <signal.h>

#include <catch2/catch.hpp>

#include "sandbox/verdict.h"
#include "sandbox/result.h"

using namespace nsbox;

TEST_CASE("result JSON carries every documented key") {
  Result r;
  r.status = RunStatus::kExit;
  r.exit_code = 3;
  r.stdout_data = "hi\n";
  r.stdout_bytes = 3;
  r.denied_syscalls["ptrace"] = 2;
  nlohmann::json j = ResultToJson(r);
  for (const char* key : {"status", "exit_code", "signal", "reason", "stdout", "stderr", "stdout_bytes", "stderr_bytes",
                          "stdout_truncated", "stderr_truncated", "wall_ms", "cpu_ms", "peak_memory_bytes"})
    CHECK(j.contains(key));
  CHECK(j["status"] == "exit");
  CHECK(j["exit_code"] == 3);
  CHECK(j["denied_syscalls"][0]["name"] == "ptrace");
  Result back = ResultFromJson(j);
  CHECK(back.status == RunStatus::kExit);
  CHECK(back.stdout_data == "hi\n");
  CHECK(back.denied_syscalls.at("ptrace") == 2);
}

TEST_CASE("exit codes follow the shell conventions") {
  Result r;
  r.status = RunStatus::kTimeout;
  CHECK(r.ShellExitCode() == 124);
  r.status = RunStatus::kSetupError;
  CHECK(r.ShellExitCode() == 125);
  r.status = RunStatus::kSignal;
  r.signal = 15;
  CHECK(r.ShellExitCode() == 143);
  r.status = RunStatus::kExit;
  r.exit_code = 7;
  CHECK(r.ShellExitCode() == 7);
}

TEST_CASE("binary output becomes valid UTF-8") {
  CHECK(SanitizeUtf8("plain") == "plain");
  CHECK(SanitizeUtf8("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(SanitizeUtf8("\xFF\xFE") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(SanitizeUtf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  CHECK(SanitizeUtf8("\xED\xA0\x80").find("\xED") == std::string::npos);  // surrogate
  std::string binary;
  for (int i = 0; i < 256; ++i) binary += static_cast<char>(i);
  Result r;
  r.stdout_data = binary;
  CHECK_NOTHROW(ResultToJson(r).dump());
}

TEST_CASE("a caller's kill is its own status, killed, exit 137, and survives the JSON round trip") {
  Result r;
  r.status = RunStatus::kKilled;
  r.signal = 9;
  CHECK(r.ShellExitCode() == 137);
  nlohmann::json j = ResultToJson(r);
  CHECK(j["status"] == "killed");
  CHECK(ResultFromJson(j).status == RunStatus::kKilled);
}

TEST_CASE("front-end additions and measurement errors are top-level JSON keys, both ways") {
  Result r;
  SetExtra(r, "repl", {{"value", "42"}, {"state_lost", false}});
  r.measurement_errors.push_back("memory.events: read: EIO");
  nlohmann::json j = ResultToJson(r);
  CHECK(j["repl"]["value"] == "42");
  CHECK(j["measurement_errors"][0] == "memory.events: read: EIO");
  Result back = ResultFromJson(j);
  CHECK(GetExtra(back, "repl")["value"] == "42");
  CHECK(GetExtra(back, "absent").is_null());
  CHECK(back.measurement_errors == r.measurement_errors);
  // Without errors the key is absent (the schema stays as documented).
  CHECK_FALSE(ResultToJson(Result{}).contains("measurement_errors"));
  // Text that is not JSON (an embedder's mistake) is kept as a string, not dropped or thrown on.
  Result odd;
  odd.extra_json["note"] = "not json";
  CHECK(ResultToJson(odd)["note"] == "not json");
}

TEST_CASE("a SIGKILL with unreadable cgroup counters says the OOM killer cannot be ruled out") {
  VerdictInputs killed;
  killed.program_status = SIGKILL;  // a wait status: killed by signal 9
  killed.limits = LimitsReport{};
  killed.measurement_errors.push_back("/sys/fs/cgroup/x/memory.events: read: EIO");
  Result r = MakeVerdict(killed);
  CHECK(r.status == RunStatus::kSignal);
  CHECK_THAT(r.reason, Catch::Contains("memory.events") && Catch::Contains("OOM killer cannot be ruled out"));
  CHECK(r.measurement_errors == killed.measurement_errors);
  // The program's own exit is not in doubt.
  VerdictInputs exited = killed;
  exited.program_status = 1 << 8;  // exited with code 1
  Result e = MakeVerdict(exited);
  CHECK(e.status == RunStatus::kExit);
  CHECK(e.reason == "exited with code 1");
}
