// Sessions, end to end: the built nsbox binary creates sessions, runs execs and REPL cells in them, copies files, and
// every test ends its sessions (each test has its own state directory, removed at the end).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nsbox_config.h"
#include "tests/support/run_nsbox.h"
#include "tests/support/skip.h"

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string NsboxBin() {
  if (const char* bin = std::getenv("NSBOX_BIN"); bin && *bin) return bin;
  return "build/src/nsbox";
}

struct Output {
  int code = -1;
  std::string out, err;
  json Json() const { return json::parse(out); }
};

std::string ReadAll(int fd) {
  std::string data;
  char buffer[65536];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0) data.append(buffer, static_cast<size_t>(n));
  return data;
}

// Runs argv with `env_extra` added, stdin from `input`; waits and collects stdout, stderr and the exit code.
// No Catch2 assertion in here: Catch2's macros are not thread-safe, and tests call this from several threads.
Output Run(std::vector<std::string> argv, const std::vector<std::string>& env_extra = {},
           const std::string& input = "") {
  int out[2], err[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0)
    return Output{-1, "", "test harness: pipe2 failed"};
  pid_t pid = ::fork();
  if (pid < 0) return Output{-1, "", "test harness: fork failed"};
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (const auto& kv : env_extra) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  ::close(in[0]);
  if (!input.empty()) {
    ssize_t ignored = ::write(in[1], input.data(), input.size());
    (void)ignored;
  }
  ::close(in[1]);
  Output o;
  std::thread err_reader([&] { o.err = ReadAll(err[0]); });
  o.out = ReadAll(out[0]);
  err_reader.join();
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

bool ProcessExists(pid_t pid) { return pid > 0 && ::kill(pid, 0) == 0; }

// A stopped or killed process that init has not reaped yet is a zombie: it is gone for these tests.
bool ProcessGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto paren = text.rfind(')');
  return text.empty() || (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z');
}

// A process's peak resident size (VmHWM), or 0 when it cannot be read.
uint64_t PeakResidentBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmHWM:")) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

template <typename F>
bool WaitFor(F condition, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

// The name of the cgroup a session's pid 1 is in ("nsbox-…"), empty without one: other suites running at the same
// time make and remove groups of their own, so a test checks for its own session's groups by name.
std::string SessionGroupName(pid_t pid1) {
  std::ifstream cgroups("/proc/" + std::to_string(pid1) + "/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    auto at = line.find(":/nsbox");
    if (at == std::string::npos) continue;
    std::string path = line.substr(at + 2);
    if (path.starts_with("nsbox/")) path = path.substr(6);
    return path.substr(0, path.find('/'));
  }
  return "";
}

bool NoGroupNamed(const std::string& name) {
  for (const auto& group : nsbox::testing::NsboxGroups())
    if (group.find(name) != std::string::npos) return false;
  return true;
}

// One test's sessions: their own state directory (NSBOX_STATE_DIR) and an rm --all at the end.
struct Sessions {
  std::string state_dir;
  Sessions() {
    char tmpl[] = "/tmp/nsbox-session-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    state_dir = tmpl;
    ::setenv("NSBOX_STATE_DIR", state_dir.c_str(), 1);
  }
  ~Sessions() {
    // A test may have opened the directory up (another user's view): rm refuses a state directory that is not 0700.
    ::chmod(state_dir.c_str(), 0700);
    Run({NsboxBin(), "session", "rm", "--all"});
    std::filesystem::remove_all(state_dir);
    ::unsetenv("NSBOX_STATE_DIR");
  }
  Output Nsbox(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), NsboxBin());
    return Run(args, {}, input);
  }
  std::string Create(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"session", "create", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    Output o = Nsbox(args);
    INFO(o.err);
    REQUIRE(o.code == 0);
    json j = o.Json();
    REQUIRE(j.contains("id"));
    return j["id"].get<std::string>();
  }
  json Record(const std::string& id) {
    std::ifstream in(state_dir + "/" + id + "/session.json");
    return json::parse(in);
  }
  // exec --json -- CMD...
  json Exec(const std::string& id, std::vector<std::string> command, std::vector<std::string> options = {}) {
    std::vector<std::string> args = {"exec", id, "--json"};
    args.insert(args.end(), options.begin(), options.end());
    args.push_back("--");
    args.insert(args.end(), command.begin(), command.end());
    Output o = Nsbox(args);
    INFO(o.err);
    REQUIRE(!o.out.empty());
    return o.Json();
  }
  json Sh(const std::string& id, const std::string& script, std::vector<std::string> options = {}) {
    return Exec(id, {"/bin/sh", "-c", script}, options);
  }
  json Cell(const std::string& id, const std::string& code, std::vector<std::string> options = {}) {
    std::vector<std::string> args = {"exec", id, "--json", "--lang", "python", "--repl", "--code", code};
    args.insert(args.end(), options.begin(), options.end());
    Output o = Nsbox(args);
    INFO(o.err);
    REQUIRE(!o.out.empty());
    return o.Json();
  }
};

}  // namespace

TEST_CASE("files in /workspace and the home directory persist from one exec to the next", "[session]") {
  Sessions s;
  std::string id = s.Create();
  json first = s.Sh(id, "echo hello > /workspace/note.txt && echo secret > ~/.config-file && cd /tmp && echo t > t");
  REQUIRE(first["status"] == "ok");
  json second = s.Sh(id, "cat /workspace/note.txt ~/.config-file /tmp/t; pwd; id -u");
  CHECK(second["status"] == "ok");
  CHECK(second["stdout"] == "hello\nsecret\nt\n/workspace\n1000\n");
}

TEST_CASE("exec returns run's result object and exit codes", "[session]") {
  Sessions s;
  std::string id = s.Create();
  Output exit3 = s.Nsbox({"exec", id, "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(exit3.code == 3);
  CHECK(exit3.out == "out\n");
  CHECK(exit3.err == "err\n");
  json j = s.Sh(id, "kill -TERM $$");
  CHECK(j["status"] == "signal");
  CHECK(j["signal"] == 15);
  Output missing = s.Nsbox({"exec", id, "--", "/no/such/program"});
  CHECK(missing.code == 127);  // not found, as with run (Docker's convention)
  Output code = s.Nsbox({"exec", id, "--lang", "python", "--code", "import sys; print('py'); sys.exit(4)"});
  CHECK(code.code == 4);
  CHECK(code.out == "py\n");
  Output with_stdin = s.Nsbox({"exec", id, "--stdin", "-", "--", "/bin/cat"}, "from stdin\n");
  CHECK(with_stdin.out == "from stdin\n");
  // Without --, the program's first word (after the session) ends nsbox's options.
  Output words = s.Nsbox({"exec", id, "--workdir", "/tmp", "/bin/echo", "--json", "--workdir", "/"});
  CHECK(words.code == 0);
  CHECK(words.out == "--json --workdir /\n");
}

TEST_CASE("an exec's working directory cannot be a descriptor of the supervisor's (/proc/self/fd/N)", "[session]") {
  Sessions s;
  std::string id = s.Create();
  // The exec's payload starts as a copy of the supervisor's descriptors (close-on-exec, but open until execve): a
  // working directory through /proc/self/fd/N would lie outside the sandbox's root. Resolved without magic links.
  for (int fd = 0; fd < 24; ++fd) {
    Output out = s.Nsbox({"exec", id, "--workdir", fmt::format("/proc/self/fd/{}", fd), "--", "/bin/pwd"});
    INFO(fd << ": " << out.out << out.err);
    CHECK(out.code == 125);
  }
  // Nor through a link the sandbox's code planted; a plain link inside the sandbox is followed as before.
  REQUIRE(s.Sh(id, "mkdir /workspace/real && ln -s /proc/self/fd/7 /workspace/magic && ln -s /workspace/real "
                   "/workspace/plain")["status"] == "ok");
  Output magic = s.Nsbox({"exec", id, "--workdir", "/workspace/magic", "--", "/bin/pwd"});
  CHECK(magic.code == 125);
  CHECK(magic.err.find("RESOLVE_NO_MAGICLINKS") != std::string::npos);
  Output plain = s.Nsbox({"exec", id, "--workdir", "/workspace/plain", "--", "/bin/pwd"});
  CHECK(plain.code == 0);
  CHECK(plain.out == "/workspace/real\n");  // /bin/pwd prints the physical path
}

TEST_CASE("exec --lang cpp compiles in the session, reads stdin, and leaves no build directory behind", "[session]") {
  Sessions s;
  std::string id = s.Create();
  const std::string sum = "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << '\\n'; }";
  Output ran = s.Nsbox({"exec", id, "--json", "--stdin", "-", "--lang", "c++", "--code", sum}, "40 2\n");
  INFO(ran.err);
  json j = ran.Json();
  CHECK(j["status"] == "ok");
  CHECK(j["stdout"] == "42\n");
  CHECK(j["compile"]["status"] == "ok");
  CHECK(j["compile"]["exit_code"] == 0);
  CHECK(j["compile"]["peak_memory_bytes"].get<uint64_t>() > 0);
  CHECK(j["changed_files"] == json::array());  // the source and the binary live in /tmp, not the workspace
  Output bad = s.Nsbox({"exec", id, "--lang", "cpp", "--code", "int main() { return missing_name; }"});
  CHECK(bad.code == 123);
  CHECK(bad.err.find("missing_name") != std::string::npos);
  CHECK(bad.err.find("compile_error") != std::string::npos);
  // Only the shared Go cache's directory may stay; each program's own build directory is removed after it.
  json left = s.Sh(id, "ls -A /tmp/nsbox-build");
  CHECK(left["stdout"] == "");
}

TEST_CASE("a session without limits compiles: the language's compile memory is dropped, an asked one refused",
          "[session][compiled]") {
  Sessions s;
  std::string id = s.Create({"--dangerously-run-without-limits"});
  Output built = s.Nsbox({"exec", id, "--lang", "c", "--code", "#include <stdio.h>\nint main(void) { puts(\"x\"); }"});
  INFO(built.err);
  CHECK(built.code == 0);
  CHECK(built.out == "x\n");
  Output asked = s.Nsbox({"exec", id, "--compile-memory", "64M", "--lang", "c", "--code", "int main(void) {}"});
  CHECK(asked.code == 125);
  CHECK(asked.err.find("the session runs without limits") != std::string::npos);
}

TEST_CASE("a compile cut short leaves no compiler temporaries in the session's /tmp", "[session][compiled]") {
  Sessions s;
  std::string id = s.Create();
  // gcc writes cc*.o and friends to $TMPDIR: the compile's TMPDIR is its build directory, removed after every exec.
  for (const char* limit : {"5ms", "20ms", "40ms", "80ms", "150ms"})
    (void)s.Nsbox({"exec", id, "--compile-timeout", limit, "--lang", "c", "--code", "int main(void) { return 0; }"});
  json left = s.Sh(id, "ls -A /tmp");
  CHECK(left["stdout"] == "nsbox-build\n");
  json build = s.Sh(id, "ls -A /tmp/nsbox-build");
  CHECK(build["stdout"] == "");
}

TEST_CASE("exec --compile-memory limits the compile step alone; the program keeps the session's --memory",
          "[session][compiled]") {
  const auto groups_before = nsbox::testing::NsboxGroups();
  {
    Sessions s;
    std::string id = s.Create({"--memory", "128M"});
    // 8M, well under what cc1plus allocates (at 16M it could thrash on its text pages until its time-out).
    Output tight = s.Nsbox({"exec", id, "--json", "--compile-memory", "8M", "--lang", "cpp", "--code",
                            "#include <iostream>\nint main() { std::cout << 1; }"});
    INFO(tight.err);
    CHECK(tight.code == 123);
    json t = tight.Json();
    CHECK(t["status"] == "compile_error");
    CHECK(t["compile"]["status"] == "oom");
    CHECK(t["changed_files"] == json::array());  // every exec's answer has it; a failed compile changed nothing
    CHECK(t["limits"]["memory_max_bytes"] == 8ull << 20);
    // The default compile memory (the table's 1G, under the session's 128M): the compile fits, the program does not.
    Output bomb = s.Nsbox({"exec", id, "--json", "--lang", "c", "--code",
                           "#include <stdlib.h>\n#include <string.h>\nint main(void) { for (int i = 0; i < 300; i++) "
                           "{ volatile char *p = malloc(1 << 20); if (!p) return 9; memset((char *)p, 1, 1 << 20); } "
                           "return 0; }\n"});
    INFO(bomb.err);
    CHECK(bomb.code == 137);
    json b = bomb.Json();
    CHECK(b["status"] == "oom");
    CHECK(b["compile"]["status"] == "ok");
    CHECK(b["limits"]["memory_max_bytes"] == 128ull << 20);
    // The session lives on after both OOM kills.
    Output after = s.Nsbox({"exec", id, "--", "/bin/true"});
    CHECK(after.code == 0);
    Output bad = s.Nsbox({"exec", id, "--compile-memory", "lots", "--lang", "c", "--code", "int main(void) {}"});
    CHECK(bad.code == 125);
    CHECK(bad.err.find("--compile-memory: invalid size 'lots'") != std::string::npos);
  }
  CHECK(nsbox::testing::NsboxGroups() == groups_before);
}

// The program prints 1, then waits for the test's go-ahead, which the test gives only once it has read the first
// chunk: a chunk held back until the program ends would leave the program waiting until it gives up ("no go").
TEST_CASE("exec --stream passes output on as it comes: chunk lines before the result, raw without --json",
          "[session][stream]") {
  Sessions s;
  std::string id = s.Create();
  const std::string script =
      "echo 1; i=0; while [ ! -e /workspace/go ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; "
      "[ -e /workspace/go ] && echo 2 >&2 || echo 'no go'; echo 3";
  auto client =
      nsbox::testing::StartProcess({NsboxBin(), "exec", id, "--json", "--stream", "--", "/bin/sh", "-c", script});
  REQUIRE(client.pid > 0);
  bool got_first = WaitFor([&] { return client.Out().find('\n') != std::string::npos; }, 15s);
  const std::string so_far = client.Out();
  CHECK(got_first);
  CHECK(json::parse(so_far.substr(0, so_far.find('\n')), nullptr, false) == json{{"type", "stdout"}, {"data", "1\n"}});
  REQUIRE(s.Sh(id, "touch /workspace/go")["status"] == "ok");
  int wstatus = client.Wait();
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  std::vector<json> lines;
  std::istringstream out(client.Out());
  for (std::string line; std::getline(out, line);) lines.push_back(json::parse(line));
  REQUIRE(lines.size() >= 4);
  std::string streamed_out, streamed_err;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    INFO(lines[i].dump());
    REQUIRE(lines[i].size() == 2);
    (lines[i]["type"] == "stderr" ? streamed_err : streamed_out) += lines[i]["data"].get<std::string>();
  }
  CHECK(streamed_out == "1\n3\n");
  CHECK(streamed_err == "2\n");
  const json& result = lines.back();
  CHECK(result["status"] == "ok");
  CHECK(result["stdout"] == "1\n3\n");  // the result line is the one without --stream
  CHECK(result["stderr"] == "2\n");

  // Raw: the output once (as it came), not again at the end; the exit code as without --stream.
  Output raw = s.Nsbox({"exec", id, "--stream", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(raw.code == 3);
  CHECK(raw.out == "out\n");
  CHECK(raw.err == "err\n");
  Output repl = s.Nsbox({"exec", id, "--stream", "--repl", "--lang", "python", "--code", "1"});
  CHECK(repl.code == 125);
  CHECK(repl.err == "nsbox exec: --stream is not available with --repl\n");
  Output workdir = s.Nsbox({"exec", id, "--workdir", "/tmp", "--repl", "--lang", "python", "--code", "1"});
  CHECK(workdir.code == 125);
  CHECK(workdir.err.starts_with("nsbox exec: --workdir is not available with --repl"));
}

// As with run (io_test.cc): the exec's program reads a pipe the supervisor fills, never the client's descriptor.
TEST_CASE("SIGINT, SIGTERM or SIGHUP to nsbox exec kills the exec and still prints its result; the session lives on",
          "[session]") {
  Sessions s;
  nsbox::testing::TempDir ready;  // where a REPL cell says it has started
  REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
  std::string id = s.Create({"--bind", ready.path() + ":/ready"});
  s.Cell(id, "kept = 1");
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    INFO("signal " << sig);
    // The chunk line says the program is running; the result line comes after the signal.
    auto bg = nsbox::testing::StartProcess({NsboxBin(), "exec", id, "--json", "--stream", "--timeout", "60s", "--",
                                            "/bin/sh", "-c", "echo hi; exec sleep 77"});
    REQUIRE(WaitFor([&] { return bg.Out().find("\"hi\\n\"") != std::string::npos; }, 20s));
    REQUIRE(::kill(bg.pid, sig) == 0);
    int status = bg.Wait();  // "killed" below, not the 60 s time-out
    std::string out = bg.Out();
    INFO(out);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + sig);
    json result = json::parse(out.substr(out.rfind('\n', out.size() - 2) + 1));
    CHECK(result["status"] == "killed");
    CHECK(result["signal"] == sig);
    CHECK(result["stdout"] == "hi\n");
    CHECK_THAT(
        result["reason"].get<std::string>(),
        Catch::StartsWith(fmt::format("nsbox exec was stopped by SIG{}: the exec was killed", sigabbrev_np(sig))));
    CHECK(s.Sh(id, "pgrep -x sleep || echo none")["stdout"] == "none\n");
  }
  // A reader that takes nothing does not hold nsbox exec past the signal: the rest of the output is dropped.
  const std::string fifo = s.state_dir + "/reader";
  // nsbox exec is signalled once it has filled the FIFO (it has written the pipe's 64 KiB: /proc's wchar); a watchdog
  // kills it 20 s later, when it would have waited for the reader, so a hang shows as rc=137.
  Output stuck = Run({"/bin/bash", "-c",
                      "mkfifo \"$1\"; sleep 60 < \"$1\" & reader=$!; \"$0\" exec \"$2\" --stream -- /bin/sh -c "
                      "'head -c 3000000 /dev/zero | tr \"\\0\" x; sleep 30' > \"$1\" & pid=$!; "
                      "for i in $(seq 600); do w=$(sed -n 's/^wchar: //p' /proc/$pid/io 2>/dev/null); "
                      "[ \"${w:-0}\" -ge 65536 ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done; "
                      "kill -TERM $pid; (for i in $(seq 400); do kill -0 $pid 2>/dev/null || exit; sleep 0.05; done; "
                      "kill -KILL $pid) & wait $pid; rc=$?; kill $reader 2>/dev/null; echo \"rc=$rc\"",
                      NsboxBin(), fifo, id});
  INFO(stuck.err);
  CHECK(stuck.out == "rc=143\n");
  CHECK_THAT(stuck.err, Catch::Contains("the rest of the output was not written"));
  // A REPL cell stopped so takes its interpreter with it, and says so; the session and its files stay.
  auto bg = nsbox::testing::StartProcess({NsboxBin(), "exec", id, "--json", "--lang", "python", "--repl", "--code",
                                          "import time\nopen('/ready/cell-started', 'w').close()\ntime.sleep(77)"});
  REQUIRE(WaitFor([&] { return std::filesystem::exists(ready.path() + "/cell-started"); }, 20s));
  REQUIRE(::kill(bg.pid, SIGINT) == 0);
  int status = bg.Wait();
  CHECK(WEXITSTATUS(status) == 130);
  json cell = json::parse(bg.Out());
  CHECK(cell["status"] == "killed");
  CHECK_THAT(cell["reason"].get<std::string>(), Catch::Contains("the interpreter with it: its state is lost"));
  json next = s.Cell(id, "'kept' in globals()");
  CHECK(next["repl"]["state_lost"] == true);
  CHECK(s.Sh(id, "ls /ready")["stdout"] == "cell-started\n");
}

TEST_CASE("an exec's program and a REPL cell open their stdio again by name (/dev/stdin, /dev/stderr)", "[session]") {
  Sessions s;
  std::string id = s.Create();
  std::ofstream(s.state_dir + "/input") << "from the file\n";
  json exec = s.Sh(id, "cat /dev/stdin; echo to-stderr > /dev/stderr", {"--stdin", s.state_dir + "/input"});
  CHECK(exec["status"] == "ok");
  CHECK(exec["stdout"] == "from the file\n");
  CHECK(exec["stderr"] == "to-stderr\n");
  json cell = s.Cell(id, "open('/dev/stdout', 'w').write('by name\\n')");
  CHECK(cell["status"] == "ok");
  CHECK(cell["stdout"] == "by name\n");
}

// Not a sealed copy, as a run's is: a process an exec leaves running could keep it, and its memory, which no limit of
// the session counts.
TEST_CASE("exec --stdin FILE reaches the program through a pipe, not the host file", "[session]") {
  Sessions s;
  std::string id = s.Create();
  std::string file = s.state_dir + "/stdin-host-secret-name";
  {
    std::ofstream out(file);
    out << "line one\nline two\n";
  }
  Output r = s.Nsbox({"exec", id, "--stdin", file, "--", "/bin/sh", "-c", "readlink /proc/self/fd/0; cat"});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.starts_with("pipe:["));
  CHECK(r.out.find("host-secret") == std::string::npos);
  CHECK(r.out.ends_with("]\nline one\nline two\n"));
}

TEST_CASE("a package installed with pip --user from a local source tree is importable in later execs", "[session]") {
  Sessions s;
  std::string id = s.Create();
  json made = s.Sh(id,
                   "mkdir -p /workspace/pkg/nsboxdemo && "
                   "printf 'VALUE = 42\\n' > /workspace/pkg/nsboxdemo/__init__.py && "
                   "printf 'from setuptools import setup\\nsetup(name=\"nsboxdemo\", version=\"1.0\", "
                   "packages=[\"nsboxdemo\"])\\n' > /workspace/pkg/setup.py");
  REQUIRE(made["status"] == "ok");
  json install = s.Exec(id,
                        {"/usr/bin/python3", "-m", "pip", "install", "--user", "--no-index", "--no-build-isolation",
                         "--break-system-packages", "/workspace/pkg"},
                        {"--timeout", "120s"});
  INFO(install["stdout"].get<std::string>() + install["stderr"].get<std::string>());
  REQUIRE(install["status"] == "ok");
  json use = s.Exec(id, {"/usr/bin/python3", "-c", "import nsboxdemo, os; print(nsboxdemo.VALUE, os.getcwd())"});
  INFO(use["stderr"].get<std::string>());
  CHECK(use["stdout"] == "42 /workspace\n");
  // Outside the workspace: the package lives in the home directory.
  json where = s.Exec(id, {"/usr/bin/python3", "-c", "import nsboxdemo; print(nsboxdemo.__file__)"});
  CHECK(where["stdout"].get<std::string>().starts_with("/home/sandbox/.local/"));
}

TEST_CASE("pip install --user of a local wheel works as documented, and the package imports in the next exec",
          "[session]") {
  Sessions s;
  std::string id = s.Create();
  // A wheel zipped by hand (no PyPI, no build backend): a package, its METADATA, WHEEL and RECORD.
  json made = s.Exec(id, {"/usr/bin/python3", "-c",
                          "import zipfile\n"
                          "files = {'nsboxwheel/__init__.py': 'VALUE = 7919\\n',\n"
                          "         'nsboxwheel-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: nsboxwheel\\n"
                          "Version: 1.0\\n',\n"
                          "         'nsboxwheel-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: hand\\n"
                          "Root-Is-Purelib: true\\nTag: py3-none-any\\n'}\n"
                          "with zipfile.ZipFile('/workspace/nsboxwheel-1.0-py3-none-any.whl', 'w') as z:\n"
                          "    for name, text in files.items(): z.writestr(name, text)\n"
                          "    z.writestr('nsboxwheel-1.0.dist-info/RECORD', ''.join(f'{n},,\\n' for n in files) + "
                          "'nsboxwheel-1.0.dist-info/RECORD,,\\n')\n"});
  INFO(made["stderr"].get<std::string>());
  REQUIRE(made["status"] == "ok");
  // The documented command, without --break-system-packages: Debian's Python is externally managed.
  json install = s.Exec(id,
                        {"/usr/bin/python3", "-m", "pip", "install", "--user", "--no-index",
                         "/workspace/nsboxwheel-1.0-py3-none-any.whl"},
                        {"--timeout", "120s"});
  INFO(install["stdout"].get<std::string>() + install["stderr"].get<std::string>());
  REQUIRE(install["status"] == "ok");
  json use = s.Exec(id, {"/usr/bin/python3", "-c", "import nsboxwheel; print(nsboxwheel.VALUE, nsboxwheel.__file__)"},
                    {"--workdir", "/tmp"});
  INFO(use["stderr"].get<std::string>());
  CHECK(use["stdout"].get<std::string>().starts_with("7919 /home/sandbox/.local/"));
}

TEST_CASE("an exec's program has the exec client's umask, as a run's has nsbox's", "[session]") {
  Sessions s;
  std::string id = s.Create();  // the supervisor itself runs with umask 077; the program must not get that
  Output plain =
      Run({"/bin/sh", "-c",
           "umask 022; exec \"$0\" exec \"$1\" -- /bin/sh -c 'umask; touch /workspace/a; stat -c %a /workspace/a'",
           NsboxBin(), id});
  CHECK(plain.out == "0022\n644\n");
  Output strict =
      Run({"/bin/sh", "-c",
           "umask 027; exec \"$0\" exec \"$1\" -- /bin/sh -c 'umask; touch /workspace/b; stat -c %a /workspace/b'",
           NsboxBin(), id});
  CHECK(strict.out == "0027\n640\n");
  Output run = Run({"/bin/sh", "-c", "umask 027; exec \"$0\" run -- /bin/sh -c umask", NsboxBin()});
  CHECK(run.out == "0027\n");
}

TEST_CASE("a background process started by one exec is still running in the next", "[session]") {
  Sessions s;
  std::string id = s.Create();
  json start = s.Sh(id, "setsid sh -c 'while :; do date +%s%N > /tmp/beat; sleep 0.05; done' >/dev/null 2>&1 & "
                        "echo $! > /workspace/bg.pid");
  REQUIRE(start["status"] == "ok");
  // It beats on: the next exec sees the beat change (within 10 s; a beat being written reads as empty).
  json check = s.Sh(id,
                    "a=; b=; i=0; while [ $i -lt 200 ]; do b=$(cat /tmp/beat 2>/dev/null); "
                    "if [ -n \"$b\" ]; then [ -z \"$a\" ] && a=$b; [ \"$a\" != \"$b\" ] && break; fi; "
                    "sleep 0.05; i=$((i+1)); done; kill -0 $(cat /workspace/bg.pid) && [ -n \"$b\" ] && "
                    "[ \"$a\" != \"$b\" ] && echo alive");
  CHECK(check["stdout"] == "alive\n");
}

TEST_CASE("an exec's limits report what happened during that exec, not the session's totals", "[session][cgroup]") {
  Sessions s;
  std::string id = s.Create({"--pids", "12", "--memory", "64M"});
  // Hits the pids limit: the shell cannot fork all its children.
  json bomb = s.Sh(id, "for i in $(seq 30); do sleep 0.3 & done; wait");
  INFO(bomb.dump());
  CHECK(bomb["limits"]["pids_limit_hit"] == true);
  CHECK(bomb["reason"].get<std::string>().find("the pids limit of 12 was reached") != std::string::npos);
  // The sleeps it did start end, and give their pids back (the shell may have given up without waiting for them;
  // until then, an exec may not even start).
  CHECK(WaitFor([&] { return s.Sh(id, "pgrep -x sleep >/dev/null || echo none")["stdout"] == "none\n"; }, 15s));
  json oom = s.Exec(id, {"/usr/bin/python3", "-c", "b = bytearray(256 << 20)"});
  INFO(oom.dump());
  CHECK(oom["status"] == "oom");
  CHECK(oom["limits"]["oom_kills"] == 1);
  // Never past the limit that held it (the resident size also counts the supervisor's pages it started in).
  CHECK(oom["peak_memory_bytes"].get<uint64_t>() <= (64u << 20));
  CHECK(oom["peak_memory_bytes"].get<uint64_t>() > (32u << 20));
  // A quiet exec reports neither: the session's counters stay where the earlier execs left them.
  json quiet = s.Sh(id, "echo ok");
  INFO(quiet.dump());
  CHECK(quiet["status"] == "ok");
  CHECK(quiet["limits"]["pids_limit_hit"] == false);
  CHECK(quiet["limits"]["oom_kills"] == 0);
  CHECK(quiet["reason"] == "exited with code 0");
}

TEST_CASE("a session whose memory is full of its files loses an exec to the OOM killer, not its pid 1",
          "[session][cgroup]") {
  // tmpfs pages count for no process: the OOM killer took pid 1, the group's largest, and the session was gone with
  // its /workspace.
  Sessions s;
  std::string id = s.Create({"--memory", "64M"});
  REQUIRE(s.Sh(id, "echo keep > /workspace/state.txt")["status"] == "ok");
  // The writer holds 16M of its own: the one to go, it leaves room for the next exec. (With cat as the writer, what its
  // kill freed was sometimes less than `rm` needs, when nothing else in the group could be reclaimed: then `rm` met the
  // OOM killer too.)
  json filled = s.Exec(id, {"/usr/bin/python3", "-c",
                            "pad = b'x' * (16 << 20)\n"
                            "with open('/tmp/blob', 'wb') as f:\n"
                            "    while True: f.write(bytes(1 << 20))"});
  INFO(filled.dump());
  CHECK(filled["status"] == "oom");
  CHECK(s.Exec(id, {"rm", "/tmp/blob"})["status"] == "ok");
  json after = s.Exec(id, {"cat", "/workspace/state.txt"});
  INFO(after.dump());
  CHECK(after["status"] == "ok");
  CHECK(after["stdout"] == "keep\n");
}

TEST_CASE("a REPL driver that cannot be read is named with the reason, not called missing", "[session][repl]") {
  // A data directory without rootfs/repl/driver.py (or one this user cannot read): the cell said "not found".
  char data[] = "/tmp/nsbox-data-test-XXXXXX";
  REQUIRE(::mkdtemp(data) != nullptr);
  ::chmod(data, 0755);
  std::filesystem::copy(std::string(NSBOX_SOURCE_DIR) + "/seccomp-profiles", std::string(data) + "/seccomp-profiles");
  std::filesystem::create_directories(std::string(data) + "/rootfs");
  for (const char* file : {"host.json", "languages.json"})
    std::filesystem::copy_file(std::string(NSBOX_SOURCE_DIR) + "/rootfs/" + file,
                               std::string(data) + "/rootfs/" + file);
  ::setenv("NSBOX_DATADIR", data, 1);
  {
    Sessions s;
    std::string id = s.Create();
    Output o = s.Nsbox({"exec", id, "--json", "--lang", "python", "--repl", "--code", "1"});
    INFO(o.out << o.err);
    CHECK(o.code == 125);
    CHECK_THAT(o.out + o.err, Catch::Contains("the REPL driver could not be read: ") &&
                                  Catch::Contains("/rootfs/repl/driver.py") && Catch::Contains("ENOENT"));
  }
  ::unsetenv("NSBOX_DATADIR");
  std::filesystem::remove_all(data);
}

TEST_CASE("REPL names persist between calls and the final expression's value is returned", "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  json first = s.Cell(id, "import math\nx = 20\ndef twice(v):\n    return 2 * v\nprint('defined')");
  CHECK(first["status"] == "ok");
  CHECK(first["stdout"] == "defined\n");
  CHECK(first["repl"]["value"].is_null());
  CHECK(first["repl"]["state_lost"] == false);
  json second = s.Cell(id, "y = twice(x) + 2\ny");
  CHECK(second["status"] == "ok");
  CHECK(second["repl"]["value"] == "42");
  Output text = s.Nsbox({"exec", id, "--lang", "python", "--repl", "--code", "[y, round(math.pi, 2)]"});
  CHECK(text.code == 0);
  CHECK(text.out == "[42, 3.14]\n");
}

TEST_CASE("a failing cell reports its exception and traceback, and the interpreter keeps its state",
          "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  s.Cell(id, "kept = 'yes'");
  json failing = s.Cell(id, "def f():\n    return {}['missing']\nprint('before')\nf()");
  CHECK(failing["status"] == "exit");
  CHECK(failing["exit_code"] == 1);
  CHECK(failing["stdout"] == "before\n");
  CHECK(failing["repl"]["exception"] == "KeyError: 'missing'");
  std::string tb = failing["repl"]["traceback"];
  CHECK(tb.find("Traceback (most recent call last)") != std::string::npos);
  CHECK(tb.find("in f") != std::string::npos);
  CHECK(tb.find("return {}['missing']") != std::string::npos);
  CHECK(failing["stderr"].get<std::string>().find("KeyError") != std::string::npos);
  json after = s.Cell(id, "kept");
  CHECK(after["repl"]["value"] == "'yes'");
  CHECK(after["repl"]["state_lost"] == false);
  // A file name's undecodable bytes (lone surrogates after os.fsdecode) in the exception and in a value are escaped:
  // the answer stays the driver's, and the state stays.
  json odd = s.Cell(id, "import os\nodd = os.fsdecode(b'bad name \\xff')\nraise ValueError(odd)");
  CHECK(odd["status"] == "exit");
  CHECK(odd["repl"]["exception"] == "ValueError: bad name \\udcff");
  json value = s.Cell(id, "odd");
  CHECK(value["repl"]["value"] == "'bad name \\udcff'");
  CHECK(value["repl"]["state_lost"] == false);
  CHECK(s.Cell(id, "kept")["repl"]["value"] == "'yes'");
}

TEST_CASE("a timed-out cell kills only the interpreter; the next call starts fresh and says state was lost",
          "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  s.Cell(id, "v = 1");
  s.Sh(id, "echo survives > /workspace/f");
  json slow = s.Cell(id, "import time\nwhile True: time.sleep(0.1)", {"--timeout", "1s"});
  CHECK(slow["status"] == "timeout");
  CHECK(slow["repl"]["interpreter_killed"] == true);
  json next = s.Cell(id, "'v' in globals()");
  CHECK(next["status"] == "ok");
  CHECK(next["repl"]["state_lost"] == true);
  CHECK(next["repl"]["value"] == "False");
  json later = s.Cell(id, "1 + 1");
  CHECK(later["repl"]["state_lost"] == false);
  // The session itself lived on.
  CHECK(s.Sh(id, "cat /workspace/f")["stdout"] == "survives\n");
}

TEST_CASE("a timed-out cell's interpreter takes what its cells started with it, a setsid'd process too",
          "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  // An earlier cell's helper and the timed-out cell's own, each in a session of its own: out of the interpreter's
  // process group, in its cgroup.
  s.Cell(id,
         "import subprocess\nsubprocess.Popen(['sh', '-c', 'echo $$ > /workspace/early.pid; exec sleep 300'], "
         "start_new_session=True)");
  json slow = s.Cell(id,
                     "subprocess.Popen(['sh', '-c', 'echo $$ > /workspace/late.pid; exec sleep 300'], "
                     "start_new_session=True)\nimport os, time\n"
                     "while not os.path.exists('/workspace/late.pid') or not os.path.getsize('/workspace/late.pid'):\n"
                     "    time.sleep(0.01)\nwhile True: time.sleep(0.1)",
                     {"--timeout", "5s"});
  CHECK(slow["status"] == "timeout");
  CHECK(slow["repl"]["interpreter_killed"] == true);
  json check = s.Sh(id,
                    "for f in early late; do test -s /workspace/$f.pid || echo $f missing; "
                    "kill -0 $(cat /workspace/$f.pid) 2>/dev/null && echo $f alive; done; echo checked");
  CHECK(check["stdout"] == "checked\n");
  // A plain exec's detached process is not the interpreter's: it lives on through a cell's time-out.
  s.Sh(id, "setsid sh -c 'echo $$ > /workspace/exec.pid; exec sleep 300' >/dev/null 2>&1 &");
  CHECK(s.Cell(id, "while True: pass", {"--timeout", "1s"})["status"] == "timeout");
  CHECK(s.Sh(id, "kill -0 $(cat /workspace/exec.pid) && echo alive")["stdout"] == "alive\n");
}

TEST_CASE("a cell that waits out its time limit behind another does not run and kills nothing", "[session][repl]") {
  Sessions s;
  nsbox::testing::TempDir ready;  // where the slow cell says it holds the interpreter, and is let go
  REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
  std::string id = s.Create({"--bind", ready.path() + ":/ready"});
  REQUIRE(s.Nsbox({"exec", id, "--repl", "--lang", "python", "--code", "keep = 'important'"}).code == 0);
  std::thread slow([&] {
    (void)Run({NsboxBin(), "exec", id, "--timeout", "60s", "--repl", "--lang", "python", "--code",
               "import os, time\nopen('/ready/held', 'w').close()\n"
               "for _ in range(1200):\n    if os.path.exists('/ready/go'): break\n    time.sleep(0.05)"},
              {"NSBOX_STATE_DIR=" + s.state_dir});
  });
  const bool held = WaitFor([&] { return std::filesystem::exists(ready.path() + "/held"); }, 30s);
  Output queued = s.Nsbox({"exec", id, "--json", "--timeout", "1s", "--repl", "--lang", "python", "--code",
                           "print('queued ran')"});
  std::ofstream(ready.path() + "/go").close();
  slow.join();
  REQUIRE(held);
  CHECK(queued.code == 124);
  json q = queued.Json();
  CHECK(q["status"] == "timeout");
  CHECK(q["stdout"] == "");
  CHECK(q["repl"]["interpreter_killed"] == false);
  CHECK(q["reason"].get<std::string>().find("did not run, and the interpreter keeps its state") != std::string::npos);
  // The first cell's name is still there.
  json after = json::parse(s.Nsbox({"exec", id, "--json", "--repl", "--lang", "python", "--code", "keep"}).out);
  CHECK(after["repl"]["value"] == "'important'");
  CHECK(after["repl"]["state_lost"] == false);
}

TEST_CASE("what a cell defines is __main__'s, as a script's: pickled by name, run by multiprocessing's pool",
          "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  s.Cell(id, "import multiprocessing, pickle\ndef square(x): return x * x\nclass Point:\n    def __init__(self, x): "
             "self.x = x");
  json pooled = s.Cell(id, "with multiprocessing.Pool(2) as p: r = p.map(square, range(5))\nr");
  INFO(pooled.dump());
  CHECK(pooled["repl"]["value"] == "[0, 1, 4, 9, 16]");
  CHECK(s.Cell(id, "pickle.loads(pickle.dumps(Point(7))).x")["repl"]["value"] == "7");
  CHECK(s.Cell(id, "__name__")["repl"]["value"] == "'__main__'");
}

TEST_CASE("a cell's --env reaches the running interpreter and stays for later cells", "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  s.Cell(id, "import os\nbefore = os.environ.get('NSBOX_CELL_ENV')");  // the interpreter starts without it
  json with = s.Cell(id, "before, os.environ.get('NSBOX_CELL_ENV')", {"--env", "NSBOX_CELL_ENV=v1"});
  CHECK(with["repl"]["value"] == "(None, 'v1')");
  json child = s.Cell(id, "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'echo $NSBOX_CELL_ENV'])");
  CHECK(child["stdout"] == "v1\n");  // a cell's child process gets it too
  json replaced = s.Cell(id, "os.environ['NSBOX_CELL_ENV']", {"--env", "NSBOX_CELL_ENV=v2"});
  CHECK(replaced["repl"]["value"] == "'v2'");
}

TEST_CASE("a cell past the session's memory limit is an oom, as a script's would be", "[session][repl][cgroup]") {
  Sessions s;
  std::string id = s.Create({"--memory", "128M"});
  json cell = json::parse(s.Nsbox({"exec", id, "--json", "--repl", "--lang", "python", "--code",
                                   "b = bytearray(400 * 1024 * 1024)"}).out);
  CHECK(cell["status"] == "oom");
  CHECK(cell["limits"]["oom_kills"] == 1);
  CHECK(cell["repl"]["interpreter_killed"] == true);
  CHECK(cell["reason"].get<std::string>().find("OOM killer") != std::string::npos);
  // The next cell has a fresh interpreter, and its own limits report.
  json next = json::parse(s.Nsbox({"exec", id, "--json", "--repl", "--lang", "python", "--code", "1 + 1"}).out);
  CHECK(next["status"] == "ok");
  CHECK(next["repl"]["state_lost"] == true);
  CHECK(next["limits"]["oom_kills"] == 0);
}

// A root session holds a host id of its own (a lock file) for its life; `session rm` gives it up with its file, as an
// idle time-out does, rather than leaving the file for another nsbox to find.
TEST_CASE("a removed session gives its host id and the id's lock file up", "[session]") {
  if (::geteuid() != 0) {
    nsbox::testing::RecordSkip("session_tests", "a removed session gives its host id up", "host ids are root's");
    return;
  }
  Sessions s;
  const std::string locks = s.state_dir + "-host-ids";
  ::setenv("NSBOX_HOST_ID_DIR", locks.c_str(), 1);
  std::string first = s.Create(), second = s.Create();
  ::unsetenv("NSBOX_HOST_ID_DIR");
  const auto uid_of = [&](const std::string& id) { return s.Record(id)["sandbox_host_uid"].get<uint64_t>(); };
  CHECK(uid_of(first) != uid_of(second));
  CHECK(std::filesystem::exists(locks + "/" + std::to_string(uid_of(first))));
  CHECK(std::filesystem::exists(locks + "/" + std::to_string(uid_of(second))));
  Output removed = s.Nsbox({"session", "rm", first, second});
  INFO(removed.err);
  CHECK(removed.code == 0);
  CHECK(std::filesystem::is_empty(locks));
  std::filesystem::remove_all(locks);
}

// The interpreter outlives its cells: each cell reports its own share of the interpreter's CPU time and its own peak,
// not nothing (a cell that answered), nor the interpreter's whole life (a cell killed at its time-out).
TEST_CASE("a cell's cpu_ms and peak_memory_bytes are the cell's own", "[session][repl]") {
  Sessions s;
  std::string id = s.Create({"--memory", "512M"});
  s.Cell(id, "x = 1");  // the interpreter's start is the first cell's
  json busy = s.Cell(id, "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass");
  CHECK(busy["status"] == "ok");
  CHECK(busy["cpu_ms"].get<int64_t>() >= 700);
  CHECK_FALSE(busy.contains("measurement_errors"));
  json idle = s.Cell(id, "y = 2");
  CHECK(idle["cpu_ms"].get<int64_t>() < 300);
  json big = s.Cell(id, "b = bytearray(200 << 20)");
  CHECK(big["peak_memory_bytes"].get<uint64_t>() >= (200u << 20));
  s.Cell(id, "del b");
  json small = s.Cell(id, "z = 3");
  CHECK(small["peak_memory_bytes"].get<uint64_t>() < (100u << 20));
  CHECK(small["peak_memory_bytes"].get<uint64_t>() > 0);
  json slow = s.Cell(id, "import time\ntime.sleep(5)", {"--timeout", "1s"});
  CHECK(slow["status"] == "timeout");
  CHECK(slow["cpu_ms"].get<int64_t>() < 300);  // the 800 ms of the busy cell are not this one's
  CHECK(slow["peak_memory_bytes"].get<uint64_t>() < (100u << 20));
}

TEST_CASE("a cell whose new interpreter is held stopped past its time limit is a time-out", "[session][repl]") {
  Sessions s;
  std::string id = s.Create({"--cpus", "0.5"});
  // Left behind by an exec: stops every process that appears in the sandbox, the next interpreter among them.
  constexpr const char* kStopper =
      "import os, signal, time\n"
      "seen = set(os.listdir('/proc'))\n"
      "open('/tmp/stopper-ready', 'w').close()\n"
      "end = time.time() + 20\n"
      "while time.time() < end:\n"
      "    for p in os.listdir('/proc'):\n"
      "        if p.isdigit() and p not in seen:\n"
      "            seen.add(p)\n"
      "            try: os.kill(int(p), signal.SIGSTOP)\n"
      "            except OSError: pass\n"
      "    time.sleep(0.0005)\n";
  std::string script = "cat > /tmp/stopper.py <<'EOF'\n" + std::string(kStopper) +
                       "EOF\nsetsid python3 /tmp/stopper.py >/dev/null 2>&1 < /dev/null &\n"
                       // Builtins only from here: a new process would be stopped too.
                       "until [ -e /tmp/stopper-ready ]; do :; done; echo started";
  REQUIRE(s.Sh(id, script)["stdout"] == "started\n");
  json cell = s.Cell(id, "1", {"--timeout", "3s"});
  INFO(cell.dump());
  CHECK(cell["status"] == "timeout");
  CHECK_THAT(cell["reason"].get<std::string>(), Catch::Contains("time limit of 3000 ms"));
}

TEST_CASE("a crashing cell loses the interpreter's state but not the session", "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  s.Cell(id, "w = 5");
  json crash = s.Cell(id, "import os\nos._exit(7)");
  CHECK(crash["status"] == "exit");
  CHECK(crash["exit_code"] == 7);
  json next = s.Cell(id, "1");
  CHECK(next["repl"]["state_lost"] == true);
}

TEST_CASE("the supervisor's command line shows no invocation: its execs' payloads share it until execve", "[session]") {
  // /proc/PID/cmdline needs no ptrace permission: another process of the session read nsbox's path, the session's
  // options and the server's pid from a payload that had not yet called execve.
  Sessions s;
  std::string id = s.Create({"--memory", "200M"});
  pid_t supervisor = s.Record(id)["supervisor_pid"];
  std::ifstream file("/proc/" + std::to_string(supervisor) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  CHECK(cmdline.starts_with(std::string("nsbox-session\0", 14)));
  CHECK(cmdline.find("200M") == std::string::npos);
  CHECK(cmdline.find("create") == std::string::npos);
  CHECK(s.Sh(id, "echo still")["stdout"] == "still\n");
}

TEST_CASE("a cell that floods the REPL's channel is cut off at the answer's cap; the supervisor stays small",
          "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  REQUIRE(s.Cell(id, "kept = 1")["status"] == "ok");
  pid_t supervisor = s.Record(id)["supervisor_pid"];
  // 400 MiB without a newline: the supervisor once buffered all of it, rescanning it on every read.
  json flood = s.Cell(id, "import os\nb = b'x' * (1 << 20)\nfor i in range(400): os.write(3, b)");
  INFO(flood.dump());
  CHECK(flood["reason"].get<std::string>().starts_with("the cell wrote more than 8 MiB to the REPL's channel (fd 3)"));
  CHECK(flood["repl"]["interpreter_killed"] == true);
  const uint64_t peak = PeakResidentBytes(supervisor);
  CHECK(peak > 0);
  CHECK(peak < (64u << 20));
  json next = s.Cell(id, "'kept' in globals()");
  CHECK(next["status"] == "ok");
  CHECK(next["repl"]["state_lost"] == true);
  CHECK(next["repl"]["value"] == "False");
}

TEST_CASE("a cell that writes its own answer to the REPL's channel never shifts later cells' answers",
          "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  pid_t supervisor = s.Record(id)["supervisor_pid"];
  REQUIRE(s.Cell(id, "kept = 1")["status"] == "ok");
  // A forged answer without the cell's id: out of step at once.
  json forged = s.Cell(id, "import os\n"
                           "os.write(3, b'{\"value\": \"SPOOF\", \"exception\": null, \"traceback\": null}\\n')\n"
                           "print('real output')\n1/0");
  INFO(forged.dump());
  CHECK(forged["repl"]["value"].is_null());
  CHECK(forged["repl"]["interpreter_killed"] == true);
  CHECK(forged["reason"] == "the cell wrote to the REPL's channel (fd 3), which put it out of step; the interpreter "
                            "was killed and its state is lost (the next cell starts a fresh one)");
  json after_forged = s.Cell(id, "6 * 7");
  INFO(after_forged.dump());
  CHECK(after_forged["status"] == "ok");
  CHECK(after_forged["repl"]["value"] == "42");
  CHECK(after_forged["repl"]["state_lost"] == true);
  // One with the right id (read from the driver's frame) is taken, but the real answer that follows it is not given
  // to the next cell: that cell runs in a fresh interpreter and says why.
  REQUIRE(s.Cell(id, "kept = 2")["status"] == "ok");
  json guessed = s.Cell(id,
                        "import os, sys, json, time\nrid = sys._getframe(2).f_locals['request']['id']\n"
                        "os.write(3, (json.dumps({'id': rid, 'value': 'SPOOF'}) + '\\n').encode())\n"
                        "try:\n    time.sleep(0.3)\n    1/0\n"
                        "finally:\n    open('/workspace/guessed-done', 'w').close()");
  CHECK(guessed["repl"]["value"] == "SPOOF");
  // The driver's own answer follows the cell's end at once.
  CHECK(s.Sh(id,
             "i=0; until [ -e guessed-done ] || [ $i -ge 400 ]; do sleep 0.05; i=$((i+1)); done; sleep 1; "
             "ls guessed-done")["stdout"] == "guessed-done\n");
  json after_guessed = s.Cell(id, "'kept' in globals()");
  INFO(after_guessed.dump());
  CHECK(after_guessed["status"] == "ok");
  CHECK(after_guessed["repl"]["value"] == "False");
  CHECK(after_guessed["repl"]["exception"].is_null());
  CHECK(after_guessed["repl"]["state_lost"] == true);
  CHECK(after_guessed["reason"].get<std::string>().find("an earlier cell wrote to the REPL's channel (fd 3)") !=
        std::string::npos);
  // Valid JSON that is not an object: once an uncaught exception in the supervisor, which ended the session.
  json number = s.Cell(id, "import os\nos.write(3, b'5\\n')");
  INFO(number.dump());
  CHECK(number["repl"]["interpreter_killed"] == true);
  CHECK(ProcessExists(supervisor));
  json last = s.Cell(id, "1 + 1");
  CHECK(last["status"] == "ok");
  CHECK(last["repl"]["value"] == "2");
}

TEST_CASE("sys.exit in a cell reports its exit code as a script's would, and the interpreter keeps its state",
          "[session][repl]") {
  Sessions s;
  std::string id = s.Create();
  REQUIRE(s.Cell(id, "import sys\nkept = 'yes'")["status"] == "ok");
  struct Case {
    const char* code;
    const char* status;
    int exit_code;
    const char* stderr_text;
  };
  for (const Case& c : {Case{"sys.exit(0)", "ok", 0, ""}, Case{"sys.exit()", "ok", 0, ""},
                        Case{"raise SystemExit(5)", "exit", 5, ""}, Case{"sys.exit(-1)", "exit", 255, ""},
                        Case{"sys.exit('bye')", "exit", 1, "bye\n"}}) {
    json r = s.Cell(id, c.code);
    INFO(c.code << ": " << r.dump());
    CHECK(r["status"] == c.status);
    CHECK(r["exit_code"] == c.exit_code);
    CHECK(r["stderr"] == c.stderr_text);
    CHECK(r["reason"] == "the cell called sys.exit (exit code " + std::to_string(c.exit_code) +
                             "); the interpreter keeps its state");
    CHECK(r["repl"]["interpreter_killed"] == false);
  }
  json after = s.Cell(id, "kept");
  CHECK(after["repl"]["value"] == "'yes'");
  CHECK(after["repl"]["state_lost"] == false);
}

TEST_CASE("an exec beside another one's OOM keeps its own verdict", "[session][cgroup]") {
  Sessions s;
  nsbox::testing::TempDir ready;  // where the innocent exec says it runs, and is told to end
  REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
  std::string id = s.Create({"--memory", "128M", "--bind", ready.path() + ":/ready"});
  Output innocent;
  std::thread beside([&] {
    innocent = Run({NsboxBin(), "exec", id, "--json", "--", "/bin/sh", "-c",
                    "touch /ready/in; i=0; while [ ! -e /ready/go ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); "
                    "done; kill -9 $$"});
  });
  const bool running = WaitFor([&] { return std::filesystem::exists(ready.path() + "/in"); }, 30s);
  json bomb = json::parse(s.Nsbox({"exec", id, "--json", "--", "/usr/bin/python3", "-c",
                                   "b = bytearray(400 * 1024 * 1024)"}).out);
  std::ofstream(ready.path() + "/go").close();
  beside.join();
  REQUIRE(running);
  CHECK(bomb["status"] == "signal");  // it ran beside the other: its SIGKILL is not known to be its own OOM
  json own = innocent.Json();
  CHECK(own["status"] == "signal");  // killed itself: not an OOM, though the session's counter moved meanwhile
  CHECK(own["signal"] == 9);
  CHECK(own["reason"].get<std::string>().find("while other execs ran too") != std::string::npos);
  // Alone, the same allocation is an OOM.
  json alone = json::parse(s.Nsbox({"exec", id, "--json", "--", "/usr/bin/python3", "-c",
                                    "b = bytearray(400 * 1024 * 1024)"}).out);
  CHECK(alone["status"] == "oom");
}

TEST_CASE("an exec's peak memory is its own, not the supervisor's nor an earlier exec's", "[session]") {
  Sessions s;
  std::string id = s.Create();
  pid_t supervisor = s.Record(id)["supervisor_pid"];
  // 48 MiB of output, all held by the supervisor: its own peak grows past it.
  json loud = s.Exec(id, {"/usr/bin/python3", "-c", "import sys; sys.stdout.write('x' * (48 << 20))"},
                     {"--output-limit", "64M"});
  REQUIRE(loud["stdout_bytes"] == 48u << 20);
  REQUIRE(PeakResidentBytes(supervisor) > (48u << 20));
  json hungry = s.Exec(id, {"/usr/bin/python3", "-c", "b = bytearray(96 << 20)"});
  INFO(hungry.dump());
  CHECK(hungry["peak_memory_bytes"].get<uint64_t>() >= (96u << 20));
  json small = s.Exec(id, {"/bin/true"});
  INFO(small.dump());
  CHECK(small["peak_memory_bytes"].get<uint64_t>() > 0);
  CHECK(small["peak_memory_bytes"].get<uint64_t>() < (16u << 20));
}

TEST_CASE("binary output within the output limit reaches nsbox exec whole, though JSON escapes each byte",
          "[session]") {
  Sessions s;
  std::string id = s.Create();
  // 6 MiB of \x01 a stream: 72 MiB once each byte is "\u0001" in the answer, more than a fixed 64 MiB cap.
  json binary = s.Sh(id, "head -c 6M /dev/zero | tr '\\0' '\\1'; head -c 6M /dev/zero | tr '\\0' '\\2' >&2",
                     {"--output-limit", "8M"});
  INFO(binary.value("reason", ""));
  REQUIRE(binary["status"] == "ok");
  CHECK(binary["stdout"] == std::string(6 << 20, '\x01'));
  CHECK(binary["stderr"] == std::string(6 << 20, '\x02'));
}

TEST_CASE("an exec's time-out kills it and its process group, not the session", "[session]") {
  Sessions s;
  std::string id = s.Create();
  json slow = s.Sh(id, "sleep 100 & echo $! > /workspace/child.pid; sleep 100", {"--timeout", "500ms"});
  CHECK(slow["status"] == "timeout");
  CHECK_THAT(slow["reason"].get<std::string>(), Catch::Contains("500 ms"));  // its own limit, not the default
  json check = s.Sh(id, "sleep 0.1; kill -0 $(cat /workspace/child.pid) 2>/dev/null && echo alive || echo gone");
  CHECK(check["stdout"] == "gone\n");
}

TEST_CASE("what an exec leaves running may go on writing to its stdout and stderr, as a server started with & does",
          "[session]") {
  // Nothing read the ended exec's pipes: the loop's next echo died of SIGPIPE (a server of the session, of EPIPE).
  Sessions s;
  std::string id = s.Create();
  json started = s.Sh(id,
                      "(for i in $(seq 20); do echo tick $i; echo tock $i >&2; echo $i > /tmp/count; sleep 0.05; "
                      "done) & echo started");
  CHECK(started["stdout"] == "started\n");
  json counted = s.Sh(id,
                      "for i in $(seq 100); do [ \"$(cat /tmp/count 2>/dev/null)\" = 20 ] && break; sleep 0.05; "
                      "done; cat /tmp/count");
  CHECK(counted["stdout"] == "20\n");  // its later output went nowhere, not into this exec's
  CHECK(counted["stderr"] == "");
}

TEST_CASE("an exec's time-out also kills what it started in a session of its own", "[session]") {
  Sessions s;
  std::string id = s.Create();
  // setsid leaves the exec's process group and session; a double fork leaves its parent: only the exec's cgroup
  // still holds them.
  json slow = s.Sh(id, "setsid sh -c 'echo $$ > /workspace/detached.pid; exec sleep 300' >/dev/null 2>&1 & "
                       "(sh -c 'echo $$ > /workspace/orphan.pid; exec sleep 300' &) ; sleep 100",
                   {"--timeout", "1s"});
  CHECK(slow["status"] == "timeout");
  json check = s.Sh(id, "for f in detached orphan; do kill -0 $(cat /workspace/$f.pid) 2>/dev/null && echo $f alive; "
                        "done; echo checked");
  CHECK(check["stdout"] == "checked\n");
  // The session itself lives on.
  CHECK(s.Sh(id, "echo still here")["stdout"] == "still here\n");
}

TEST_CASE("a client that goes away mid-exec takes the exec's detached processes with it", "[session]") {
  Sessions s;
  std::string id = s.Create();
  // The client: `nsbox exec` running a script that starts a setsid'd sleeper, then waits.
  pid_t client = ::fork();
  REQUIRE(client >= 0);
  if (client == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    std::string bin = NsboxBin();
    ::execl(bin.c_str(), bin.c_str(), "exec", id.c_str(), "--", "/bin/sh", "-c",
            "setsid sh -c 'echo $$ > /workspace/detached.pid; exec sleep 300' >/dev/null 2>&1 & "
            "echo $$ > /workspace/main.pid; exec sleep 300",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  bool started = WaitFor([&] {
    return s.Sh(id, "[ -s /workspace/detached.pid ] && [ -s /workspace/main.pid ] && echo yes")["stdout"] == "yes\n";
  }, 10s);
  REQUIRE(started);
  REQUIRE(::kill(client, SIGKILL) == 0);
  ::waitpid(client, nullptr, 0);
  // The supervisor sees the client's end of the socket go and kills the exec's group.
  bool gone = WaitFor([&] {
    return s.Sh(id, "for f in detached main; do kill -0 $(cat /workspace/$f.pid) 2>/dev/null && echo $f; done; "
                    "echo checked")["stdout"] == "checked\n";
  }, 10s);
  CHECK(gone);
  CHECK(s.Sh(id, "echo still here")["stdout"] == "still here\n");
}

TEST_CASE("a detached background process keeps its exec's group until the session ends, which removes it",
          "[session]") {
  Sessions s;
  std::string id = s.Create();
  const std::string group = SessionGroupName(s.Record(id)["pid1"]);
  if (group.empty()) {
    nsbox::testing::RecordSkip("session", "exec groups", "the session has no cgroup here");
    return;
  }
  REQUIRE(s.Sh(id, "setsid sleep 1000 >/dev/null 2>&1 &")["status"] == "ok");
  REQUIRE(s.Sh(id, "true")["status"] == "ok");
  // The first exec's group holds the sleep. The second's was empty at its end: removed once its answer went out,
  // when the supervisor also makes the group the next exec will take (empty until then).
  // This session's groups only: other suites on the host may have sessions of their own.
  auto busy_and_empty = [&] {
    std::pair<int, int> counts{0, 0};
    for (const auto& g : nsbox::testing::NsboxGroups()) {
      if (g.find(group + "/exec-") == std::string::npos) continue;
      std::ifstream procs("/sys/fs/cgroup/" + g + "/cgroup.procs");
      std::string first;
      ++(std::getline(procs, first) ? counts.first : counts.second);
    }
    return counts;
  };
  CHECK(WaitFor([&] { return busy_and_empty() == std::pair<int, int>{1, 1}; }, 5s));
  CHECK(s.Nsbox({"session", "rm", id}).code == 0);
  CHECK(WaitFor([&] { return NoGroupNamed(group); }, 5s));
}

TEST_CASE("two execs run at once in one session", "[session]") {
  Sessions s;
  std::string id = s.Create();
  // Each exec says it runs and waits (at most 20 s) for the other to say so: both write their file only when they
  // ran at the same time. The threads only run nsbox; the assertions stay on this thread (Catch2's macros are not
  // thread-safe).
  auto meet = [](const std::string& me, const std::string& other) {
    return fmt::format(
        "touch /workspace/{0}-in; i=0; while [ ! -e /workspace/{1}-in ] && [ $i -lt 400 ]; "
        "do sleep 0.05; i=$((i+1)); done; [ -e /workspace/{1}-in ] && echo {0} > /workspace/{0}",
        me, other);
  };
  Output oa, ob;
  std::thread ta([&] { oa = s.Nsbox({"exec", id, "--json", "--", "/bin/sh", "-c", meet("a", "b")}); });
  std::thread tb([&] { ob = s.Nsbox({"exec", id, "--json", "--", "/bin/sh", "-c", meet("b", "a")}); });
  ta.join();
  tb.join();
  INFO(oa.err << ob.err);
  json a = json::parse(oa.out, nullptr, false), b = json::parse(ob.out, nullptr, false);
  CHECK(a["status"] == "ok");
  CHECK(b["status"] == "ok");
  CHECK(s.Sh(id, "cat /workspace/a /workspace/b")["stdout"] == "a\nb\n");
}

TEST_CASE("the result lists the workspace files an exec created or changed, with their sizes", "[session]") {
  Sessions s;
  std::string id = s.Create();
  s.Sh(id, "echo old > same.txt; echo old > changed.txt");
  json j = s.Sh(id, "mkdir -p out/deep; printf 12345 > out/deep/new.bin; echo more >> changed.txt; cat same.txt");
  json expected = json::array({{{"path", "/workspace/changed.txt"}, {"size", 9}},
                               {{"path", "/workspace/out/deep/new.bin"}, {"size", 5}}});
  CHECK(j["changed_files"] == expected);
  json none = s.Sh(id, "cat same.txt");
  CHECK(none["changed_files"] == json::array());
  json cell = s.Cell(id, "open('/workspace/from_repl.txt', 'w').write('abc')");
  CHECK(cell["changed_files"] == json::array({{{"path", "/workspace/from_repl.txt"}, {"size", 3}}}));
  CHECK_FALSE(cell.contains("changed_files_truncated"));
  // A tree deeper than the supervisor walks (it runs outside the sandbox's limits): the list says it is partial.
  json deep = s.Sh(id, "mkdir -p $(printf 'd/%.0s' $(seq 70)) && echo x > top.txt");
  CHECK(deep["changed_files_truncated"] == true);
  CHECK(deep["changed_files"] == json::array({{{"path", "/workspace/top.txt"}, {"size", 2}}}));
}

// Names of control bytes are six times their length as JSON: a list of them that fits the walk's 16 MiB of paths
// once outgrew the exec answer's allowance, and the program's result was lost as session_lost.
TEST_CASE("a changed-files list of control-byte names is cut short; the exec's result still comes back",
          "[session]") {
  Sessions s;
  std::string id = s.Create();
  json made = s.Sh(id,
                   "d=$(printf '\\001%.0s' $(seq 255)); mkdir -p \"$d/$d/$d\" && cd \"$d/$d/$d\" && "
                   "n=$(printf '\\001%.0s' $(seq 200)); for i in $(seq 2000); do : > \"$n$i\"; done; echo made");
  INFO(made.dump().substr(0, 2000));
  CHECK(made["status"] == "ok");
  CHECK(made["stdout"] == "made\n");
  CHECK(made["changed_files_truncated"] == true);
  CHECK(made["changed_files"].size() > 0);
  CHECK(made["changed_files"].size() < 2000);
  CHECK(made["changed_files"].dump().size() <= 8u << 20);
}

TEST_CASE("an exec whose end is first seen past its time-out is one, and what it left running ends", "[session]") {
  // The supervisor, stopped while the program runs and kept stopped past its time-out (2 s), finds the program ended
  // and its time-out past: the result said "timeout ... the exec and its process group were killed" while what it
  // left ran on (a setsid child; without limits, a child in the exec's own process group, which has no cgroup to kill
  // it with). The supervisor is stopped only once the program has started its beating child, and the attempt counts
  // only when the program ended while the supervisor was stopped, so a slow machine cannot make the case vacuous.
  for (const std::vector<std::string>& create :
       {std::vector<std::string>{}, std::vector<std::string>{"--dangerously-run-without-limits"}}) {
    const bool limits = create.empty();
    INFO((limits ? "with limits" : "without limits"));
    const std::string marker = nsbox::testing::UniqueMarker("late-end");
    // The beating child is python3, the program sh: the test tells them apart by name. A beat is written whole
    // (renamed into place), so a kill between two writes never leaves the file empty.
    const std::string beat_loop =
        "import os, time\n"
        "while True:\n"
        "    open('/tmp/beat.new', 'w').write(str(time.time_ns()))\n"
        "    os.rename('/tmp/beat.new', '/tmp/late-beat')\n"
        "    time.sleep(0.05)\n";
    const std::string script = std::string(limits ? "setsid " : "") + "python3 -c \"" + beat_loop + "\" " + marker +
                               " >/dev/null 2>&1 & while [ ! -s /tmp/late-beat ]; do sleep 0.02; done; sleep 1; :";
    auto named = [&](const std::string& comm) { return nsbox::testing::ProgramWithMarkerNamed(marker, comm); };
    // Each attempt has a session of its own, so one that came too late leaves nothing beating in the next.
    std::optional<Sessions> s;
    std::string id;
    json late;
    bool stopped_in_time = false;
    for (int attempt = 0; attempt < 3 && !stopped_in_time; ++attempt) {
      s.emplace();
      id = s->Create(create);
      const pid_t supervisor = s->Record(id)["supervisor_pid"];
      std::thread stopper([&] {
        if (!WaitFor([&] { return named("python3"); }, 30s)) return;
        ::kill(supervisor, SIGSTOP);
        const auto stopped = std::chrono::steady_clock::now();
        // The attempt counts when the program was still running at the stop and ended during it (a zombie's
        // cmdline is empty): its end is then first seen after the resume, past the time-out.
        const bool running = named("sh");
        const bool ended = running && WaitFor([&] { return !named("sh"); }, 20s);
        std::this_thread::sleep_until(stopped + 2500ms);
        ::kill(supervisor, SIGCONT);
        stopped_in_time = running && ended;
      });
      late = s->Sh(id, script, {"--timeout", "2s"});
      stopper.join();
    }
    INFO(late.dump());
    REQUIRE(stopped_in_time);
    CHECK(late["status"] == "timeout");
    const std::string beat = s->Sh(id, "cat /tmp/late-beat")["stdout"];
    CHECK(beat.size() > 10);  // it did beat
    std::this_thread::sleep_for(300ms);
    CHECK(s->Sh(id, "cat /tmp/late-beat")["stdout"] == beat);  // and beats no more
  }
}

// A process of the session that stops an exec's payload before its execve held the session's start lock until that
// exec's own deadline: every other exec started meanwhile waited with it, past its own time-out, and its client gave
// up (session_lost). An exec now waits for the lock only until its own deadline, and ends as a time-out.
TEST_CASE("an exec held up behind another exec's stopped start ends at its own time-out", "[session]") {
  Sessions s;
  std::string id = s.Create();
  // Stops each new pid of the namespace as soon as it exists, and lets it go again unless it is a payload caught
  // before its execve (not dumpable yet: its exe link is unreadable), which stays stopped.
  const std::string stopper = R"(
import os, signal, time
def last(): return int(open("/proc/sys/kernel/ns_last_pid").read())
target = last() + 1
misses = 0
end = time.time() + 240
while time.time() < end:
    try:
        os.kill(target, signal.SIGSTOP)
    except ProcessLookupError:
        misses += 1
        if misses % 20000 == 0 and last() >= target and not os.path.exists("/proc/%d" % target):
            target += 1
        continue
    except PermissionError:
        continue
    try:
        os.readlink("/proc/%d/exe" % target)
        os.kill(target, signal.SIGCONT)
    except OSError:
        pass
    target += 1
    misses = 0
)";
  char file[] = "/tmp/nsbox-stopper-XXXXXX";
  int fd = ::mkstemp(file);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, stopper.data(), stopper.size()) == static_cast<ssize_t>(stopper.size()));
  ::close(fd);
  Output copied = s.Nsbox({"cp", file, id + ":stopper.py"});
  ::unlink(file);
  INFO(copied.err);
  REQUIRE(copied.code == 0);
  // C runs from before the stopper until the test lets it end (a file copied in by `nsbox cp`, which starts no
  // process in the sandbox).
  Output c;
  std::chrono::steady_clock::time_point c_ended;
  const std::string c_marker = nsbox::testing::UniqueMarker("running-c");
  std::thread running([&] {
    c = s.Nsbox({"exec", id, "--json", "--timeout", "120s", "--", "/bin/sh", "-c",
                 "while [ ! -e /workspace/go ]; do sleep 0.05; done; echo C", c_marker});
    c_ended = std::chrono::steady_clock::now();
  });
  // C's program is past its execve (its sh holds the marker) before the stopper starts, or the stopper would catch it.
  REQUIRE(WaitFor([&] { return nsbox::testing::ProgramWithMarkerNamed(c_marker, "sh"); }, 30s));
  REQUIRE(s.Sh(id, "setsid python3 /workspace/stopper.py </dev/null >/dev/null 2>&1 & sleep 0.5")["status"] == "ok");
  char go[] = "/tmp/nsbox-go-XXXXXX";
  int go_fd = ::mkstemp(go);
  REQUIRE(go_fd >= 0);
  ::close(go_fd);
  bool held_up = false;
  for (int round = 0; round < 20 && !held_up; ++round) {
    Output a;
    std::thread first([&] { a = s.Nsbox({"exec", id, "--json", "--timeout", "20s", "--", "/bin/echo", "A"}); });
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // A's start is stopped by now, or the round retries
    const auto b_started = std::chrono::steady_clock::now();
    Output b = s.Nsbox({"exec", id, "--json", "--timeout", "2s", "--", "/bin/echo", "B"});
    const auto b_ended = std::chrono::steady_clock::now();
    json result = json::parse(b.out, nullptr, false);
    const bool b_held = result.value("reason", "").find("never started") != std::string::npos;
    std::chrono::steady_clock::time_point released;
    if (b_held) {  // A's start is stopped, and holds the start lock until 20 s: now let C end
      released = std::chrono::steady_clock::now();
      REQUIRE(s.Nsbox({"cp", go, id + ":go"}).code == 0);
    }
    first.join();
    if (!b_held) continue;
    held_up = true;
    running.join();
    INFO(b.out << b.err << a.out << c.out << c.err);
    CHECK(json::parse(a.out, nullptr, false).value("status", "") == "timeout");
    CHECK(result.value("status", "") == "timeout");
    // Watchdogs that tell the cases apart, not timings: B answers at its own 2 s, not at A's 20 s; C answers when
    // its program ends, not once A's stopped start gives up.
    CHECK(b_ended - b_started < 12s);
    CHECK(json::parse(c.out, nullptr, false).value("stdout", "") == "C\n");
    CHECK(c_ended - released < 12s);
  }
  ::unlink(go);
  if (!held_up) {
    (void)s.Nsbox({"cp", "/etc/hostname", id + ":go"});
    running.join();
  }
  CHECK(held_up);
}

TEST_CASE("an exec's code is a sealed descriptor, never a file in /workspace", "[session]") {
  Sessions s;
  std::string id = s.Create();
  const std::string code = R"(import errno, os, sys
def err(f, *a):
    try:
        f(*a)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
path = sys.argv[0]
fd = os.open(path, os.O_RDWR)
print(path.startswith("/dev/fd/"), os.listdir("/workspace"), err(os.write, fd, b"x"), err(os.ftruncate, fd, 0),
      err(os.unlink, path))
)";
  for (int round = 0; round < 2; ++round) {
    Output during = s.Nsbox({"exec", id, "--lang", "python", "--code", code});
    INFO(during.err);
    REQUIRE(during.code == 0);
    CHECK(during.out == "True [] EPERM EPERM EPERM\n");
  }
}

TEST_CASE("cp copies regular files both ways, owned by the sandbox user inside", "[session][cp]") {
  Sessions s;
  std::string id = s.Create();
  std::string host_in = s.state_dir + "/../nsbox-cp-in-" + id;
  std::string host_out = s.state_dir + "/../nsbox-cp-out-" + id;
  { std::ofstream(host_in) << "payload\n"; }
  CHECK(s.Nsbox({"cp", host_in, id + ":data/in.txt"}).code == 125);  // no such directory yet
  s.Sh(id, "mkdir data");
  Output in = s.Nsbox({"cp", host_in, id + ":/workspace/data/in.txt"});
  INFO(in.err);
  CHECK(in.code == 0);
  CHECK(s.Sh(id, "cat data/in.txt; stat -c %U data/in.txt")["stdout"] == "payload\nsandbox\n");
  s.Sh(id, "echo result > data/out.txt");
  CHECK(s.Nsbox({"cp", id + ":data/out.txt", host_out}).code == 0);
  std::ifstream result(host_out);
  std::string line;
  std::getline(result, line);
  CHECK(line == "result");
  // Into a directory (an empty PATH is /workspace, a PATH ending in '/' a directory): the file keeps its name.
  const std::string name = std::filesystem::path(host_in).filename();
  CHECK(s.Nsbox({"cp", host_in, id + ":"}).code == 0);
  CHECK(s.Nsbox({"cp", host_in, id + ":data/"}).code == 0);
  CHECK(s.Sh(id, "cat " + name + " data/" + name)["stdout"] == "payload\npayload\n");
  // Out of one: a directory is not a file.
  CHECK(s.Nsbox({"cp", id + ":", host_out}).code == 125);
  std::filesystem::remove(host_in);
  std::filesystem::remove(host_out);
}

TEST_CASE("cp out over an existing host file keeps its mode, and its other hard links see the copy", "[session][cp]") {
  Sessions s;
  std::string id = s.Create();
  s.Sh(id, "printf 'echo new\\n' > script.sh");
  const std::string dir = s.state_dir + "/../nsbox-cp-keep-" + id;
  std::filesystem::create_directory(dir);
  const std::string script = dir + "/script.sh", linked = dir + "/linked", other = dir + "/other";
  { std::ofstream(script) << "echo old\n"; }
  REQUIRE(::chmod(script.c_str(), 0750) == 0);
  REQUIRE(s.Nsbox({"cp", id + ":script.sh", script}).code == 0);
  struct stat st {};
  REQUIRE(::stat(script.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0750);  // still executable: the new file took the old one's mode
  { std::ofstream(linked) << "old\n"; }
  REQUIRE(::link(linked.c_str(), other.c_str()) == 0);
  REQUIRE(s.Nsbox({"cp", id + ":script.sh", linked}).code == 0);
  std::ifstream through_other(other);
  std::string line;
  std::getline(through_other, line);
  CHECK(line == "echo new");  // a hard-linked file is written in place, as cp(1) does
  std::filesystem::remove_all(dir);
}

TEST_CASE("cp killed midway leaves neither a partial file in the workspace nor a damaged host file",
          "[session][cp]") {
  Sessions s;
  std::string id = s.Create({"--tmpfs-size", "512M"});
  const std::string big = s.state_dir + "/../nsbox-cp-big-" + id;
  {
    std::ofstream out(big, std::ios::binary);
    std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 48; ++i) out << chunk;
  }
  REQUIRE(s.Nsbox({"cp", big, id + ":whole.bin"}).code == 0);
  // Kills at moments spread over the copy's life (it takes some tens of milliseconds each way).
  for (int i = 0; i < 8; ++i) {
    const auto delay = std::chrono::milliseconds(5 + 12 * i);
    pid_t in = ::fork();
    if (in == 0) {
      ::execl(NsboxBin().c_str(), "nsbox", "cp", big.c_str(), (id + ":in" + std::to_string(i) + ".bin").c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(delay);
    ::kill(in, SIGKILL);
    ::waitpid(in, nullptr, 0);
    const std::string host = s.state_dir + "/../nsbox-cp-out-" + std::to_string(i) + "-" + id;
    { std::ofstream(host) << "ORIGINAL\n"; }
    pid_t out = ::fork();
    if (out == 0) {
      ::execl(NsboxBin().c_str(), "nsbox", "cp", (id + ":whole.bin").c_str(), host.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(delay);
    ::kill(out, SIGKILL);
    ::waitpid(out, nullptr, 0);
    // The host file is the old one or the whole new one, never a part.
    const auto size = std::filesystem::file_size(host);
    CHECK((size == 9 || size == 48u << 20));
    std::filesystem::remove(host);
  }
  // In the workspace: whole copies only, and no temporary file of a killed copy.
  json listing =
      s.Sh(id, "ls -A /workspace; for f in /workspace/*; do [ $(stat -c %s $f) = 50331648 ] || echo PART $f; done");
  INFO(listing["stdout"].get<std::string>());
  CHECK(listing["stdout"].get<std::string>().find(".nsbox-cp") == std::string::npos);
  CHECK(listing["stdout"].get<std::string>().find("PART") == std::string::npos);
  std::filesystem::remove(big);
}

TEST_CASE("cp refuses links out of the workspace, FIFOs, devices, oversized files and malformed paths",
          "[session][cp]") {
  Sessions s;
  std::string id = s.Create();
  std::string host_out = s.state_dir + "/../nsbox-cp-attack-" + id;
  s.Sh(id, "ln -s /etc/shadow shadow; ln -s /etc sub; ln -s /proc/1/root root1; mkfifo fifo; "
           "head -c 4096 /dev/zero > big; ln -s ../../../../etc/passwd up");
  for (const char* src : {":shadow", ":sub/shadow", ":root1/etc/hostname", ":up", ":../etc/passwd"}) {
    Output o = s.Nsbox({"cp", id + src, host_out});
    INFO(src << ": " << o.err);
    CHECK(o.code == 125);
    CHECK(!std::filesystem::exists(host_out));
  }
  // Refused without being opened: an open would wait for a writer that never comes (the watchdog's 137).
  Output fifo = Run({"timeout", "-s", "KILL", "60", NsboxBin(), "cp", id + ":fifo", host_out});
  CHECK(fifo.code == 125);
  CHECK(fifo.err.find("FIFO") != std::string::npos);
  Output big = s.Nsbox({"cp", "--max-size", "1K", id + ":big", host_out});
  CHECK(big.code == 125);
  CHECK(!std::filesystem::exists(host_out));
  // Copying in over a link replaces the link: the host's file it pointed at is untouched.
  std::string host_in = s.state_dir + "/../nsbox-cp-attack-in-" + id;
  { std::ofstream(host_in) << "overwrite\n"; }
  Output over = s.Nsbox({"cp", host_in, id + ":shadow"});
  CHECK(over.code == 0);
  CHECK(s.Sh(id, "[ -L shadow ] && echo link || cat shadow")["stdout"] == "overwrite\n");
  CHECK(s.Nsbox({"cp", host_in, id + ":sub/x"}).code == 125);
  CHECK(s.Nsbox({"cp", host_in, id + ":fifo"}).code == 0);  // the FIFO is replaced, never opened
  // On the host side too, a link as the file is refused, not followed (a planted one, or one pointing nowhere).
  std::string host_link = s.state_dir + "/../nsbox-cp-link-" + id;
  std::string host_target = s.state_dir + "/../nsbox-cp-link-target-" + id;
  REQUIRE(::symlink(host_target.c_str(), host_link.c_str()) == 0);
  Output through = s.Nsbox({"cp", id + ":big", host_link});
  CHECK(through.code == 125);
  CHECK(through.err.find("a symbolic link") != std::string::npos);
  CHECK(!std::filesystem::exists(host_target));
  Output from_link = s.Nsbox({"cp", host_link, id + ":from-link"});
  CHECK(from_link.code == 125);
  std::filesystem::remove(host_link);
  // Devices: /dev/null from the host side is refused as well.
  CHECK(s.Nsbox({"cp", "/dev/null", id + ":devnull"}).code == 125);
  // Malformed: both or neither side in a session, a path outside /workspace, an unknown session.
  CHECK(s.Nsbox({"cp", host_in, host_out}).code == 125);
  CHECK(s.Nsbox({"cp", id + ":a", id + ":b"}).code == 125);
  CHECK(s.Nsbox({"cp", id + ":/etc/passwd", host_out}).code == 125);
  Output unknown = s.Nsbox({"cp", "snosuchsession:a", host_out});
  CHECK(unknown.code == 125);
  CHECK(unknown.err.find("no such session") != std::string::npos);
  CHECK(!std::filesystem::exists(host_out));
  std::filesystem::remove(host_in);
}

TEST_CASE("session ls lists live sessions; rm ends them and a second rm is a one-line error", "[session]") {
  Sessions s;
  std::string id = s.Create({"--name", "listed", "--memory", "256M"});
  Output dup = s.Nsbox({"session", "create", "--name", "listed"});
  CHECK(dup.code == 125);
  // An owner that is gone already: refused, not a session that ends as soon as it is made.
  pid_t ended = ::fork();
  if (ended == 0) ::_exit(0);
  ::waitpid(ended, nullptr, 0);
  Output orphan = s.Nsbox({"session", "create", "--end-with-pid", std::to_string(ended)});
  CHECK(orphan.code == 125);
  CHECK(orphan.err == fmt::format("nsbox session create: --end-with-pid {}: no such process\n", ended));
  // 0 is no process: it tied the session to nothing.
  Output zero = s.Nsbox({"session", "create", "--end-with-pid", "0"});
  CHECK(zero.code == 125);
  CHECK(zero.err == "nsbox session create: --end-with-pid must be a process id\n");
  Output ls = s.Nsbox({"session", "ls", "--json"});
  REQUIRE(ls.code == 0);
  json rows = ls.Json();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["id"] == id);
  CHECK(rows[0]["name"] == "listed");
  CHECK(rows[0]["state"] == "live");
  CHECK(rows[0]["limits"]["memory"] == "256M");
  CHECK(rows[0]["memory_bytes"].get<uint64_t>() > 0);
  CHECK(rows[0]["age_ms"].get<int64_t>() >= 0);
  for (bool as_json : {true, false}) {  // a listing that cannot be written is an error, not a silent 0
    std::string list = std::string("exec \"$0\" session ls ") + (as_json ? "--json" : "") + " > /dev/full";
    Output full = Run({"/bin/sh", "-c", list, NsboxBin()});
    CHECK(full.code == 125);
    CHECK(full.err == "nsbox session ls: writing the list: No space left on device (ENOSPC)\n");
  }
  CHECK(s.Sh("listed", "echo by-name")["stdout"] == "by-name\n");
  // memory_bytes is what the memory limit counts, the kernel's memory for the session's files too: 20000 empty files
  // hold no page and no process memory, but about 18 MiB of inodes and dentries.
  CHECK(s.Exec(id, {"/usr/bin/python3", "-c", "[open('/tmp/f%d' % i, 'w').close() for i in range(20000)]"})["status"] ==
        "ok");
  CHECK(s.Nsbox({"session", "ls", "--json"}).Json()[0]["memory_bytes"].get<uint64_t>() >= (12u << 20));
  pid_t pid1 = s.Record(id)["pid1"];
  CHECK(s.Nsbox({"session", "rm", "listed"}).code == 0);
  CHECK(!std::filesystem::exists(s.state_dir + "/" + id));
  CHECK(WaitFor([&] { return ProcessGone(pid1); }, 15s));
  Output again = s.Nsbox({"session", "rm", id});
  CHECK(again.code == 125);
  CHECK(again.err.find("no such session") != std::string::npos);
  CHECK(std::count(again.err.begin(), again.err.end(), '\n') == 1);
  Output exec = s.Nsbox({"exec", id, "--", "/bin/true"});
  CHECK(exec.code == 125);
  // With --json the missing session is a field of the result, for programs (a runtime starts a fresh session on it).
  Output exec_json = s.Nsbox({"exec", id, "--json", "--", "/bin/true"});
  CHECK(exec_json.code == 125);
  json gone = exec_json.Json();
  CHECK(gone["status"] == "setup_error");
  CHECK(gone["session_not_found"] == id);
  CHECK(s.Nsbox({"session", "ls", "--json"}).Json().empty());
}

TEST_CASE("a removed session leaves no cgroup reaper behind for init to reap", "[session]") {
  // The reaper leads a session of its own (setsid), as the sandbox's pid 1 does; the supervisor, a daemon, is init's
  // to reap by design.
  Sessions s;
  size_t before = nsbox::testing::NsboxZombiesOfInit(/*session_leaders=*/true);
  for (int i = 0; i < 3; ++i) {
    std::string id = s.Create();
    CHECK(s.Nsbox({"session", "rm", id}).code == 0);
  }
  CHECK(nsbox::testing::NsboxZombiesOfInit(/*session_leaders=*/true) <= before);
}

TEST_CASE("session rm given one session twice (by id and by name) ends it once and succeeds", "[session]") {
  Sessions s;
  std::string id = s.Create({"--name", "twice"});
  Output rm = s.Nsbox({"session", "rm", id, "twice", id});
  INFO(rm.err);
  CHECK(rm.code == 0);
  CHECK(rm.err.empty());
  CHECK(s.Nsbox({"session", "ls", "--json"}).Json().empty());
  // An empty --name is a bad name, not "no name".
  Output empty_name = s.Nsbox({"session", "create", "--name", ""});
  CHECK(empty_name.code == 125);
  CHECK(empty_name.err.find("--name ''") != std::string::npos);
  CHECK(s.Nsbox({"session", "ls", "--json"}).Json().empty());
}

TEST_CASE("create whose id cannot be written ends the session again and fails, exit 125", "[session][lifecycle]") {
  Sessions s;
  // /dev/full: the id is lost, so the session would live on unseen until its idle time-out.
  Output o = Run({"/bin/sh", "-c", "exec \"$0\" session create > /dev/full", NsboxBin()});
  CHECK(o.code == 125);
  CHECK(o.err == "nsbox session create: writing the new session's id (the session was ended again): No space left on "
                 "device (ENOSPC)\n");
  Output ls = s.Nsbox({"session", "ls", "--json"});
  CHECK(ls.code == 0);
  CHECK(ls.Json() == json::array());
}

TEST_CASE("create killed before it passed the id on leaves no session behind", "[session][lifecycle]") {
  Sessions s;
  // SIGKILL at moments spread over create's life: before the supervisor exists, while it starts the sandbox, after it
  // is ready. Only a create that printed its id may leave a session: the others' sessions were never claimed.
  int printed = 0;
  for (int i = 0; i < 12; ++i) {
    int out[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    pid_t create = ::fork();
    if (create == 0) {
      ::dup2(out[1], 1);
      ::execl(NsboxBin().c_str(), "nsbox", "session", "create", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(4 * i));
    ::kill(create, SIGKILL);
    int status = 0;
    ::waitpid(create, &status, 0);
    if (!ReadAll(out[0]).empty()) ++printed;
    ::close(out[0]);
  }
  // Unclaimed sessions end by themselves, at once (not at their idle time-out). (A create killed between printing
  // and claiming, a window of one system call, would leave fewer, never more.)
  size_t live = 0;
  for (int wait = 0; wait < 100; ++wait) {
    live = s.Nsbox({"session", "ls", "--json"}).Json().size();
    if (live <= static_cast<size_t>(printed)) break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(live <= static_cast<size_t>(printed));
}

TEST_CASE("a session survives the command that created it and ends by its idle time-out with nothing left",
          "[session][lifecycle]") {
  Sessions s;
  std::string id = s.Create({"--idle-timeout", "6s"});
  json record = s.Record(id);
  pid_t supervisor = record["supervisor_pid"], pid1 = record["pid1"];
  CHECK(ProcessExists(supervisor));
  CHECK(s.Sh(id, "echo alive")["stdout"] == "alive\n");
  // Listing sessions is not using them: it does not put the idle time-out off.
  std::this_thread::sleep_for(800ms);
  Output ls = s.Nsbox({"session", "ls", "--json"});
  REQUIRE(ls.Json().size() == 1);
  CHECK(ls.Json()[0]["idle_ms"].get<int64_t>() >= 700);
  CHECK(WaitFor([&] { return !std::filesystem::exists(s.state_dir + "/" + id); }, 20s));
  CHECK(WaitFor([&] { return ProcessGone(supervisor) && ProcessGone(pid1); }, 15s));
  CHECK(s.Nsbox({"exec", id, "--", "/bin/true"}).code == 125);
}

TEST_CASE("SIGTERM to a session's supervisor ends the session as rm does, leaving nothing", "[session][lifecycle]") {
  // Its default action killed the supervisor on the spot: the state stayed until the next nsbox call cleaned it.
  Sessions s;
  std::string id = s.Create();
  json record = s.Record(id);
  pid_t supervisor = record["supervisor_pid"], pid1 = record["pid1"];
  REQUIRE(::kill(supervisor, SIGTERM) == 0);
  CHECK(WaitFor([&] { return !std::filesystem::exists(s.state_dir + "/" + id); }, 15s));
  CHECK(WaitFor([&] { return ProcessGone(supervisor) && ProcessGone(pid1); }, 15s));
}

TEST_CASE("a session ends at its maximum lifetime even while it is used", "[session][lifecycle]") {
  Sessions s;
  std::string id = s.Create({"--max-lifetime", "1500ms"});
  // Several execs in flight when the session ends: each finishes its report while the session tears down (a report
  // once read the session's cgroup after the teardown had freed it, and the supervisor crashed, leaving its state).
  std::vector<std::thread> others;
  for (int i = 0; i < 3; ++i) others.emplace_back([&] { s.Nsbox({"exec", id, "--json", "--", "/bin/sleep", "10"}); });
  Output cut = s.Nsbox({"exec", id, "--json", "--", "/bin/sleep", "10"});
  for (auto& t : others) t.join();
  // Cut short: either a result that is not ok, or a one-line error that the session ended.
  CHECK(cut.code != 0);
  CHECK(WaitFor([&] { return !std::filesystem::exists(s.state_dir + "/" + id); }, 15s));
}

TEST_CASE("an exec or a cell cut short by the session's end says how the session ended", "[session][lifecycle]") {
  Sessions s;
  // Long enough for both to start on a loaded machine; each runs well past it.
  std::string id = s.Create({"--max-lifetime", "6s"});
  Output cell;
  std::thread cell_client([&] {
    cell = s.Nsbox({"exec", id, "--json", "--lang", "python", "--repl", "--code", "import time\ntime.sleep(60)"});
  });
  json exec = s.Exec(id, {"/bin/sleep", "60"});
  cell_client.join();
  CHECK(exec["status"] == "signal");
  CHECK(exec["reason"] ==
        "the session ended while the exec ran (its maximum lifetime of 6000 ms was reached); the "
        "exec was killed");
  INFO(cell.err);
  json cut_cell = json::parse(cell.out, nullptr, false);
  CHECK(cut_cell["reason"] ==
        "the session ended while the cell ran (its maximum lifetime of 6000 ms was reached); "
        "the interpreter was killed");
  CHECK(cut_cell["repl"]["interpreter_killed"] == true);

  std::string removed = s.Create();
  Output cut;
  std::thread client([&] {
    cut = s.Nsbox({"exec", removed, "--json", "--", "/bin/sh", "-c", "touch started; sleep 10"});
  });
  bool started = WaitFor([&] { return s.Sh(removed, "[ -e started ] && echo yes")["stdout"] == "yes\n"; }, 10s);
  CHECK(s.Nsbox({"session", "rm", removed}).code == 0);
  client.join();
  REQUIRE(started);
  INFO(cut.err);
  json by_rm = json::parse(cut.out, nullptr, false);
  CHECK(by_rm["reason"] == "the session ended while the exec ran (removed by nsbox session rm); the exec was killed");
}

TEST_CASE("a session whose supervisor was killed is cleaned up by the next nsbox call", "[session][lifecycle]") {
  Sessions s;
  std::string id = s.Create();
  s.Sh(id, "setsid sleep 1000 >/dev/null 2>&1 &");
  json record = s.Record(id);
  pid_t supervisor = record["supervisor_pid"], pid1 = record["pid1"];
  const std::string group = SessionGroupName(pid1);
  REQUIRE(::kill(supervisor, SIGKILL) == 0);
  // pid 1 (and its namespace) died with it. Its exit waits until the parked payload (the supervisor's child, in the
  // namespace) is reaped by the host's init, which here reaps orphans every 2 s; then pid 1 itself is reaped so.
  CHECK(WaitFor([&] { return ProcessGone(pid1); }, 15s));
  CHECK(std::filesystem::exists(s.state_dir + "/" + id));
  Output ls = s.Nsbox({"session", "ls", "--json"});
  CHECK(ls.Json().empty());
  CHECK(!std::filesystem::exists(s.state_dir + "/" + id));
  // The reaper removed the session's groups, and the exec's group below them that the sleep kept.
  if (!group.empty()) CHECK(WaitFor([&] { return NoGroupNamed(group); }, 5s));
}

// `nsbox ARGS...` under a 60 s watchdog: a client that hangs is killed (exit 137) and the test fails, instead of
// hanging the suite. Not a timing assertion: every call checked with it has a bound far below 60 s.
Output NsboxWithin60s(std::vector<std::string> args) {
  args.insert(args.begin(), {"timeout", "-s", "KILL", "60", NsboxBin()});
  return Run(args);
}

TEST_CASE("a stopped supervisor: exec ends past its time-out, ls lists the other sessions, rm --all ends both",
          "[session][lifecycle][stopped]") {
  const std::string marker = nsbox::testing::UniqueMarker("stopped-supervisor");
  Sessions s;
  std::string good = s.Create({"--name", "healthy"});
  std::string bad = s.Create({"--name", "stopped"});
  s.Sh(bad, "setsid sh -c 'sleep 1000; :' " + marker + " >/dev/null 2>&1 &");
  REQUIRE(nsbox::testing::WaitForPidWithMarker(marker, 10s));
  json record = s.Record(bad);
  pid_t supervisor = record["supervisor_pid"], pid1 = record["pid1"];
  pid_t good_supervisor = s.Record(good)["supervisor_pid"];
  const std::string group = SessionGroupName(pid1), good_group = SessionGroupName(s.Record(good)["pid1"]);
  if (group.empty()) WARN("the sessions have no cgroups here: their removal is not checked");
  REQUIRE(::kill(supervisor, SIGSTOP) == 0);

  // The exec's own time-out and a grace after it; then the client says the session did not answer. The request
  // reached the supervisor's socket, so the program may have run: session_lost, not setup_error.
  // All the clients at once: each has its own deadline, and none waits for another.
  const std::string host_copy = s.state_dir + "-copy";
  Output exec, ls, ls_text, cp;
  {
    std::vector<std::thread> clients;
    clients.emplace_back(
        [&] { exec = NsboxWithin60s({"exec", "stopped", "--json", "--timeout", "2s", "--", "/bin/echo", "hi"}); });
    clients.emplace_back([&] { ls = NsboxWithin60s({"session", "ls", "--json"}); });
    clients.emplace_back([&] { ls_text = NsboxWithin60s({"session", "ls"}); });
    clients.emplace_back([&] { cp = NsboxWithin60s({"cp", "stopped:file", host_copy}); });
    for (auto& client : clients) client.join();
  }
  INFO(exec.err);
  REQUIRE(exec.code != 137);  // the watchdog's SIGKILL: the client hung
  CHECK(exec.code == 125);
  json lost = json::parse(exec.out, nullptr, false);
  CHECK(lost["status"] == "session_lost");
  CHECK(lost["exit_code"] == -1);
  CHECK_THAT(lost["reason"].get<std::string>(),
             Catch::Contains("session " + bad + " (stopped): its supervisor (pid " + std::to_string(supervisor) +
                             ", stopped) did not answer the exec request within 12 s"));
  CHECK(std::count(exec.err.begin(), exec.err.end(), '\n') == 1);

  // The healthy session is listed as ever; the stopped one is there, marked, with the reason on stderr.
  INFO(ls.err);
  REQUIRE(ls.code != 137);
  CHECK(ls.code == 0);
  json rows = json::parse(ls.out, nullptr, false);
  REQUIRE(rows.is_array());
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    if (row["id"] == good) {
      CHECK(row["state"] == "live");
      CHECK(row["memory_bytes"].get<uint64_t>() > 0);
    } else {
      CHECK(row["id"] == bad);
      CHECK(row["state"] == "not_answering");
      CHECK_THAT(row["error"].get<std::string>(), Catch::Contains("did not answer the info request"));
    }
  }
  CHECK_THAT(ls.err, Catch::Contains("session " + bad + " (stopped)"));
  REQUIRE(ls_text.code != 137);
  CHECK(ls_text.code == 0);
  CHECK_THAT(ls_text.out, Catch::Contains(good + "  healthy"));
  CHECK_THAT(ls_text.out, Catch::Contains("not answering"));
  // cp: a one-line error naming the session and what did not answer; nothing copied.
  INFO(cp.err);
  REQUIRE(cp.code != 137);
  CHECK(cp.code == 125);
  CHECK(cp.err == "nsbox cp: session " + bad + " (stopped): its supervisor (pid " + std::to_string(supervisor) +
                      ", stopped) did not answer the workspace request within 10 s\n");
  CHECK(!std::filesystem::exists(host_copy));
  // The healthy session still serves.
  CHECK(s.Sh("healthy", "echo still")["stdout"] == "still\n");

  // rm --all ends both: the healthy one as ever, the stopped one by killing its supervisor; nothing is left.
  Output rm = NsboxWithin60s({"session", "rm", "--all"});
  INFO(rm.err);
  REQUIRE(rm.code != 137);
  CHECK(rm.code == 0);
  CHECK_THAT(rm.err, Catch::Contains("its supervisor was killed and its state removed"));
  CHECK(!std::filesystem::exists(s.state_dir + "/" + good));
  CHECK(!std::filesystem::exists(s.state_dir + "/" + bad));
  CHECK(WaitFor([&] { return ProcessGone(supervisor) && ProcessGone(good_supervisor); }, 10s));
  // pid 1 and the session's processes die with the supervisor (pid 1's PR_SET_PDEATHSIG takes its namespace).
  CHECK(WaitFor([&] { return ProcessGone(pid1); }, 10s));
  CHECK(nsbox::testing::WaitForNoPidsWithMarker(marker, 10s));
  // The reaper removes the session's groups (and the exec's below them that the sleep kept) once it is all gone.
  if (!group.empty()) CHECK(WaitFor([&] { return NoGroupNamed(group) && NoGroupNamed(good_group); }, 10s));
  Output after = NsboxWithin60s({"session", "ls", "--json"});
  CHECK(after.code == 0);
  CHECK(json::parse(after.out, nullptr, false) == json::array());
}

TEST_CASE("a supervisor killed while an exec runs: the exec's result says the session was lost, not setup_error",
          "[session][lifecycle]") {
  Sessions s;
  std::string id = s.Create();
  pid_t supervisor = s.Record(id)["supervisor_pid"];
  Output cut;
  std::thread client(
      [&] { cut = NsboxWithin60s({"exec", id, "--json", "--", "/bin/sh", "-c", "touch started; sleep 30"}); });
  bool started = WaitFor([&] { return s.Sh(id, "[ -e started ] && echo yes")["stdout"] == "yes\n"; }, 20s);
  if (started) REQUIRE(::kill(supervisor, SIGKILL) == 0);
  client.join();
  REQUIRE(started);
  INFO(cut.err);
  REQUIRE(cut.code != 137);
  CHECK(cut.code == 125);
  json lost = json::parse(cut.out, nullptr, false);
  CHECK(lost["status"] == "session_lost");
  CHECK(lost["status"] != "setup_error");
  CHECK_THAT(lost["reason"].get<std::string>(), Catch::Contains("ended before answering the exec request"));
  CHECK_THAT(lost["reason"].get<std::string>(), Catch::Contains("the program may have run"));
  CHECK(std::count(cut.err.begin(), cut.err.end(), '\n') == 1);
  // Refused before it reached any supervisor, an exec still says that nothing ran.
  Output gone = NsboxWithin60s({"exec", id, "--json", "--", "/bin/true"});
  CHECK(gone.code == 125);
  CHECK(json::parse(gone.out, nullptr, false)["status"] == "setup_error");
}

TEST_CASE("another user can't drive a session, even when the directories let it reach the socket", "[session]") {
  if (::geteuid() != 0) {
    WARN("needs root to run a command as another uid");
    return;
  }
  Sessions s;
  std::string id = s.Create();
  std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  // Default permissions: the state directory is root's alone.
  Output denied = Run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", NsboxBin(), "exec", id, "--",
                       "/bin/true"});
  CHECK(denied.code == 125);
  // Opened up by mistake: the supervisor still checks the caller's uid (SO_PEERCRED).
  ::chmod(s.state_dir.c_str(), 0755);
  ::chmod((s.state_dir + "/" + id).c_str(), 0755);
  ::chmod((s.state_dir + "/" + id + "/socket").c_str(), 0777);
  ::chmod((s.state_dir + "/" + id + "/session.json").c_str(), 0644);
  // nsbox itself refuses a state directory that is not the caller's own, so the intruder talks to the socket itself.
  Output cli = Run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", NsboxBin(), "exec", id, "--",
                    "/bin/sh", "-c", "echo ran > /workspace/intruder"});
  CHECK(cli.code == 125);
  const std::string intruder =
      "import json, socket, sys\n"
      "s = socket.socket(socket.AF_UNIX)\n"
      "s.connect(sys.argv[1])\n"
      "req = {'op': 'exec', 'argv': ['/bin/sh', '-c', 'echo ran > /workspace/intruder'], 'env': [], 'cwd': "
      "'/workspace',"
      " 'timeout_ms': 5000, 'output_limit': 1024}\n"
      "try:\n"
      "    s.sendall(json.dumps(req).encode() + b'\\n')\n"
      "except OSError:\n"
      "    pass\n"
      "print(s.recv(65536).decode())\n";
  Output refused = Run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                        intruder, s.state_dir + "/" + id + "/socket"});
  INFO(refused.out << refused.err);
  CHECK(refused.out.find("refused for uid 65534") != std::string::npos);
  CHECK(s.Sh(id, "ls /workspace")["stdout"] == "");
}

// Sets a sysctl for the test's duration and puts the old value back.
struct SysctlFor {
  std::string path, old;
  SysctlFor(std::string p, const std::string& value) : path(std::move(p)) {
    std::ifstream in(path);
    std::getline(in, old);
    std::ofstream(path) << value;
  }
  ~SysctlFor() { std::ofstream(path) << old; }
};

TEST_CASE("a daemon of the session cannot open the memory of the next exec before its execve, even with "
          "fs.suid_dumpable 1", "[session][escape]") {
  // The kernel makes a process non-dumpable when its uid changes, unless fs.suid_dumpable is 1: then only nsbox keeps
  // the payload that runs in the supervisor's memory out of reach. (Rootless: rootless_tests.)
  SysctlFor suid_dumpable("/proc/sys/fs/suid_dumpable", "1");
  Sessions s;
  std::string id = s.Create();
  std::ofstream(s.state_dir + "/watcher.py") << nsbox::testing::MemoryWatcherScript();
  REQUIRE(s.Nsbox({"cp", s.state_dir + "/watcher.py", id + ":/workspace/watcher.py"}).code == 0);
  json started = s.Sh(id, "setsid /usr/bin/python3 /workspace/watcher.py </dev/null >/dev/null 2>&1 & "
                          "while [ ! -e /workspace/ready ]; do sleep 0.05; done");
  REQUIRE(started["status"] == "ok");
  // Every exec's payload starts vfork-style in the supervisor's memory.
  const std::string input = s.state_dir + "/input";
  std::ofstream(input) << "attacked\n";
  // Until the watcher has caught one before its execve (a race it wins most times), three at a time, for up to 30 s
  // (a count alone can run out while the watcher still follows earlier processes).
  const auto attack_until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; std::chrono::steady_clock::now() < attack_until; ++i) {
    json attacked = s.Exec(id, {"/bin/cat"}, {"--stdin", input, "--timeout", "30s"});
    INFO(attacked.dump());
    CHECK(attacked["stdout"] == "attacked\n");
    if (i % 3 == 2 && s.Sh(id, "grep -c became /workspace/verdict")["stdout"] != "0\n") break;
  }
  json verdict = s.Sh(id, "touch /workspace/stop; while ! grep -q '^done$' /workspace/verdict; do sleep 0.05; done; "
                          "cat /workspace/verdict", {"--timeout", "30s"});
  const std::string lines = verdict["stdout"].get<std::string>();
  INFO(lines);
  const auto watched = nsbox::testing::ParseMemoryWatcherVerdict(lines);
  CHECK(watched.opened_in_nsbox_memory.empty());
  CHECK(watched.caught_before_execve > 0);  // else the test proved nothing
}


TEST_CASE("an exec's time-out holds when a program of the session stops its payload before execve",
          "[session][escape]") {
  // The payload starts vfork-style: the supervisor's thread waits in the kernel until its execve. A daemon of the
  // session stops the next process to appear and never continues it; the exec must still end at its time-out.
  Sessions s;
  // A profile that makes parking impossible (it denies umask, which a parked payload calls after its filter), so
  // that the next new process is the next exec's payload.
  const std::string profile = s.state_dir + "/no-parking.json";
  std::ofstream(profile) << R"({"defaultAction": "SCMP_ACT_ALLOW",
                                "syscalls": [{"names": ["umask"], "action": "SCMP_ACT_ERRNO"}]})";
  std::string id = s.Create({"--profile", profile});
  std::ofstream(s.state_dir + "/stopper.py") << R"py(import os, signal
target = int(open("/proc/sys/kernel/ns_last_pid").read()) + 1
open("/workspace/ready", "w").close()
while True:
    try:
        os.kill(target, signal.SIGSTOP)
        break
    except (ProcessLookupError, PermissionError):
        pass
try:
    os.readlink(f"/proc/{target}/exe")
    caught = "after-execve"
except OSError:
    caught = "before-execve"  # not dumpable: still in the supervisor's memory
open("/workspace/caught", "w").write(caught)
)py";
  std::ofstream(s.state_dir + "/input") << "input\n";
  REQUIRE(s.Nsbox({"cp", s.state_dir + "/stopper.py", id + ":/workspace/stopper.py"}).code == 0);
  // The window before the payload's execve is short: on a loaded machine the daemon may miss it a good many times.
  int before_execve = 0, rounds = 0;
  for (; rounds < 30 && before_execve == 0; ++rounds) {
    json armed = s.Sh(id, "rm -f /workspace/ready /workspace/caught; "
                          "setsid /usr/bin/python3 /workspace/stopper.py </dev/null >/dev/null 2>&1 & "
                          "while [ ! -e /workspace/ready ]; do :; done");  // no process of its own meanwhile
    REQUIRE(armed["status"] == "ok");
    // Killed by this harness after a minute: a hang fails the test instead of the suite.
    Output o = Run({"timeout", "-s", "KILL", "60", NsboxBin(), "exec", id, "--json", "--timeout", "2s", "--stdin",
                    s.state_dir + "/input", "--", "/bin/cat"});
    INFO(o.err);
    REQUIRE(o.code != 128 + SIGKILL);
    const std::string caught = s.Sh(id, "cat /workspace/caught")["stdout"].get<std::string>();
    INFO(caught);
    if (caught != "before-execve") continue;  // it ran before the daemon looked: again
    ++before_execve;
    json result = o.Json();
    CHECK(result["status"] == "timeout");
  }
  INFO(rounds << " rounds");
  CHECK(before_execve == 1);  // else the test proved nothing
  json after = s.Sh(id, "echo still here");
  CHECK(after["stdout"] == "still here\n");
}
