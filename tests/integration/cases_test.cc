// Integration: nsbox run --cases (one compile, a verdict and passed per stdin case) and nsbox batch with compiled
// languages next to python jobs, with C on the host view.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_nsbox.h"
#include "tests/support/skip.h"

using namespace nsbox::testing;

namespace {

// Doubles the number it reads; a negative one loops for ever, none exits 2.
constexpr const char* kDoubler =
    "#include <stdio.h>\nint main(void){ long x; if (scanf(\"%ld\", &x) != 1) return 2; if (x < 0) for (;;);"
    " printf(\"%ld  \\n\", x * 2); return 0; }\n";

std::string WriteTemp(const std::string& name, const std::string& text) {
  std::string path = "/tmp/nsbox-cases-test-" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path) << text;
  return path;
}

nlohmann::json RunCasesJson(const std::string& code, const std::string& cases, int expected_exit) {
  std::string file = WriteTemp("cases.jsonl", cases);
  auto raw = RunNsboxRaw({"run", "--json", "--timeout", "3s", "--lang", "c", "--code", code, "--cases", file});
  ::unlink(file.c_str());
  INFO(raw.out << raw.err);
  CHECK(raw.exit_code == expected_exit);
  return nlohmann::json::parse(raw.out);
}

// Runs `nsbox batch --jobs 2` on these jobs (one JSONL line each); each result by its string id.
std::map<std::string, nlohmann::json> RunBatch(const std::vector<nlohmann::json>& jobs) {
  std::string text;
  for (const auto& job : jobs) text += job.dump() + "\n";
  std::string file = WriteTemp("jobs.jsonl", text);
  auto raw = RunNsboxRaw({"batch", "--jobs", "2", file});
  ::unlink(file.c_str());
  INFO(raw.out << raw.err);
  CHECK(raw.exit_code == 0);
  std::map<std::string, nlohmann::json> results;
  std::istringstream lines(raw.out);
  for (std::string line; std::getline(lines, line);) {
    auto parsed = nlohmann::json::parse(line);
    results[parsed["id"].get<std::string>()] = parsed["result"];
  }
  return results;
}

}  // namespace

TEST_CASE("--cases: every case passes; trailing spaces and the last newline are not judged", "[integration][cases]") {
  auto r = RunCasesJson(kDoubler,
                        "{\"name\": \"one\", \"stdin\": \"1\\n\", \"expected_stdout\": \"2\\n\"}\n\n"
                        "{\"stdin\": \"21\", \"expected_stdout\": \"42\"}\n",
                        0);
  CHECK(r["status"] == "ok");
  CHECK(r["compile"]["status"] == "ok");
  CHECK(r["summary"] == nlohmann::json({{"passed", 2}, {"failed", 0}, {"total", 2}}));
  REQUIRE(r["cases"].size() == 2);
  CHECK(r["cases"][0]["name"] == "one");
  CHECK(r["cases"][0]["stdout"] == "2  \n");
  CHECK(r["cases"][1]["name"] == "line 3");
  CHECK(r["cases"][1]["passed"] == true);
}

TEST_CASE("--cases: a wrong answer and a time-out fail alone, the others pass", "[integration][cases]") {
  auto r = RunCasesJson(kDoubler,
                        "{\"name\": \"ok\", \"stdin\": \"5\", \"expected_stdout\": \"10\"}\n"
                        "{\"name\": \"wrong\", \"stdin\": \"3\", \"expected_stdout\": \"7\"}\n"
                        "{\"name\": \"loop\", \"stdin\": \"-1\", \"expected_stdout\": \"0\"}\n"
                        "{\"name\": \"after\", \"stdin\": \"0\", \"expected_stdout\": \"0\"}\n",
                        1);
  REQUIRE(r["cases"].size() == 4);
  CHECK(r["cases"][0]["passed"] == true);
  CHECK(r["cases"][1]["status"] == "ok");
  CHECK(r["cases"][1]["passed"] == false);
  CHECK(r["cases"][1]["stdout"] == "6  \n");
  CHECK(r["cases"][1]["reason"] == "wrong output: line 1 is \"6\", expected \"7\"");
  CHECK(r["cases"][2]["status"] == "timeout");
  CHECK(r["cases"][2]["passed"] == false);
  CHECK(r["cases"][3]["passed"] == true);
  CHECK(r["summary"]["passed"] == 2);
  CHECK(r["summary"]["total"] == 4);
  // Without --json, a failed case's line says why.
  std::string file = WriteTemp("why-cases.jsonl",
                               "{\"name\": \"wrong\", \"stdin\": \"3\", \"expected_stdout\": "
                               "\"7\\n8\"}\n{\"name\": \"short\", \"stdin\": \"\", "
                               "\"expected_stdout\": \"\"}\n");
  auto text = RunNsboxRaw({"run", "--timeout", "3s", "--lang", "c", "--code", kDoubler, "--cases", file});
  ::unlink(file.c_str());
  INFO(text.out << text.err);
  CHECK(text.exit_code == 1);
  CHECK_THAT(text.out, Catch::Contains("wrong: FAILED (ok): wrong output: line 1 is \"6\", expected \"7\"\n"));
  CHECK_THAT(text.out, Catch::Contains("short: FAILED (exit): exited with code 2\n"));
}

TEST_CASE("--cases: a correct answer longer than --output-limit passes; a longer wrong one says it was cut",
          "[integration][cases]") {
  std::string expected;
  for (int i = 0; i < 30000; ++i) expected += std::to_string(i) + "\n";  // 168890 bytes
  const std::string cases =
      nlohmann::json({{"name", "long"}, {"stdin", "30000"}, {"expected_stdout", expected}}).dump() + "\n" +
      nlohmann::json({{"name", "longer"}, {"stdin", "90000"}, {"expected_stdout", "0"}}).dump() + "\n";
  std::string file = WriteTemp("long-cases.jsonl", cases);
  auto raw = RunNsboxRaw({"run", "--json", "--output-limit", "64K", "--lang", "python", "--code",
                          "print('\\n'.join(map(str, range(int(input())))))", "--cases", file});
  ::unlink(file.c_str());
  INFO(raw.out << raw.err);
  auto r = nlohmann::json::parse(raw.out);
  REQUIRE(r["cases"].size() == 2);
  CHECK(r["cases"][0]["passed"] == true);
  CHECK(r["cases"][0]["stdout_truncated"] == false);
  CHECK(r["cases"][1]["passed"] == false);
  CHECK(r["cases"][1]["stdout_truncated"] == true);
  CHECK_THAT(r["cases"][1]["reason"].get<std::string>(),
             Catch::EndsWith("; its stdout (528890 bytes) was cut at the case's output limit of 65538 bytes, so it "
                             "does not match (--output-limit, or twice expected_stdout and 64 KiB when that is more)"));
}

TEST_CASE("--cases and batch: a case's stdin is a file with its size, as a judge gives it", "[integration][cases]") {
  // PyRival-style fast input reads os.fstat(0).st_size bytes: from a pipe that is 0, and the answer was wrong.
  const std::string code =
      "import os, io\ninput = io.BytesIO(os.read(0, os.fstat(0).st_size)).readline\n"
      "print(int(input()) * 2)\n";
  std::string file = WriteTemp("fast-input.jsonl", "{\"stdin\": \"21\\n\", \"expected_stdout\": \"42\"}\n");
  auto raw = RunNsboxRaw({"run", "--json", "--lang", "python", "--code", code, "--cases", file});
  ::unlink(file.c_str());
  INFO(raw.out << raw.err);
  auto r = nlohmann::json::parse(raw.out);
  CHECK(r["summary"]["passed"] == 1);
  auto results = RunBatch({{{"id", "fast"}, {"language", "python"}, {"code", code}, {"stdin", "5\n"}}});
  CHECK(results["fast"]["stdout"] == "10\n");
}

TEST_CASE("--cases: a compile error makes every case compile_error, exit 123", "[integration][cases]") {
  auto r = RunCasesJson(
      "int main(void) { return nope; }",
      "{\"stdin\": \"1\", \"expected_stdout\": \"2\"}\n{\"stdin\": \"2\", \"expected_stdout\": \"4\"}\n", 123);
  CHECK(r["status"] == "compile_error");
  CHECK(r["stderr"].get<std::string>().find("nope") != std::string::npos);
  REQUIRE(r["cases"].size() == 2);
  for (const auto& c : r["cases"]) {
    CHECK(c["status"] == "compile_error");
    CHECK(c["passed"] == false);
    CHECK_FALSE(c.contains("stdout"));  // never ran
  }
  CHECK(r["summary"]["passed"] == 0);
}

TEST_CASE("--cases: a malformed cases file is one line naming the line, exit 2, nothing run", "[integration][cases]") {
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"{\"stdin\": \"1\", \"expected_stdout\": \"2\"}\nnot json\n", "line 2: not a JSON object: "},
           {"{\"stdin\": \"1\", \"expected_stdout\": \"2\"\n", "line 1: not a JSON object: parse error at line 1, column 38"},
           {"{\"stdin\": \"1\"}\n", "line 1: no \"expected_stdout\""},
           {"{\"stdin\": 3, \"expected_stdout\": \"6\"}\n", "line 1: \"stdin\" must be a string"},
           {"{\"expected\": \"6\"}\n", "line 1: unknown field \"expected\""},
           {"\n", "no cases"}}) {
    std::string file = WriteTemp("bad.jsonl", text);
    auto raw = RunNsboxRaw({"run", "--lang", "c", "--code", kDoubler, "--cases", file});
    ::unlink(file.c_str());
    INFO(text << " -> " << raw.err);
    CHECK(raw.exit_code == 2);
    CHECK(raw.out.empty());
    CHECK(raw.err.find(needle) != std::string::npos);
    CHECK(std::count(raw.err.begin(), raw.err.end(), '\n') == 1);
  }
  std::string big = WriteTemp("big.jsonl", std::string((16 << 20) + 1, ' '));
  auto raw = RunNsboxRaw({"run", "--lang", "c", "--code", kDoubler, "--cases", big});
  ::unlink(big.c_str());
  CHECK(raw.exit_code == 2);
  CHECK(raw.err.find("larger than") != std::string::npos);

  // With --json, stdout still holds exactly one object (the refusal), as for any option refused before a run.
  std::string bad = WriteTemp("bad-json.jsonl", "{\"stdin\": \"1\"}\n");
  auto as_json = RunNsboxRaw({"run", "--json", "--lang", "python", "--code", "print(1)", "--cases", bad});
  ::unlink(bad.c_str());
  CHECK(as_json.exit_code == 2);
  auto refusal = nlohmann::json::parse(as_json.out);
  CHECK(refusal["status"] == "setup_error");
  CHECK(refusal["reason"].get<std::string>().find("no \"expected_stdout\"") != std::string::npos);

  // The program and the cases cannot both come from nsbox's standard input.
  SpawnOptions cases_on_stdin;
  cases_on_stdin.stdin_data = "{\"stdin\": \"1\", \"expected_stdout\": \"1\"}\n";
  auto both = RunNsboxRaw({"run", "--lang", "python", "--file", "-", "--cases", "-"}, cases_on_stdin);
  // Options that cannot go together: a bad command line (125), not a bad cases file (2).
  CHECK(both.exit_code == 125);
  CHECK(both.err == "nsbox run: --file - and --cases - both want nsbox's standard input\n");
  auto with_stdin = RunNsboxRaw({"run", "--stdin", "/dev/null", "--cases", "-", "--", "/bin/cat"}, cases_on_stdin);
  CHECK(with_stdin.exit_code == 125);
  CHECK(with_stdin.err == "nsbox run: --cases gives each case its stdin: no --stdin\n");
}

TEST_CASE("--cases: a program that removes its own file fails the later cases, it is not nsbox's setup error",
          "[integration][cases]") {
  // It made every case after the first a setup_error, unjudged: a farm that retries or excludes infrastructure
  // errors could be steered that way.
  constexpr const char* kSelfRemoving =
      "#include <stdio.h>\n#include <unistd.h>\nint main(void){ long x; if (scanf(\"%ld\", &x) != 1) return 2;"
      " char p[512]; ssize_t n = readlink(\"/proc/self/exe\", p, sizeof p - 1); if (n > 0) { p[n] = 0; unlink(p); }"
      " printf(\"%ld\\n\", x * 2); return 0; }\n";
  auto report = RunCasesJson(kSelfRemoving,
                             "{\"stdin\": \"1\", \"expected_stdout\": \"2\"}\n"
                             "{\"stdin\": \"2\", \"expected_stdout\": \"4\"}\n"
                             "{\"stdin\": \"3\", \"expected_stdout\": \"6\"}\n",
                             1);
  INFO(report.dump());
  CHECK(report["status"] == "ok");
  CHECK(report["summary"]["passed"] == 1);
  CHECK(report["summary"]["total"] == 3);
  REQUIRE(report["cases"].size() == 3);
  CHECK(report["cases"][0]["passed"] == true);
  for (int i : {1, 2}) {
    CHECK(report["cases"][i]["status"] == "exit");
    CHECK(report["cases"][i]["exit_code"] == 127);
    CHECK_THAT(report["cases"][i]["reason"].get<std::string>(),
               Catch::EndsWith("could not be started (ENOENT): an earlier case's run removed or changed it"));
  }
}

TEST_CASE("--cases: what a case leaves running, detached too, ends with it and does not reach the next case",
          "[integration][cases]") {
  // The first case starts a spinner in a session of its own and exits 0; the next reports whether it still runs.
  const std::string program =
      "read what\n"
      "if [ \"$what\" = start ]; then setsid sh -c 'echo $$ > /tmp/spinner.pid; while :; do :; done' "
      "</dev/null >/dev/null 2>&1 & sleep 0.3; echo started; exit 0; fi\n"
      "if kill -0 \"$(cat /tmp/spinner.pid)\" 2>/dev/null; then echo alive; else echo gone; fi\n";
  std::string file = WriteTemp("daemon-cases.jsonl",
                               "{\"stdin\": \"start\\n\", \"expected_stdout\": \"started\"}\n"
                               "{\"stdin\": \"check\\n\", \"expected_stdout\": \"gone\"}\n");
  auto raw = RunNsboxRaw({"run", "--json", "--timeout", "5s", "--lang", "bash", "--code", program, "--cases", file});
  ::unlink(file.c_str());
  INFO(raw.out << raw.err);
  CHECK(raw.exit_code == 0);
  auto report = nlohmann::json::parse(raw.out);
  CHECK(report["summary"]["passed"] == 2);
}

TEST_CASE("--cases: a compile that made no program is compile_error for every case, as without --cases",
          "[integration][cases]") {
  if (::access("/usr/bin/go", X_OK) != 0) {
    RecordSkip("integration", "Go library --cases", "the host has no /usr/bin/go (tools/setup --tests installs it)");
    return;
  }
  std::string file = WriteTemp("go-lib.jsonl",
                               "{\"stdin\": \"1\", \"expected_stdout\": \"2\"}\n"
                               "{\"stdin\": \"2\", \"expected_stdout\": \"4\"}\n");
  auto raw = RunNsboxRaw({"run", "--json", "--lang", "go", "--code", "package foo\nfunc F() {}\n", "--cases", file});
  ::unlink(file.c_str());
  INFO(raw.out << raw.err);
  CHECK(raw.exit_code == 123);
  auto report = nlohmann::json::parse(raw.out);
  CHECK(report["status"] == "compile_error");
  CHECK_THAT(report["reason"].get<std::string>(), Catch::StartsWith("compile step made no program"));
  CHECK(report["cases"][1]["status"] == "compile_error");
}

TEST_CASE("--cases: the report keeps 32M of the cases' output in all, then a short head of each",
          "[integration][cases]") {
  // The program decides how much it prints: 500 cases of 2 MiB took nsbox to 1 GB, outside every limit.
  std::string text;
  for (int i = 0; i < 40; ++i) text += "{\"stdin\": \"x\", \"expected_stdout\": \"x\"}\n";
  std::string file = WriteTemp("big-output.jsonl", text);
  auto raw = RunNsboxRaw({"run", "--json", "--output-limit", "1M", "--cases", file, "--", "/bin/sh", "-c",
                          "head -c 1048576 /dev/zero | tr '\\0' a; head -c 1048576 /dev/zero | tr '\\0' b >&2"});
  ::unlink(file.c_str());
  REQUIRE(raw.exit_code == 1);  // every case fails: its output is not "x"
  CHECK(raw.out.size() < (36u << 20));
  auto report = nlohmann::json::parse(raw.out);
  CHECK(report["summary"]["total"] == 40);
  CHECK(report["cases"][0]["stdout"].get<std::string>().size() == 1u << 20);
  CHECK(report["cases"][39]["stdout"].get<std::string>().size() == 1024);
  CHECK(report["cases"][39]["stdout_truncated"] == true);
  CHECK(report["cases"][39]["stdout_bytes"] == 1u << 20);  // what the program wrote, as counted
  CHECK(report["note"].get<std::string>().find("the output of 24 case(s) is cut to 1024 bytes") == 0);
}

TEST_CASE("--cases: a program that cannot start stops the cases with its exit code and says why",
          "[integration][cases]") {
  std::string file = WriteTemp("start.jsonl", "{\"stdin\": \"1\", \"expected_stdout\": \"1\"}\n"
                                              "{\"stdin\": \"2\", \"expected_stdout\": \"2\"}\n");
  auto raw = RunNsboxRaw({"run", "--cases", file, "--", "/no/such/program"});
  auto as_json = RunNsboxRaw({"run", "--json", "--cases", file, "--", "/no/such/program"});
  ::unlink(file.c_str());
  INFO(raw.out << raw.err);
  CHECK(raw.exit_code == 127);  // as the same run without --cases
  CHECK(raw.err.find("/no/such/program") != std::string::npos);
  CHECK(raw.err.find("ENOENT") != std::string::npos);
  auto report = nlohmann::json::parse(as_json.out);
  CHECK(as_json.exit_code == 127);
  CHECK(report["status"] == "setup_error");
  CHECK(report["summary"]["passed"] == 0);
}

TEST_CASE("--cases: a report nsbox cannot write is exit 125 with the reason on stderr", "[integration][cases]") {
  std::string file = WriteTemp("full.jsonl", "{\"stdin\": \"\", \"expected_stdout\": \"1\"}\n");
  for (bool json : {false, true}) {
    std::vector<std::string> args = {"/bin/sh", "-c", std::string("exec \"$0\" run ") + (json ? "--json " : "") +
                                                          "--lang python --code 'print(1)' --cases \"$1\" > /dev/full",
                                     NsboxBinary(), file};
    auto r = RunProcess(args);
    INFO(r.err);
    CHECK(r.exit_code == 125);
    CHECK(r.err == "nsbox: writing the report: No space left on device (ENOSPC)\n");
  }
  ::unlink(file.c_str());
}

TEST_CASE("batch: python and C jobs in one file; a C compile error is that job's own status", "[integration][cases]") {
  nlohmann::json c_job = {{"id", "c"}, {"language", "c"}, {"code", kDoubler}, {"stdin", "21\n"}};
  nlohmann::json bad_job = {{"id", "bad"}, {"language", "c"}, {"code", "int main(void) { return nope; }"}};
  nlohmann::json py_job = {{"id", "py"}, {"language", "python"}, {"code", "print(6 * 7)"}};
  auto results = RunBatch({py_job, c_job, bad_job});
  REQUIRE(results.size() == 3);
  CHECK(results["py"]["status"] == "ok");
  CHECK(results["py"]["stdout"] == "42\n");
  CHECK_FALSE(results["py"].contains("compile"));
  CHECK(results["c"]["status"] == "ok");
  CHECK(results["c"]["stdout"] == "42  \n");
  CHECK(results["c"]["compile"]["status"] == "ok");
  CHECK(results["bad"]["status"] == "compile_error");
  CHECK(results["bad"]["compile"]["status"] == "exit");
  CHECK(results["bad"]["stderr"].get<std::string>().find("nope") != std::string::npos);
}

TEST_CASE("batch: a C job's cases are judged after one compile; its compile error fails every case",
          "[integration][cases]") {
  nlohmann::json cases = nlohmann::json::array({{{"stdin", "4"}, {"expected_stdout", "8"}},
                                                {{"name", "wrong"}, {"stdin", "3"}, {"expected_stdout", "7"}},
                                                {{"name", "loop"}, {"stdin", "-1"}, {"expected_stdout", "0"}}});
  nlohmann::json c_job = {{"id", "c"}, {"language", "c"}, {"code", kDoubler}, {"timeout", "3s"}, {"cases", cases}};
  nlohmann::json bad_job = {
      {"id", "bad"}, {"language", "c"}, {"code", "int main(void) { return nope; }"}, {"cases", cases}};
  auto results = RunBatch({c_job, bad_job});
  REQUIRE(results.size() == 2);
  const nlohmann::json& c = results["c"];
  CHECK(c["status"] == "ok");
  CHECK(c["compile"]["status"] == "ok");
  CHECK(c["summary"] == nlohmann::json({{"passed", 1}, {"failed", 2}, {"total", 3}}));
  REQUIRE(c["cases"].size() == 3);
  CHECK(c["cases"][0]["name"] == "case 1");
  CHECK(c["cases"][0]["passed"] == true);
  CHECK(c["cases"][1]["stdout"] == "6  \n");
  CHECK(c["cases"][1]["passed"] == false);
  CHECK(c["cases"][2]["status"] == "timeout");
  CHECK_FALSE(c["cases"][0].contains("line"));  // a case of an array has no line of a file
  const nlohmann::json& bad = results["bad"];
  CHECK(bad["status"] == "compile_error");
  CHECK(bad["stderr"].get<std::string>().find("nope") != std::string::npos);
  CHECK(bad["summary"]["failed"] == 3);
  for (const auto& each : bad["cases"]) CHECK(each["status"] == "compile_error");
}

TEST_CASE("SIGTERM or SIGINT to nsbox kills a compiled run's step; --cases runs no case after it",
          "[integration][cases]") {
  // Each start of the program adds a line to /ready/started, then it waits for the signal.
  constexpr const char* kWaits =
      "#include <fcntl.h>\n#include <unistd.h>\nint main(void) { int fd = open(\"/ready/started\", "
      "O_WRONLY | O_CREAT | O_APPEND, 0666); write(fd, \"x\\n\", 2); close(fd); sleep(30); return 0; }\n";
  std::string cases = WriteTemp("stop.jsonl", "{\"expected_stdout\": \"\"}\n{\"expected_stdout\": \"\"}\n");
  for (auto [sig, with_cases] : {std::pair{SIGTERM, true}, std::pair{SIGINT, false}}) {
    TempDir ready;
    REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
    std::vector<std::string> argv = {NsboxBinary(), "run",   "--json", "--timeout", "20s",   "--bind",
                                     ready.path() + ":/ready", "--lang", "c",        "--code", kWaits};
    if (with_cases) argv.insert(argv.end(), {"--cases", cases});
    auto bg = StartProcess(argv);
    bool started = false;
    for (int i = 0; i < 1500 && !started; ++i) {
      started = std::filesystem::exists(ready.path() + "/started");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(started);
    ::kill(bg.pid, sig);
    int status = bg.Wait();
    INFO(bg.Out());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + sig);
    auto json = nlohmann::json::parse(bg.Out());  // one object, as for any run with --json
    CHECK(json["status"] == "killed");
    CHECK(json["reason"].get<std::string>().find(sig == SIGTERM ? "SIGTERM" : "SIGINT") != std::string::npos);
    std::ifstream lines(ready.path() + "/started");
    CHECK(std::string(std::istreambuf_iterator<char>(lines), {}) == "x\n");  // the second case never started
  }
  ::unlink(cases.c_str());
}

TEST_CASE("--cases: a case that ends past its time limit while nsbox was held up is a time-out, not passed",
          "[integration][cases]") {
  // nsbox stopped (Ctrl-Z, a scheduler's suspend) or starved while the program runs on past its limit: the end it sees
  // late is still past the deadline.
  std::string cases = WriteTemp("late.jsonl", "{\"expected_stdout\": \"done\"}\n");
  TempDir ready;
  REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
  auto bg = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "1s", "--bind", ready.path() + ":/ready",
                          "--cases", cases, "--", "/bin/sh", "-c", "touch /ready/started; sleep 2; echo done"});
  bool started = false;
  for (int i = 0; i < 1500 && !started; ++i) {
    started = std::filesystem::exists(ready.path() + "/started");
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(started);
  ::kill(bg.pid, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(2600));  // the program ends meanwhile, past its 1 s
  ::kill(bg.pid, SIGCONT);
  int status = bg.Wait();
  ::unlink(cases.c_str());
  INFO(bg.Out());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  auto json = nlohmann::json::parse(bg.Out());
  REQUIRE(json["cases"].size() == 1);
  CHECK(json["cases"][0]["status"] == "timeout");
  CHECK(json["cases"][0]["passed"] == false);
  CHECK(json["cases"][0]["wall_ms"].get<int64_t>() >= 1000);
}
