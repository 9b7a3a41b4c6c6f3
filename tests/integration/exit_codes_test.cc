// Integration: exit codes and signals: 0, N, 128+N, 124 on time-out, 127/126 program not found/not executable, 125 on
// setup errors; the JSON status and fields that go with each; signals sent to nsbox reach the program.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
using namespace std::chrono_literals;

TEST_CASE("exit 0 is status ok and nsbox exits 0", "[integration][exit]") {
  auto raw = RunNsboxRaw({"run", "--", "/bin/true"});
  CHECK(raw.exit_code == 0);
  auto r = RunNsboxJson({"--", "/bin/true"});
  INFO(r.Describe());
  CHECK(r.process.exit_code == 0);
  CHECK(r.status() == "ok");
  CHECK(r.exit_code() == 0);
  CHECK(r.json.value("signal", -1) == 0);
}

TEST_CASE("exit N is status exit with exit_code N, and nsbox exits N", "[integration][exit]") {
  auto raw = RunNsboxRaw({"run", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 42"});
  CHECK(raw.exit_code == 42);
  CHECK(raw.out == "out\n");
  CHECK(raw.err == "err\n");
  auto r = RunNsboxJson({"--", "/bin/sh", "-c", "exit 3"});
  INFO(r.Describe());
  CHECK(r.process.exit_code == 3);  // with --json too, nsbox exits with the program's code
  CHECK(r.status() == "exit");
  CHECK(r.exit_code() == 3);
  CHECK(r.json.value("reason", "") == "exited with code 3");
}

TEST_CASE("death by signal N is status signal and nsbox exits 128+N", "[integration][exit]") {
  auto raw = RunNsboxRaw({"run", "--", "/bin/sh", "-c", "kill -TERM $$"});
  CHECK(raw.exit_code == 128 + SIGTERM);
  CHECK(raw.err.find("signal") != std::string::npos);
  auto r = RunNsboxJson({"--", "/bin/sh", "-c", "kill -KILL $$"});
  INFO(r.Describe());
  CHECK(r.status() == "signal");
  CHECK(r.json.value("signal", 0) == SIGKILL);
  CHECK(r.json.value("reason", "") == "killed by signal 9 (SIGKILL)");
}

TEST_CASE("a time-out is status timeout, nsbox exits 124, and ends the program", "[integration][exit]") {
  // The program would run 60 s: the bounds below tell the time-out's end from the program's own, with room for a
  // loaded machine (how close to the limit a run ends is a figure for tools/bench, not a test).
  auto raw = RunNsboxRaw({"run", "--timeout", "300ms", "--", "/bin/sleep", "60"});
  CHECK(raw.exit_code == 124);
  CHECK(raw.elapsed < 30s);
  auto r = RunNsboxJson({"--timeout", "500ms", "--", "/bin/sleep", "60"});
  INFO(r.Describe());
  CHECK(r.status() == "timeout");
  CHECK(r.json.value("wall_ms", 0) >= 500);
  CHECK(r.json.value("wall_ms", 0) < 30000);
  CHECK(r.json.value("reason", "").find("500 ms") != std::string::npos);
}

TEST_CASE("a program not found exits 127 and one that cannot be executed 126 (Docker's convention)",
          "[integration][exit]") {
  auto raw = RunNsboxRaw({"run", "--", "/nonexistent/program"});
  CHECK(raw.exit_code == 127);
  auto r = RunNsboxJson({"--", "/nonexistent/program"});
  INFO(r.Describe());
  CHECK(r.process.exit_code == 127);
  CHECK(r.status() == "setup_error");  // nothing of it ran
  CHECK(r.json.value("exec_errno", 0) == ENOENT);
  CHECK(r.json.value("reason", "").find("execve(/nonexistent/program)") != std::string::npos);
  CHECK(r.json.value("reason", "").find("ENOENT") != std::string::npos);
  auto not_exec = RunNsboxJson({"--", "/etc/passwd"});
  CHECK(not_exec.status() == "setup_error");
  CHECK(not_exec.process.exit_code == 126);
  CHECK(not_exec.json.value("reason", "").find("EACCES") != std::string::npos);
  auto directory = RunNsboxRaw({"run", "--", "/etc"});
  CHECK(directory.exit_code == 126);
  // nsbox's own failures keep 125.
  CHECK(RunNsboxRaw({"run", "--memory", "lots", "--", "/bin/true"}).exit_code == 125);
  CHECK(RunNsboxRaw({"run", "--workdir", "/nonexistent-dir", "--", "/bin/true"}).exit_code == 125);
}

TEST_CASE("a command found through PATH runs; one that is not found exits 127", "[integration][exit]") {
  auto r = RunNsboxJson({"--", "echo", "hi"});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "hi\n");
  auto missing = RunNsboxJson({"--", "no-such-command-anywhere"});
  CHECK(missing.status() == "setup_error");
  CHECK(missing.process.exit_code == 127);
}

TEST_CASE("SIGTERM sent to nsbox reaches the program, whose handler runs", "[integration][exit]") {
  // The program says it is ready (handler installed) through a file in a bound directory.
  TempDir ready;
  REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
  auto bg = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "20s", "--bind", ready.path() + ":/ready", "--",
                          "/usr/bin/python3", "-c",
                          "import signal, sys, time\n"
                          "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(7)))\n"
                          "print('ready', flush=True)\nopen('/ready/ok', 'w').close()\ntime.sleep(30)"});
  bool is_ready = false;
  for (int i = 0; i < 500 && !is_ready; ++i) {
    is_ready = std::filesystem::exists(ready.path() + "/ok");
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(is_ready);
  ::kill(bg.pid, SIGTERM);
  int status = bg.Wait();
  auto json = nlohmann::json::parse(bg.Out(), nullptr, false);
  INFO(bg.Out());
  CHECK(WIFEXITED(status));
  CHECK(json.value("status", "") == "exit");
  CHECK(json.value("exit_code", 0) == 7);
  CHECK(json.value("stdout", "") == "ready\ngot TERM\n");
}

TEST_CASE("SIGINT sent to nsbox reaches the program's process group, as a terminal's Ctrl-C would",
          "[integration][exit]") {
  // The shell waits for sleep: signalled alone, it would only act once sleep ended, at the time-out.
  TempDir ready;
  REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
  auto bg = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "20s", "--bind", ready.path() + ":/ready", "--",
                          "/bin/sh", "-c", "touch /ready/ok; sleep 77; echo done"});
  bool is_ready = false;
  for (int i = 0; i < 500 && !is_ready; ++i) {
    is_ready = std::filesystem::exists(ready.path() + "/ok");
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(is_ready);
  std::this_thread::sleep_for(100ms);  // sleep has started
  ::kill(bg.pid, SIGINT);
  bg.Wait();
  auto json = nlohmann::json::parse(bg.Out(), nullptr, false);
  INFO(bg.Out());
  CHECK(json.value("status", "") == "signal");  // not the 20 s time-out
  CHECK(json.value("signal", 0) == SIGINT);
  CHECK(json.value("stdout", "x").empty());
}

TEST_CASE("signals ignored by nsbox's caller are at their default action in the sandbox", "[integration][exit]") {
  // `trap '' INT` in a script, or a background job of a non-interactive shell: SIG_IGN survives execve.
  struct sigaction ignore = {}, old_int = {}, old_term = {}, old_usr1 = {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ignore, &old_int);
  ::sigaction(SIGTERM, &ignore, &old_term);
  ::sigaction(SIGUSR1, &ignore, &old_usr1);
  auto r = RunNsboxJson({"--", "/bin/grep", "SigIgn", "/proc/self/status"});
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGUSR1, &old_usr1, nullptr);
  INFO(r.Describe());
  CHECK(r.out() == "SigIgn:\t0000000000000000\n");
}

TEST_CASE("a signal to nsbox's process group (a terminal's Ctrl-C) reaches the program once", "[integration][exit]") {
  // pid 1 was in nsbox's group: it passed the group's SIGINT to the program, and nsbox forwarded its own copy too.
  const std::string program =
      "import signal, time\n"
      "got = []\n"
      "signal.signal(signal.SIGINT, lambda s, f: got.append(s))\n"
      "print('up', flush=True)\n"
      "end = time.time() + 30\n"
      "while not got and time.time() < end: time.sleep(0.05)\n"
      "time.sleep(1)  # a second copy would come within this\n"
      "print('SIGINTs:', len(got))\n";
  // The shell leads a process group of its own with nsbox in it, waits until the program is up, then signals the group.
  const std::string script = fmt::format(
      "trap : INT; out=$(mktemp); '{}' run -- /usr/bin/python3 -c \"$PROGRAM\" > \"$out\" & pid=$!; "
      "until grep -q up \"$out\"; do sleep 0.05; done; kill -INT 0; wait $pid; wait $pid; cat \"$out\"; rm \"$out\"",
      NsboxBinary());
  SpawnOptions options;
  options.extra_env["PROGRAM"] = program;
  auto r = RunProcess({"/usr/bin/setsid", "--wait", "/bin/sh", "-c", script}, options);
  INFO(r.out << r.err);
  CHECK(r.out == "up\nSIGINTs: 1\n");
}

TEST_CASE("CPU time counts every process of the sandbox, also those killed at a time-out or at the end",
          "[integration][exit]") {
  // The kernel lets the processes it kills with pid 1 vanish unreaped, and their CPU time with them.
  auto timeout = RunShell("while :; do :; done", {"--timeout", "3s"});
  INFO(timeout.Describe());
  CHECK(timeout.status() == "timeout");
  CHECK(timeout.json.value("cpu_ms", 0) >= 200);
  // The spinner says when it has used 0.3 s of CPU; the run ends then, and kills it.
  auto left = RunShell(
      "setsid /usr/bin/python3 -c \"import time\nwhile time.process_time() < 0.3: pass\n"
      "open('/tmp/spun', 'w').close()\nwhile True: pass\" & "
      "until [ -e /tmp/spun ]; do sleep 0.02; done",
      {"--timeout", "60s"});
  INFO(left.Describe());
  CHECK(left.status() == "ok");
  CHECK(left.json.value("cpu_ms", 0) >= 200);
}

TEST_CASE("a run that ends by itself reports the CPU time and peak memory of all its processes, with and without "
          "limits", "[integration][exit]") {
  // pid 1 measures them itself (kGone) and leaves its groups, so that nsbox need not wait for its exit: the figures
  // must be those wait4 on pid 1 would give, a background child's CPU time included.
  const char* busy =
      "import os, time\n"
      "def spin(seconds):\n"
      "    end = time.process_time() + seconds\n"
      "    while time.process_time() < end: pass\n"
      "if os.fork() == 0:\n"
      "    spin(0.3); os._exit(0)\n"
      "b = bytearray(48 << 20)\n"
      "for i in range(0, len(b), 4096): b[i] = 1\n"
      "spin(0.3)\n"
      "os.wait()\n";
  for (bool limits : {true, false}) {
    std::vector<std::string> options;
    if (!limits) options.push_back("--dangerously-run-without-limits");
    auto r = RunPython(busy, options);
    INFO(r.Describe());
    INFO("limits " << limits);
    CHECK(r.status() == "ok");
    CHECK(r.json.value("cpu_ms", 0) >= 500);
    CHECK(r.json.value("peak_memory_bytes", uint64_t{0}) >= (48u << 20));
  }
}

TEST_CASE("a run leaves no zombie behind: neither its pid 1 nor the cgroup reaper outlives nsbox",
          "[integration][exit]") {
  // What outlives nsbox is reparented to init, which may take seconds to reap it. nsbox reaps both itself.
  size_t before = NsboxZombiesOfInit();
  for (int i = 0; i < 5; ++i) {
    auto r = RunNsboxJson({"--", "/bin/true"});
    INFO(r.Describe());
    REQUIRE(r.status() == "ok");
  }
  CHECK(NsboxZombiesOfInit() <= before);
  // A run forks its reaper before it parses its options: one that never gets to make a group (a bad option, a
  // setup error, --help) still reaps it.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"run", "--bogus", "--", "/bin/true"}, {"run", "--help"}, {"run", "--", "/nonexistent/program"}}) {
    for (int i = 0; i < 3; ++i) {
      auto r = RunNsboxRaw(args);
      INFO(r.err);
      CHECK(r.exit_code == (args[1] == "--help" ? 0 : args[1] == "--" ? 127 : 125));
    }
  }
  CHECK(NsboxZombiesOfInit() <= before);
}

TEST_CASE("a real-time signal is named by its offset from SIGRTMIN", "[integration][exit]") {
  auto r = RunShell("kill -s RTMIN+2 $$");
  INFO(r.Describe());
  CHECK(r.status() == "signal");
  CHECK(r.json.value("reason", "") == fmt::format("killed by signal {} (SIGRTMIN+2)", SIGRTMIN + 2));
}
