// Runtime tests: the subprocess helper, the local runtime, the nsbox runtime's session lifecycle and one-shot fallback
// (against a stand-in nsbox and the real one), and the docker runtime.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "sandbox/base/fs.h"
#include "src/runtime/docker_runtime.h"
#include "src/runtime/local_runtime.h"
#include "src/runtime/nsbox_runtime.h"
#include "src/runtime/runtime_factory.h"
#include "src/runtime/subprocess.h"
#include "tests/agent/agent_test_support.h"

using namespace nsbox;
using namespace nsbox::runtime;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Alive: exists and is not a zombie, after giving a killed process up to 2 s to die and be reaped.
bool ProcessAlive(pid_t pid) {
  for (int i = 0; i < 40; ++i) {
    auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    if (!stat.ok()) return false;
    size_t paren = stat->rfind(')');
    if (paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z') return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A temporary file path, removed at scope end.
struct TempPath {
  std::string path;
  TempPath() {
    char templ[] = "/tmp/nsbox-agent-test-XXXXXX";
    int fd = mkstemp(templ);
    REQUIRE(fd >= 0);
    close(fd);
    path = templ;
  }
  ~TempPath() { unlink(path.c_str()); }
};

// Sets (or, with nullopt, unsets) an environment variable for the scope of a test, then restores it.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> saved;
  ScopedEnv(const std::string& n, const std::optional<std::string>& value) : name(n) {
    if (const char* old = getenv(n.c_str())) saved = old;
    if (value) setenv(n.c_str(), value->c_str(), 1);
    else unsetenv(n.c_str());
  }
  ~ScopedEnv() {
    if (saved) setenv(name.c_str(), saved->c_str(), 1);
    else unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("subprocess gets its stdin and reports exit code and both streams") {
  SubprocessSpec spec;
  spec.argv = {"/bin/sh", "-c", "cat; echo err >&2; exit 3"};
  spec.stdin_data = std::string(300000, 'q');  // more than a pipe buffer
  auto out = RunSubprocess(spec);
  REQUIRE(out.ok());
  CHECK(out->exited);
  CHECK(out->exit_code == 3);
  CHECK(out->stdout_bytes == 300000);
  CHECK(out->stderr_data == "err\n");
}

TEST_CASE("subprocess deadline kills the whole process group, background children included") {
  TempPath pidfile;
  SubprocessSpec spec;
  spec.argv = {"/bin/sh", "-c", "sleep 100 & echo $! > " + pidfile.path + "; wait"};
  spec.deadline = Clock::now() + 3s;  // room for the shell to write the pid file on a loaded machine
  auto start = Clock::now();
  auto out = RunSubprocess(spec);
  REQUIRE(out.ok());
  CHECK(out->deadline_passed);
  CHECK(Clock::now() - start < 60s);  // a hang watchdog: a kill that missed the group waited for the 100 s sleep
  pid_t child = std::stoi(ReadFile(pidfile.path).value());
  CHECK_FALSE(ProcessAlive(child));
}

TEST_CASE("a background process holding the pipe does not hang the caller after the program exits") {
  TempPath pidfile;
  SubprocessSpec spec;
  spec.argv = {"/bin/sh", "-c", "sleep 100 & echo $! > " + pidfile.path + "; echo done"};
  auto start = Clock::now();
  auto out = RunSubprocess(spec);
  REQUIRE(out.ok());
  CHECK(out->exit_code == 0);
  CHECK(out->stdout_data == "done\n");
  CHECK(Clock::now() - start < 60s);  // a hang watchdog: not the background sleep's 100 s
  CHECK_FALSE(ProcessAlive(std::stoi(ReadFile(pidfile.path).value())));
}

TEST_CASE("subprocess hands stdout lines to on_stdout_line as they come; lines it declines are captured") {
  TempPath gate;
  unlink(gate.path.c_str());
  SubprocessSpec spec;
  // "take" lines are the callback's; the program goes on only once the callback has seen the first one.
  const std::string wait = "i=0; while [ ! -e " + gate.path + " ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done";
  spec.argv = {"/bin/sh", "-c",
               "echo take 1; echo keep; " + wait + "; [ -e " + gate.path +
                   " ] && echo take 2 || echo 'no gate'; printf '%0300d\\n' 0; printf 'take unfinished'"};
  spec.output_limit_bytes = 200;
  std::vector<std::string> taken;
  spec.on_stdout_line = [&](std::string_view line) {
    if (!line.starts_with("take")) return false;
    taken.emplace_back(line);
    if (taken.size() == 1) std::ofstream(gate.path) << "go";
    return true;
  };
  auto out = RunSubprocess(spec);
  REQUIRE(out.ok());
  CHECK(out->exit_code == 0);
  CHECK(taken == std::vector<std::string>{"take 1", "take 2"});
  // The overlong line (300 zeros) is captured unseen, and so is the unfinished last line; the cap holds.
  CHECK(out->stdout_truncated);
  CHECK(out->stdout_bytes == 5 + 301 + 15);
  CHECK(out->stdout_data.starts_with("keep\n000"));
  CHECK(out->stdout_data.ends_with("0\ntake unfinished"));
}

TEST_CASE("local runtime runs python, bash, sh and node and reports their output") {
  LocalRuntime rt;
  ExecuteOptions o;
  auto py = rt.execute("python", "import sys\nprint(2**100)\nsys.exit(4)", o);
  REQUIRE(py.ok());
  CHECK(py->status == RunStatus::kExit);
  CHECK(py->exit_code == 4);
  CHECK(py->stdout_data == "1267650600228229401496703205376\n");
  auto sh = rt.execute("sh", "echo $((6*7))", o);
  REQUIRE(sh.ok());
  CHECK(sh->status == RunStatus::kOk);
  CHECK(sh->stdout_data == "42\n");
  CHECK(rt.execute("bash", "echo ${BASH_VERSION:+bash}", o)->stdout_data == "bash\n");
  if (!FindExecutable("node").empty()) CHECK(rt.execute("node", "console.log(1+1)", o)->stdout_data == "2\n");
  auto bad = rt.execute("cobol", "x", o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("unknown language \"cobol\"") != std::string::npos);
}

TEST_CASE("local runtime keeps files between calls of a conversation and removes them at close") {
  LocalRuntime rt;
  ExecuteOptions o;
  REQUIRE(rt.execute("sh", "echo kept > note.txt; pwd", o).ok());
  auto second = rt.execute("sh", "cat note.txt; pwd", o);
  REQUIRE(second.ok());
  CHECK(second->stdout_data.rfind("kept\n", 0) == 0);
  std::string dir = second->stdout_data.substr(5);
  dir.pop_back();
  CHECK(PathExists(dir));
  rt.close();
  CHECK_FALSE(PathExists(dir));
}

TEST_CASE("local runtime time-out ends an infinite loop with status timeout") {
  LocalRuntime rt;
  ExecuteOptions o;
  o.timeout = 3s;
  auto r = rt.execute("python", "print('started', flush=True)\nwhile True: pass", o);
  REQUIRE(r.ok());
  CHECK(r->status == RunStatus::kTimeout);
  CHECK(r->reason == "wall-clock limit of 3000 ms reached");
  CHECK(r->stdout_data == "started\n");
}

TEST_CASE("local runtime honours the caller's deadline when it is the tighter limit") {
  LocalRuntime rt;
  ExecuteOptions o;
  o.timeout = 60s;
  o.deadline = Clock::now() + 500ms;
  auto r = rt.execute("sh", "sleep 30", o);
  REQUIRE(r.ok());
  CHECK(r->status == RunStatus::kTimeout);
  CHECK(r->reason == "the caller's deadline passed");
  CHECK(r->wall_ms < 20000);  // a watchdog: a kill that failed would wait for the program's 30 s
}

TEST_CASE("local runtime stops at once when cancelled from another thread") {
  LocalRuntime rt;
  std::atomic<bool> cancel{false};
  ExecuteOptions o;
  o.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);
    cancel = true;
  });
  auto r = rt.execute("sh", "sleep 30", o);
  canceller.join();
  REQUIRE(r.ok());
  CHECK(r->status == RunStatus::kTimeout);
  CHECK(r->reason == "cancelled");
  CHECK(r->wall_ms < 20000);  // a watchdog: a kill that failed would wait for the program's 30 s
}

TEST_CASE("local runtime output limit keeps head and tail of a flood") {
  LocalRuntime rt;
  ExecuteOptions o;
  o.output_limit_bytes = 1000;
  auto r = rt.execute("python", "for i in range(100000): print(i)", o);
  REQUIRE(r.ok());
  CHECK(r->status == RunStatus::kOk);
  CHECK(r->stdout_truncated);
  CHECK(r->stdout_bytes == 588890);
  CHECK(r->stdout_data.rfind("0\n1\n2\n", 0) == 0);
  CHECK(r->stdout_data.find("99999\n") == r->stdout_data.size() - 6);
  CHECK(r->stdout_data.size() < 1100);
}

TEST_CASE("nsbox runtime argv follows the CLI contract of sessions and of run") {
  auto exec = NsboxRuntime::ExecArgv("/bin/nsbox", "s1", {"--network", "none"}, "python", 1500ms, 4096, true);
  CHECK(exec == std::vector<std::string>{"/bin/nsbox", "exec", "s1", "--json", "--timeout", "1500ms", "--output-limit",
                                         "4096", "--lang", "python", "--file", "-", "--repl"});
  auto streamed = NsboxRuntime::ExecArgv("/bin/nsbox", "s1", {}, "sh", 1500ms, 4096, false, true);
  CHECK(streamed.back() == "--stream");
  auto capped = NsboxRuntime::ExecArgv("/bin/nsbox", "", {}, "c", 1500ms, 4096, false, false, 2000ms);
  CHECK(std::vector<std::string>(capped.end() - 2, capped.end()) ==
        std::vector<std::string>{"--compile-timeout", "2000ms"});
  auto run = NsboxRuntime::ExecArgv("/bin/nsbox", "", {"--network", "none"}, "bash", 2000ms, 100, true);
  CHECK(run == std::vector<std::string>{"/bin/nsbox", "run", "--network", "none", "--json", "--timeout", "2000ms",
                                        "--output-limit", "100", "--lang", "bash", "--file", "-"});
  CHECK(NsboxRuntime::LooksLikeUnknownSubcommand("The following argument was not expected: session\n"));
  CHECK(NsboxRuntime::LooksLikeUnknownSubcommand("nsbox: A subcommand is required\n"));
  CHECK_FALSE(NsboxRuntime::LooksLikeUnknownSubcommand("mkdir(/run/nsbox): Permission denied (EACCES)"));
  // A bad option of a binary that has sessions is not a binary without them.
  CHECK_FALSE(NsboxRuntime::LooksLikeUnknownSubcommand("nsbox: The following argument was not expected: --bogus\n"));
  CHECK_FALSE(NsboxRuntime::LooksLikeUnknownSubcommand("The following argument was not expected: --session-dir\n"));
  CHECK(NsboxRuntime::LooksLikeUnknownSubcommand("error: unrecognized arguments: session create\n"));
}

TEST_CASE("nsbox runtime makes one session per conversation, execs in it, and removes it when closed") {
  TempPath log;
  ScopedEnv mode("FAKE_NSBOX_MODE", "sessions");
  ScopedEnv log_env("FAKE_NSBOX_LOG", log.path);
  NsboxRuntimeOptions options;
  options.nsbox_bin = testing::SourcePath("tests/agent/fake_nsbox.py");
  options.max_lifetime = 120s;
  std::string sid;
  {
    NsboxRuntime rt(options);
    CHECK(ReadLines(log.path).empty());  // nothing is created before the first call
    ExecuteOptions o;
    auto first = rt.execute("python", "print(1)", o);
    REQUIRE(first.ok());
    CHECK(first->stdout_data == "1\n");
    CHECK(GetExtra(*first, "runtime") == "nsbox-session");
    REQUIRE(rt.execute("sh", "echo 2", o).ok());
    sid = rt.session_id();
    CHECK_FALSE(sid.empty());
  }  // the destructor ends the session
  auto lines = ReadLines(log.path);
  REQUIRE(lines.size() == 4);
  // The session ends with this process (--end-with-pid), whatever way the conversation ends.
  CHECK(lines[0] ==
        "create " + sid + " --json --end-with-pid " + std::to_string(::getpid()) + " --max-lifetime 120000ms");
  CHECK(lines[1] == "exec " + sid);
  CHECK(lines[2] == "exec " + sid);
  CHECK(lines[3] == "rm " + sid);
}

// `echo built and ran` as language c through the fake nsbox, whose compile step takes `compile_seconds`, with a 1 s
// program time-out and a 1 s set-up grace.
auto RunCompiledThroughFake(const char* compile_seconds,
                            std::optional<std::chrono::steady_clock::time_point> deadline) {
  ScopedEnv compile("FAKE_NSBOX_COMPILE_SECONDS", compile_seconds);
  NsboxRuntimeOptions options;
  options.nsbox_bin = testing::SourcePath("tests/agent/fake_nsbox.py");
  options.setup_grace = 1s;
  NsboxRuntime rt(options);
  ExecuteOptions o;
  o.timeout = 1s;
  o.deadline = deadline;
  return rt.execute("c", "echo built and ran", o);
}

TEST_CASE("nsbox runtime waits for a compiled language's build as well as for the program") {
  // The call's timeout is the program's; the build before it has the language's own compile time-out. nsbox was
  // killed at timeout + setup grace, in the middle of a long compile, and the result was lost.
  auto r = RunCompiledThroughFake("2.5", std::nullopt);
  REQUIRE(r.ok());
  CHECK(r->status == RunStatus::kOk);
  CHECK(r->stdout_data == "built and ran\n");
}

TEST_CASE("nsbox runtime keeps the caller's deadline over a compiled language's build") {
  auto started = std::chrono::steady_clock::now();
  auto r = RunCompiledThroughFake("30", started + 1s);
  REQUIRE(r.ok());
  CHECK(r->status == RunStatus::kTimeout);
  CHECK(std::chrono::steady_clock::now() - started < 20s);  // not the build's 30 s
}

TEST_CASE("nsbox runtime falls back to one-shot nsbox run when this nsbox has no sessions") {
  TempPath log;
  ScopedEnv mode("FAKE_NSBOX_MODE", "no-sessions");
  ScopedEnv log_env("FAKE_NSBOX_LOG", log.path);
  NsboxRuntimeOptions options;
  options.nsbox_bin = testing::SourcePath("tests/agent/fake_nsbox.py");
  std::vector<std::string> notes;
  options.log = [&](const std::string& line) { notes.push_back(line); };
  NsboxRuntime rt(options);
  ExecuteOptions o;
  auto r = rt.execute("python", "print(6*7)", o);
  REQUIRE(r.ok());
  CHECK(r->stdout_data == "42\n");
  CHECK(rt.one_shot());
  CHECK(GetExtra(*r, "runtime") == "nsbox-run");
  REQUIRE(rt.execute("python", "print(1)", o).ok());
  rt.close();
  CHECK(ReadLines(log.path) == std::vector<std::string>{"run", "run"});
  REQUIRE_FALSE(notes.empty());
  CHECK(notes[0].find("has no sessions") != std::string::npos);
}

TEST_CASE("nsbox runtime reports a failing session create instead of silently running elsewhere") {
  ScopedEnv mode("FAKE_NSBOX_MODE", "broken");
  NsboxRuntimeOptions options;
  options.nsbox_bin = testing::SourcePath("tests/agent/fake_nsbox.py");
  NsboxRuntime rt(options);
  auto r = rt.execute("python", "print(1)", ExecuteOptions{});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("nsbox session create failed (exit 125): nsbox: session create: mkdir(/run/nsbox)") !=
        std::string::npos);
}

TEST_CASE("nsbox runtime binary defaults to NSBOX_BIN, else this program") {
  {
    ScopedEnv bin("NSBOX_BIN", "/opt/nsbox");
    CHECK(NsboxRuntime().nsbox_bin() == "/opt/nsbox");
  }
  ScopedEnv no_bin("NSBOX_BIN", std::nullopt);
  std::string self = NsboxRuntime().nsbox_bin();
  CHECK(self.find("agent_tests") != std::string::npos);
}

TEST_CASE("nsbox runtime runs code in a real nsbox sandbox, and times it out") {
  if (auto why = testing::NsboxRuntimeUnavailable()) {
    testing::NoteSkip("nsbox runtime runs code in a real nsbox sandbox, and times it out", *why);
    return;
  }
  NsboxRuntime rt;
  ExecuteOptions o;
  auto r = rt.execute("python", "import os\nprint(os.getuid() != 0, os.getcwd())", o);
  REQUIRE(r.ok());
  CHECK(r->status == RunStatus::kOk);
  CHECK(r->stdout_data == "True /workspace\n");
  o.timeout = 1s;
  auto start = Clock::now();
  auto loop = rt.execute("python", "while True: pass", o);
  REQUIRE(loop.ok());
  CHECK(loop->status == RunStatus::kTimeout);
  CHECK(Clock::now() - start < 20s);  // its 1 s, not the default 30 s (the loop never ends by itself)
}

TEST_CASE("nsbox runtime passes output to on_output while the program runs, then the whole result") {
  if (auto why = testing::NsboxRuntimeUnavailable()) {
    testing::NoteSkip("nsbox runtime passes output to on_output while the program runs, then the whole result", *why);
    return;
  }
  NsboxRuntime rt;
  ExecuteOptions o;
  REQUIRE(rt.execute("sh", "true", o).ok());  // the session
  // The program waits for a go-ahead that the callback gives on the first chunk (a second exec in the session).
  std::vector<std::pair<int, std::string>> chunks;
  o.on_output = [&](int stream, std::string_view text) {
    if (chunks.empty()) {
      SubprocessSpec touch;
      touch.argv = {rt.nsbox_bin(), "exec", rt.session_id(), "--", "/bin/touch", "/workspace/go"};
      touch.env = InheritedEnvironment();
      CHECK(RunSubprocess(touch).ok());
    }
    chunks.emplace_back(stream, std::string(text));
  };
  auto r = rt.execute("python",
                      "import os, sys, time\nprint(1, flush=True)\n"
                      "for _ in range(100):\n    if os.path.exists('/workspace/go'): break\n    time.sleep(0.1)\n"
                      "print('go' if os.path.exists('/workspace/go') else 'no go', file=sys.stderr)\nprint(3)",
                      o);
  REQUIRE(r.ok());
  CHECK(r->status == RunStatus::kOk);
  CHECK(r->stdout_data == "1\n3\n");
  CHECK(r->stderr_data == "go\n");
  std::string streamed[3];
  for (const auto& [stream, text] : chunks) streamed[stream] += text;
  CHECK(streamed[1] == "1\n3\n");
  CHECK(streamed[2] == "go\n");
  REQUIRE_FALSE(chunks.empty());
  CHECK(chunks.front().first == 1);  // how a program's writes fall into chunks is the program's (print: "1", "\n")
  CHECK(chunks.front().second.starts_with("1"));
}

TEST_CASE("docker runtime argv isolates: no network, capped memory, cpus and pids, read-only, non-root, no caps") {
  DockerRuntimeOptions o;
  auto argv = DockerRuntime::RunArgv(o, "c1", "python");
  REQUIRE(argv.ok());
  std::string joined;
  for (const auto& a : *argv) joined += a + " ";
  CHECK(
      joined.find(" run --rm -i --name c1 --network none --memory 512m --memory-swap 512m --cpus 1 --pids-limit 256 "
                  "--read-only --tmpfs /tmp:rw,nosuid,nodev,size=64m --workdir /tmp --user 65534:65534 --cap-drop ALL "
                  "--security-opt no-new-privileges --env HOME=/tmp python:3-slim python3 - ") != std::string::npos);
  CHECK((*DockerRuntime::RunArgv(o, "c2", "bash")).back() == "-s");
  CHECK_FALSE(DockerRuntime::RunArgv(o, "c3", "cobol").ok());
}

TEST_CASE("docker runtime runs python in a container when a Docker engine is there") {
  Status engine = DockerRuntime::EngineAvailable();
  if (!engine.ok()) {
    testing::NoteSkip("docker runtime runs python in a container when a Docker engine is there", engine.message());
    auto made = MakeRuntime("docker", RuntimeConfig{});
    REQUIRE_FALSE(made.ok());  // and asking for it says why
    CHECK(made.status().message().find("the docker runtime needs a Docker engine") != std::string::npos);
    return;
  }
  DockerRuntime rt;
  ExecuteOptions o;
  o.timeout = 120s;
  auto r = rt.execute("python", "import os\nprint(os.getuid())", o);
  REQUIRE(r.ok());
  CHECK(r->stdout_data == "65534\n");
}

TEST_CASE("runtimes are made by name and unknown names are refused") {
  auto local = MakeRuntime("local", RuntimeConfig{});
  REQUIRE(local.ok());
  CHECK((*local)->name() == "local");
  auto nsbox_rt = MakeRuntime("nsbox", RuntimeConfig{});
  REQUIRE(nsbox_rt.ok());
  CHECK((*nsbox_rt)->name() == "nsbox");
  CHECK(MakeRuntime("vm", RuntimeConfig{}).status().message() == "unknown runtime \"vm\" (choose nsbox|local|docker)");
}

TEST_CASE("concurrent calls share one session, and each local call has its own script") {
  TempPath log;
  ScopedEnv mode("FAKE_NSBOX_MODE", "sessions");
  ScopedEnv log_env("FAKE_NSBOX_LOG", log.path);
  NsboxRuntimeOptions options;
  options.nsbox_bin = testing::SourcePath("tests/agent/fake_nsbox.py");
  NsboxRuntime nsbox_rt(options);
  LocalRuntime local_rt;
  std::vector<std::string> nsbox_out(4), local_out(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      std::string code = "import time\ntime.sleep(0.2)\nprint(" + std::to_string(i) + ")";
      auto a = nsbox_rt.execute("python", code, ExecuteOptions{});
      auto b = local_rt.execute("python", code, ExecuteOptions{});
      if (a.ok()) nsbox_out[i] = a->stdout_data;
      if (b.ok()) local_out[i] = b->stdout_data;
    });
  for (auto& t : threads) t.join();
  nsbox_rt.close();
  for (int i = 0; i < 4; ++i) {
    CHECK(nsbox_out[i] == std::to_string(i) + "\n");
    CHECK(local_out[i] == std::to_string(i) + "\n");
  }
  auto lines = ReadLines(log.path);
  CHECK(std::count_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("create ", 0) == 0; }) ==
        1);
  CHECK(std::count_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("exec ", 0) == 0; }) == 4);
  CHECK(lines.back().rfind("rm ", 0) == 0);
}
