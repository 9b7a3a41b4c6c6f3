// Escape suite: processes: signalling and tracing outside the sandbox, inherited descriptors and the working
// directory (runc CVE-2024-21626), zombies and orphans, time-outs against evasive processes, nsbox's own death.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
using namespace std::chrono_literals;

namespace {

// Python that leaves behind the processes a sloppy supervisor misses: a double-forked setsid daemon and a direct
// child, both ignoring SIGTERM, each carrying MARKER in its argv so the host can find them.
// The sandboxed shells started as `sh -c SCRIPT MARKER` (nsbox's own processes hold the marker in their argv too).
std::vector<pid_t> ShellsWithMarker(const std::string& marker) {
  std::vector<pid_t> shells;
  for (pid_t pid : PidsWithMarker(marker)) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    if (std::getline(comm, name) && name == "sh") shells.push_back(pid);
  }
  return shells;
}

std::string EvasiveProcesses(const std::string& marker) {
  return R"PY(
import signal, subprocess, time
MARKER = ")PY" + marker + R"PY("
SLEEPER = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(1000)"
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", SLEEPER, MARKER])
    os._exit(0)
subprocess.Popen([sys.executable, "-c", SLEEPER, MARKER])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("started", flush=True)
time.sleep(1000)
)PY";
}

}  // namespace

// kill(-1, SIGKILL) signals every process the caller may signal. A host process running as the host uid the
// sandbox user maps to would be a target without the pid namespace. Run as root, the sandbox's host uid is leased
// from a range: pinned here to one id, which the victim runs as.
TEST_CASE("kill(-1, SIGKILL) inside reaches no host process, even one running as the mapped host uid",
          "[escape][processes]") {
  TempDir locks;
  SpawnOptions spawn;
  spawn.extra_env["NSBOX_HOST_ID_DIR"] = locks.path() + "/ids";
  spawn.extra_env["NSBOX_HOST_ID_RANGE"] = "3100000-3100000";
  const std::string mapped = ::geteuid() == 0 ? "3100000" : std::to_string(::geteuid());
  std::string marker = UniqueMarker("victim");
  auto victim = StartProcess({"/usr/bin/setpriv", "--reuid=" + mapped, "--regid=" + mapped, "--clear-groups",
                              "/usr/bin/python3", "-c", "import time; time.sleep(60)", marker});
  REQUIRE(WaitForPidWithMarker(marker, 5s));
  auto r = RunPython("print(err(os.kill, -1, 9), open('/proc/self/uid_map').read().split()[1])\n", {}, spawn);
  std::this_thread::sleep_for(200ms);
  bool victim_alive = !PidsWithMarker(marker).empty();
  ::kill(victim.pid, SIGKILL);
  victim.Wait();
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  // No other process of the sandbox (pid 1 is exempt): nothing to signal at all.
  CHECK(r.out() == "ESRCH " + mapped + "\n");
  CHECK(victim_alive);
}

// Host pids are not visible: signalling or tracing the test process by its host pid finds nothing, and /proc lists
// only the sandbox's own two processes (pid 1 and the program).
TEST_CASE("host processes are invisible: kill and ptrace by host pid give ESRCH, /proc shows pids 1 and 2",
          "[escape][processes]") {
  std::string host_pid = std::to_string(::getpid());
  auto r =
      RunPython("print(err(os.kill, " + host_pid + ", 0), sc(101, 16, " + host_pid + ", 0, 0), err(os.stat, '/proc/" +
                host_pid + "'), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getppid())\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  // ptrace: the default profile refuses it (EPERM) before the kernel would look the pid up (ESRCH).
  CHECK((r.out() == "ESRCH ESRCH ENOENT [1, 2] 1\n" || r.out() == "ESRCH EPERM ENOENT [1, 2] 1\n"));
}

// Killing the sandbox's pid 1 from inside would end supervision early; the kernel drops signals to a namespace's init
// that it has no handler for, and pid 1 forwards the ones it handles to the program.
TEST_CASE("SIGKILL to pid 1 from inside is ignored and the run completes", "[escape][processes]") {
  auto r = RunPython("import time\nos.kill(1, 9)\ntime.sleep(0.2)\nprint('alive')\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "alive\n");
}

// pid 1 holds descriptors of the host's cgroup tree: at its end it moves itself out of the sandbox's groups through
// their parents' `tasks` files. The program, with pid 1's uid, must not be able to take them (it would leave its
// limits behind): pid 1 is not dumpable, so neither pidfd_getfd nor /proc/1/fd reach them.
TEST_CASE("pid 1's descriptors cannot be taken with pidfd_getfd or /proc/1/fd", "[escape][processes]") {
  auto r = RunPython(
      "pidfd = os.pidfd_open(1)\n"
      "print(sorted(set(sc(438, pidfd, fd, 0) for fd in range(3, 16))), err(os.listdir, '/proc/1/fd'))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "['EPERM'] EACCES\n");
}

// Descriptors leaked into a container (runc CVE-2024-21626, and the older CVE-2016-9962) give a handle on host
// files and directories. The test opens a host file and a host directory WITHOUT O_CLOEXEC before running nsbox.
TEST_CASE("descriptors inherited by nsbox are not visible inside (CVE-2024-21626)", "[escape][processes]") {
  TempDir dir;
  std::string secret = dir.Write("secret", "HOST-SECRET\n");
  int file_fd = ::open(secret.c_str(), O_RDONLY);
  int dir_fd = ::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(file_fd >= 3);
  REQUIRE(dir_fd >= 3);
  // Besides stdio only the program's own code (its sealed memfd, named by argv[0]) and listdir's handle are open; a
  // leaked number is either closed or, by chance, that memfd.
  auto r = RunPython("import sys\ncode_fd = int(sys.argv[0].rsplit('/', 1)[1])\n"
                     "def leaked(fd): return fd != code_fd and err(os.fstat, fd) != 'EBADF'\n"
                     "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
                     "print(len([f for f in fds if f > 2 and f != code_fd]), os.readlink(f'/proc/self/fd/{code_fd}'), "
                     "leaked(" + std::to_string(file_fd) + "), leaked(" + std::to_string(dir_fd) +
                     "), err(os.listdir, '/proc/1/fd'))\n");
  ::close(file_fd);
  ::close(dir_fd);
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "1 /memfd:nsbox-code (deleted) False False EACCES\n");
}

// CVE-2024-21626: runc left the container's cwd on a host directory (/proc/self/fd/N as cwd), and ".." walked out.
// nsbox runs from a host directory holding a secret; inside, the cwd is /workspace and nothing points back.
TEST_CASE("the working directory is /workspace, not nsbox's host cwd (CVE-2024-21626)", "[escape][processes]") {
  TempDir dir;
  dir.Write("secret", "HOST-SECRET\n");
  SpawnOptions spawn;
  spawn.cwd = dir.path();
  auto r = RunPython(R"(
print(os.getcwd(), os.readlink("/proc/self/cwd"), err(os.readlink, "/proc/1/cwd"), err(open, "../secret"),
      err(open, "secret"), os.path.realpath("../../.."))
)",
                     {}, spawn);
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "/workspace /workspace EACCES ENOENT ENOENT /\n");
}

// Orphans and zombies: pid 1 must reap re-parented processes, or a program fills the pid table with zombies.
TEST_CASE("orphans are reaped by pid 1: no zombie remains", "[escape][processes]") {
  auto r = RunPython(R"(
import time
for i in range(20):
    if os.fork() == 0:
        if os.fork() == 0:
            os._exit(0)      # the grandchild: an orphan once its parent is gone
        time.sleep(0.05)
        os._exit(0)
time.sleep(0.5)
for i in range(20):
    os.waitpid(-1, 0)        # our own children are ours to reap
def zombies():
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            if stat.rsplit(')', 1)[1].split()[0] == "Z":
                found.append(p)
    return found
deadline = time.time() + 10  # pid 1 reaps them as they come; a busy machine may take a while
left = zombies()
while left and time.time() < deadline:
    time.sleep(0.05)
    left = zombies()
print("zombies:", left)
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "zombies: []\n");
}

// A time-out that only kills the main process lets a double-forked, setsid, SIGTERM-ignoring daemon live on.
TEST_CASE("a time-out kills double-forked, setsid and SIGTERM-ignoring processes; nothing survives",
          "[escape][processes]") {
  std::string marker = UniqueMarker("timeout");
  auto bg = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "8s", "--lang", "python", "--code",
                          std::string(kPythonPrelude) + EvasiveProcesses(marker)});
  // The evasive processes exist (the test can see them) before the limit strikes.
  bool appeared = WaitForProgramsWithMarker(marker, 2, 10s);  // the two sleepers
  int status = bg.Wait();
  auto json = nlohmann::json::parse(bg.Out(), nullptr, false);
  INFO(bg.Out());
  CHECK(appeared);
  CHECK(WIFEXITED(status));
  CHECK(json.value("status", "") == "timeout");
  CHECK(json.value("stdout", "") == "started\n");
  CHECK(WaitForNoPidsWithMarker(marker, 15s));
}

// nsbox killed with SIGKILL cannot clean up: the kernel must (PR_SET_PDEATHSIG on pid 1, whose death ends the pid
// namespace).
TEST_CASE("nsbox killed with SIGKILL mid-run leaves no process behind", "[escape][processes]") {
  std::string marker = UniqueMarker("sigkill");
  auto bg = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "60s", "--lang", "python", "--code",
                          std::string(kPythonPrelude) + EvasiveProcesses(marker)});
  bool appeared = WaitForProgramsWithMarker(marker, 2, 10s);  // the two sleepers
  size_t before = ProgramsWithMarker(marker).size();
  ::kill(bg.pid, SIGKILL);
  bg.Wait();
  CHECK(appeared);
  CHECK(before >= 2);
  CHECK(WaitForNoPidsWithMarker(marker, 15s));
}

// Fork bombs exhaust the host's pid table: the pids limit (cgroup) contains them.
TEST_CASE("a fork bomb is contained by the pids limit", "[escape][processes][cgroup]") {
  auto r = RunPython(R"(
import time
n, why = 0, "none"
try:
    while n < 5000:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
except OSError as e:
    why = errno.errorcode[e.errno]
print(why, n <= 256)
)",
                     {"--timeout", "20s"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EAGAIN True\n");
  // The verdict says why the program could not fork, not only how it exited.
  CHECK(r.json["limits"]["pids_limit_hit"] == true);
  CHECK(r.json["reason"] ==
        "exited with code 0; the pids limit of 256 was reached (a fork or a new thread failed with EAGAIN)");
}

// A worker the OOM killer ends while the program lives on: the status is the program's, the reason says what happened.
TEST_CASE("an OOM-killed subprocess is named in the reason of a program that lives on", "[escape][processes][cgroup]") {
  auto r = RunPython("import subprocess\n"
                     "r = subprocess.run(['/usr/bin/python3', '-c', 'b = bytearray(256 << 20)'])\n"
                     "print(r.returncode)\n",
                     {"--memory", "64M", "--timeout", "20s"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "-9\n");
  CHECK(r.json["limits"]["oom_kills"] == 1);
  CHECK(r.json["reason"] == "exited with code 0; the OOM killer ended 1 process at the memory limit of 67108864 bytes");
}

// A memory bomb must end as OOM inside the sandbox's own limit, not as host memory pressure.
TEST_CASE("a memory bomb ends as status oom", "[escape][processes][cgroup]") {
  // Touches every page, and stops by itself at 2 GiB so that a run without limits cannot hurt the host.
  auto r = RunPython("chunks = []\nfor i in range(128):\n    chunks.append(b'x' * (16 << 20))\nprint('not limited')\n",
                     {"--memory", "64M", "--timeout", "20s"});
  INFO(r.Describe());
  CHECK(r.status() == "oom");
}

// The other half of the same rule, seen from inside: the program is in the sandbox's memory group (the root of its
// cgroup namespace), pid 1 is not (one level up). On cgroup v2 pid 1 is forked, and sits in the one group.
TEST_CASE("pid 1 stays out of the sandbox's memory group, the program is in it", "[escape][processes][cgroup]") {
  auto r = RunShell("grep ':memory:' /proc/1/cgroup; grep ':memory:' /proc/self/cgroup; true");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  if (r.json["limits"]["backend"] != "cgroup1") {
    RecordSkip("escape_tests", "pid 1 stays out of the sandbox's memory group, the program is in it",
               "cgroup v1 only: a v2 sandbox's pid 1 is forked into its one group");
    return;
  }
  const std::string out = r.out();
  const size_t newline = out.find('\n');
  REQUIRE(newline != std::string::npos);
  CHECK(out.substr(0, newline).ends_with(":memory:/.."));  // pid 1
  CHECK(out.substr(newline + 1).ends_with(":memory:/\n"));  // the program
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);
}

// The group filled by a tmpfs file, by a shell of about 1 MiB: every process of the sandbox is smaller than nsbox.
// pid 1 is a fork of nsbox: were it in the memory group (v1), it would be the largest process there and the OOM
// killer's victim, ending the sandbox at once. It is not: the shell is the victim, and the verdict is oom.
TEST_CASE("an OOM among processes smaller than nsbox is the program's and not nsbox's death",
          "[escape][processes][cgroup]") {
  auto r = RunNsboxJson({"--memory", "32M", "--timeout", "20s", "--", "/bin/sh", "-c",
                         "x=0123456789abcdef; x=$x$x$x$x$x$x$x$x; x=$x$x$x$x$x$x$x$x; x=$x$x$x$x\n"
                         "while printf %s \"$x\" >> /tmp/fill; do :; done; echo stopped"});
  INFO(r.Describe());
  REQUIRE(r.json.is_object());  // nsbox lived to give its verdict
  CHECK(r.status() == "oom");
  CHECK(r.json["limits"]["oom_kills"] == 1);
  CHECK(r.process.exit_code == 128 + SIGKILL);
}

// Core dumps land in the crashing program's working directory: under --workspace, a host directory. The program
// starts with RLIMIT_CORE soft and hard 0 and cannot raise it; a program that aborts leaves no core file.
TEST_CASE("core dumps are off: RLIMIT_CORE is 0 and hard 0, an abort leaves no core in the workspace",
          "[escape][processes]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);  // the sandbox user writes there
  auto r = RunPython(R"(
import resource
try:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    raised = "raised"
except (OSError, ValueError):  # Python turns EPERM from setrlimit into ValueError
    raised = "refused"
print(resource.getrlimit(resource.RLIMIT_CORE), raised)
pid = os.fork()
if pid == 0:
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (OSError, ValueError):
        pass
    os.abort()
_, status = os.waitpid(pid, 0)
print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == 6, os.WCOREDUMP(status))
)",
                     {"--workspace", dir.path()});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "(0, 0) refused\nTrue False\n");
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind("core", 0) == 0) left.push_back(e.path().filename());
  CHECK(left.empty());
}

TEST_CASE("the program cannot lower pid 1's limits and kill it with a signal flood, under any profile",
          "[escape][processes]") {
  // pid 1 runs as the program's user: prlimit(1, RLIMIT_CPU) was allowed, and a flood of signals it forwards then
  // burnt its second of CPU, the kernel killed it, and the verdict said nothing ran.
  TempDir dir;
  const std::string allow_all =
      dir.Write("allow-all.json", R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []})");
  for (const std::vector<std::string>& profile : {std::vector<std::string>{}, {"--profile", allow_all}}) {
    INFO((profile.empty() ? "default profile" : "allow-all profile"));
    auto r = RunPython(R"(
import resource, signal, time
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(s, signal.SIG_IGN)
print("started", flush=True)
print(err(resource.prlimit, 1, resource.RLIMIT_CPU, (1, 1)), resource.prlimit(1, resource.RLIMIT_CPU)[0] == -1)
end = time.time() + 3
while time.time() < end:
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        os.kill(1, s)
print("still here")
)",
                       profile);
    INFO(r.Describe());
    CHECK(r.status() == "ok");
    CHECK(r.out() == "started\nEPERM True\nstill here\n");
  }
}

namespace {

// Runs `levers` (Python after the prelude) under the default profile and under one that allows every call: nsbox's
// pid 1 guard is its own filter, so the answers must not depend on the profile.
void CheckPid1LeversUnderEveryProfile(const char* levers, const std::string& expected) {
  TempDir dir;
  const std::string allow_all =
      dir.Write("allow-all.json", R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []})");
  for (const std::vector<std::string>& profile : {std::vector<std::string>{}, {"--profile", allow_all}}) {
    INFO((profile.empty() ? "default profile" : "allow-all profile"));
    auto r = RunPython(levers, profile);
    INFO(r.Describe());
    CHECK(r.status() == "ok");
    CHECK(r.out() == expected);
  }
}

}  // namespace

TEST_CASE("the program cannot renice, reschedule, pin or idle pid 1's I/O, under any profile; itself it can",
          "[escape][processes]") {
  // pid 1 runs as the program's user, so the kernel lets the program lower pid 1's nice, policy (SCHED_IDLE),
  // affinity and I/O class, through pid 1's number, its process group or the whole user; under a CPU limit shared
  // with a busy program, pid 1 then starves of the time it needs for the deadline and for reaping.
  CheckPid1LeversUnderEveryProfile(kPid1SchedulingLevers,
                                   "EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM\n"
                                   "pid 1 unchanged\n"
                                   "ok ok ok ok ok ok ok 16 True\n");
}

TEST_CASE("the pid 1 guard holds when the upper halves of the arguments are set, under any profile",
          "[escape][processes]") {
  // The guard compared whole 64-bit registers: prlimit64(1 | 1 << 32, RLIMIT_CPU) passed it, the kernel read pid 1,
  // and a signal flood then killed pid 1.
  CheckPid1LeversUnderEveryProfile(kPid1HighBitLevers,
                                   "EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM\n"
                                   "pid 1 unchanged\n");
}

TEST_CASE("a session exec cannot renice or reschedule the session's pid 1", "[escape][processes]") {
  TempDir state;
  SpawnOptions env;
  env.extra_env["NSBOX_STATE_DIR"] = state.path();
  auto created = RunProcess({NsboxBinary(), "session", "create", "--json"}, env);
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  const std::string id = nlohmann::json::parse(created.out)["id"].get<std::string>();
  auto r = RunProcess(
      {NsboxBinary(), "exec", id, "--lang", "python", "--code", std::string(kPythonPrelude) + kPid1SchedulingLevers},
      env);
  RunProcess({NsboxBinary(), "session", "rm", id}, env);
  INFO(r.err);
  CHECK(r.out ==
        "EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM\n"
        "pid 1 unchanged\n"
        "ok ok ok ok ok ok ok 16 True\n");
}

TEST_CASE("a pid 1 killed after the program started gives the program's end, never setup_error",
          "[escape][processes]") {
  const std::string marker = UniqueMarker("pid1-killed");
  BackgroundProcess nsbox = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "60s", "--", "/bin/sh", "-c",
                                          "echo started; sleep 1000; :", marker});
  // The shell (its $0 is the marker); its parent is the sandbox's pid 1.
  std::vector<pid_t> program;
  for (int i = 0; i < 500 && program.empty(); ++i) {
    program = ShellsWithMarker(marker);
    if (program.empty()) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(program.size() == 1);
  // It has echoed once its sleep runs.
  const std::string children = fmt::format("/proc/{0}/task/{0}/children", program[0]);
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(children);
    std::string first;
    if (in >> first) break;
    std::this_thread::sleep_for(20ms);
  }
  std::ifstream status("/proc/" + std::to_string(program[0]) + "/status");
  std::string line;
  pid_t pid1 = 0;
  while (std::getline(status, line))
    if (line.starts_with("PPid:")) pid1 = std::stoi(line.substr(5));
  REQUIRE(pid1 > 0);
  REQUIRE(::kill(pid1, SIGKILL) == 0);
  nsbox.Wait();
  auto result = nlohmann::json::parse(nsbox.Out());
  INFO(result.dump());
  CHECK(result["status"] == "signal");
  CHECK(result["signal"] == SIGKILL);
  CHECK(result["stdout"] == "started\n");
  CHECK_THAT(result["reason"].get<std::string>(), Catch::Contains("pid 1 ended while the program ran"));
}

TEST_CASE("the time-out holds while nsbox itself is stopped: pid 1 ends the sandbox", "[escape][processes]") {
  const std::string marker = UniqueMarker("nsbox-stopped");
  BackgroundProcess nsbox = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "2s", "--", "/bin/sh", "-c",
                                          "while :; do sleep 0.1; done", marker});
  bool started = false;
  for (int i = 0; i < 500 && !started; ++i) {
    started = !ShellsWithMarker(marker).empty();
    if (!started) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(started);
  REQUIRE(::kill(nsbox.pid, SIGSTOP) == 0);
  // The shell goes at the deadline though nsbox cannot act meanwhile.
  bool sandbox_ended = false;
  for (int i = 0; i < 1000 && !sandbox_ended; ++i) {
    sandbox_ended = ShellsWithMarker(marker).empty();
    if (!sandbox_ended) std::this_thread::sleep_for(20ms);
  }
  ::kill(nsbox.pid, SIGCONT);
  CHECK(sandbox_ended);
  nsbox.Wait();
  auto result = nlohmann::json::parse(nsbox.Out());
  INFO(result.dump());
  CHECK(result["status"] == "timeout");
}

namespace {

// A session (its own state directory) whose one exec tries clone(CLONE_PARENT): the new process would be a child of
// nsbox's supervisor, outside the sandbox. Returns the exec's output; `rm` is what must not hang.
struct CloneParentSession {
  TempDir state;
  SpawnOptions spawn;
  std::string id;
  explicit CloneParentSession(const std::vector<std::string>& options) {
    spawn.extra_env["NSBOX_STATE_DIR"] = state.path();
    spawn.timeout = std::chrono::milliseconds(30000);
    std::vector<std::string> args = {NsboxBinary(), "session", "create", "--json"};
    args.insert(args.end(), options.begin(), options.end());
    auto created = RunProcess(args, spawn);
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
    id = nlohmann::json::parse(created.out).at("id").get<std::string>();
  }
  nlohmann::json Exec(const std::string& marker) {
    std::string code = std::string(kPythonPrelude) + R"PY(
pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)  # clone(CLONE_PARENT | SIGCHLD)
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(1000)", ")PY" + marker + R"PY("])
print("ok" if pid > 0 else errno.errorcode[ctypes.get_errno()], flush=True)
)PY";
    auto r = RunProcess({NsboxBinary(), "exec", id, "--json", "--lang", "python", "--code", code}, spawn);
    INFO(r.err);
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  ProcessResult Remove() { return RunProcess({NsboxBinary(), "session", "rm", id}, spawn); }
  ~CloneParentSession() { RunProcess({NsboxBinary(), "session", "rm", "--all"}, spawn); }
};

// rm returns (before the suite's guard fires), ends the session, and leaves no marked process and no group.
void CheckRemovedCleanly(CloneParentSession& session, const std::string& marker,
                         const std::set<std::string>& groups_before) {
  auto rm = session.Remove();
  INFO(rm.err);
  CHECK_FALSE(rm.guard_fired);
  CHECK(rm.exit_code == 0);
  CHECK(WaitForNoPidsWithMarker(marker, 15s));
  CHECK(WaitForGroups(groups_before));
}

}  // namespace

// clone(CLONE_PARENT) from an exec's program made a child of the supervisor (outside the sandbox) that nobody reaped;
// pid 1's exit waits for every process of its namespace to be reaped, and the supervisor waited for pid 1, so
// `session rm` hung and the cgroups stayed. The default profile refuses the flag.
TEST_CASE("clone(CLONE_PARENT) in a session exec is refused, and rm ends the session", "[escape][processes]") {
  auto groups_before = NsboxGroups();
  std::string marker = UniqueMarker("cloneparent");
  CloneParentSession session({});
  auto exec = session.Exec(marker);
  INFO(exec.dump());
  CHECK(exec.value("stdout", std::string()) == "EPERM\n");
  CheckRemovedCleanly(session, marker, groups_before);
}

// Defence in depth: under a profile that allows CLONE_PARENT (Docker's), the child exists as the supervisor's, and the
// end of the session still cannot hang: the supervisor reaps such children while it waits for pid 1.
TEST_CASE("a child made with CLONE_PARENT under Docker's profile cannot keep a session from ending",
          "[escape][processes]") {
  const std::string docker = "/work/shared/fixtures/docker-default-seccomp.json";
  if (::access(docker.c_str(), R_OK) != 0) {
    RecordSkip("escape_tests",
               "a child made with CLONE_PARENT under Docker's profile cannot keep a session from ending",
               docker + " is missing");
    return;
  }
  auto groups_before = NsboxGroups();
  std::string marker = UniqueMarker("cloneparent-docker");
  CloneParentSession session({"--profile", docker});
  auto exec = session.Exec(marker);
  INFO(exec.dump());
  REQUIRE(exec.value("stdout", std::string()) == "ok\n");
  REQUIRE(WaitForPidWithMarker(marker, 5s));  // the attack got through the profile: the stray lives
  CheckRemovedCleanly(session, marker, groups_before);
}
