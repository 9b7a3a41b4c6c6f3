// Escape suite: the program's code: another run sharing its --workspace, or a daemon an earlier exec of the same
// session left behind, must not be able to change the code nsbox hands the interpreter.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// The attacker: every 5 ms, every file it did not make itself in /workspace, and every descriptor in /proc it can
// open that names nsbox's code, is rewritten with a script that has the victim's first line and then prints PWNED.
// bash reads its script a line at a time, so a victim that sleeps on its first line runs whatever follows by then.
// It prints what it found ("found NAME") and what it changed ("wrote NAME"); it stops when STOP exists.
std::string Attacker(const std::string& stop) {
  return R"(
import os, time
evil = b"sleep 1\necho PWNED\n"
mine = {"ready", "stop"}
seen = set()
def attack(path, label):
    if label not in seen:
        print("found", label, flush=True)
        seen.add(label)
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, evil, 0)
            print("wrote", label, flush=True)
        finally:
            os.close(fd)
    except OSError as e:
        pass
open("/workspace/ready", "w").close()
deadline = time.time() + 30
while not os.path.exists(")" + stop + R"(") and time.time() < deadline:
    for name in os.listdir("/workspace"):
        if name not in mine:
            attack("/workspace/" + name, name)
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
            except OSError:
                continue
            if "nsbox" in link:
                attack("/proc/%s/fd/%s" % (pid, fd), link)
    time.sleep(0.005)
)";
}

// The victim: sleeps on its first line, then says who it is.
constexpr const char* kVictim = "sleep 1\necho B-own\n";

bool WaitForFile(const std::string& path) {
  for (int i = 0; i < 1500 && !std::filesystem::exists(path); ++i) ::usleep(20'000);
  return std::filesystem::exists(path);
}

}  // namespace

// Issue 24, item 6: run A watched the shared workspace and rewrote run B's code file before B read it, so B ran A's
// code with B's secrets. The code is no file of the workspace now (a sealed memfd), and A finds nothing to change.
TEST_CASE("a run sharing --workspace cannot change another run's code while it runs", "[escape][code]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  auto attacker = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "60s", "--workspace", dir.path(), "--lang",
                                "python", "--code", Attacker("/workspace/stop")});
  REQUIRE(WaitForFile(dir.path() + "/ready"));
  for (int round = 0; round < 3; ++round) {
    auto victim = RunNsboxJson({"--workspace", dir.path(), "--lang", "bash", "--code", kVictim});
    INFO(victim.Describe());
    CHECK(victim.status() == "ok");
    CHECK(victim.out() == "B-own\n");
  }
  dir.Write("stop", "");
  attacker.Wait();
  auto json = nlohmann::json::parse(attacker.Out(), nullptr, false);
  INFO(attacker.Out());
  REQUIRE(json.is_object());
  CHECK(json.value("status", "") == "ok");
  CHECK(json.value("stdout", "x") == "");  // nothing of the victims' was there to find
  CHECK(Entries(dir.path()) == std::set<std::string>{"ready", "stop"});
}

// The same class within one session: its execs share a user, a /workspace and a /proc, and an earlier exec's daemon
// lives on. Session exec code files had predictable names (.nsbox-exec-<pid>-<n>); now the daemon can find the next
// exec's code descriptor in /proc, but it is sealed: opening it for writing works, writing does not.
TEST_CASE("a daemon left by an earlier session exec cannot change a later exec's code", "[escape][code][session]") {
  TempDir state;
  SpawnOptions env;
  env.extra_env["NSBOX_STATE_DIR"] = state.path();
  auto created = RunProcess({NsboxBinary(), "session", "create", "--json"}, env);
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  const std::string id = nlohmann::json::parse(created.out)["id"].get<std::string>();
  struct RemoveSession {
    std::string id;
    SpawnOptions env;
    ~RemoveSession() { RunProcess({NsboxBinary(), "session", "rm", id}, env); }
  } remove{id, env};

  TempDir host;
  const std::string daemon = host.Write("daemon.py", Attacker("/tmp/stop"));
  auto copied = RunProcess({NsboxBinary(), "cp", daemon, id + ":/workspace/daemon.py"}, env);
  INFO(copied.err);
  REQUIRE(copied.exit_code == 0);
  auto started = RunProcess(
      {NsboxBinary(), "exec", id, "--", "/bin/sh", "-c",
       "mv /workspace/daemon.py /tmp/ && cd /tmp && setsid python3 daemon.py > /tmp/daemon.log 2>&1 < /dev/null &"},
      env);
  INFO(started.err);
  REQUIRE(started.exit_code == 0);
  auto ready = RunProcess({NsboxBinary(), "exec", id, "--", "/bin/sh", "-c",
                           "for i in $(seq 500); do [ -e /workspace/ready ] && exit 0; sleep 0.02; done; exit 1"},
                          env);
  REQUIRE(ready.exit_code == 0);
  for (int round = 0; round < 3; ++round) {
    auto victim = RunProcess({NsboxBinary(), "exec", id, "--lang", "bash", "--code", kVictim}, env);
    INFO(victim.err);
    CHECK(victim.exit_code == 0);
    CHECK(victim.out == "B-own\n");
  }
  auto log = RunProcess({NsboxBinary(), "exec", id, "--", "/bin/sh", "-c",
                         "touch /tmp/stop; sleep 0.1; cat /tmp/daemon.log; ls -A /workspace"}, env);
  INFO(log.out);
  CHECK(log.out.find("wrote") == std::string::npos);
  // What it found, if anything, was the sealed memfd, never a file of the workspace.
  CHECK(log.out.find(".nsbox-") == std::string::npos);
}

// The compile step is a step of the same sandbox, not a host process: what the compiler reads is the sandbox's root,
// and compiled code meets the same seccomp filter as an interpreter.
TEST_CASE("a compile step sees the sandbox's root: #include of a host secret is a compile error without it",
          "[escape][code][compiled]") {
  TempDir secret_dir;
  const std::string secret = secret_dir.Write("secret.h", "#define SECRET \"nsbox-host-secret-4711\"\n");
  auto r = RunNsboxJson({"--lang", "c", "--code",
                         "#include \"" + secret + "\"\n#include <stdio.h>\nint main(void) { puts(SECRET); }\n"});
  INFO(r.Describe());
  CHECK(r.status() == "compile_error");
  CHECK(r.err().find("No such file or directory") != std::string::npos);
  CHECK(r.process.out.find("nsbox-host-secret-4711") == std::string::npos);
  // The shadow file exists on the host, and the host view leaves /etc's secrets out.
  auto shadow = RunNsboxJson({"--lang", "c", "--code", "#include \"/etc/shadow\"\nint main(void) { return 0; }\n"});
  CHECK(shadow.status() == "compile_error");
  CHECK(shadow.err().find("root:") == std::string::npos);
}

TEST_CASE("a compiled C program meets the default seccomp filter: ptrace and unshare are denied",
          "[escape][code][compiled][seccomp]") {
  auto r = RunNsboxJson({"--lang", "c", "--code",
                         "#define _GNU_SOURCE\n#include <errno.h>\n#include <sched.h>\n#include <stdio.h>\n"
                         "#include <string.h>\n#include <sys/ptrace.h>\n"
                         "int main(void) {\n"
                         "  long traced = ptrace(PTRACE_TRACEME, 0, 0, 0);\n"
                         "  printf(\"ptrace %ld %s\\n\", traced, traced < 0 ? strerror(errno) : \"ok\");\n"
                         "  int shared = unshare(CLONE_NEWUSER | CLONE_NEWNS);\n"
                         "  printf(\"unshare %d %s\\n\", shared, shared < 0 ? strerror(errno) : \"ok\");\n"
                         "  return 0;\n}\n"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ptrace -1 Operation not permitted\nunshare -1 Operation not permitted\n");
  std::set<std::string> denied;
  for (const auto& entry : r.json["denied_syscalls"]) denied.insert(entry.value("name", ""));
  CHECK(denied.count("ptrace") == 1);
  CHECK(denied.count("unshare") == 1);
}
