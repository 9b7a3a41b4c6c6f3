// Escape suite: processes: signalling and tracing outside the sandbox, inherited descriptors and the working
// directory (runc CVE-2024-21626), zombies and orphans, time-outs against evasive processes, nsbox's own death.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
using namespace std::chrono_literals;

namespace {

// Python that leaves behind the processes a sloppy supervisor misses: a double-forked setsid daemon and a direct
// child, both ignoring SIGTERM, each carrying MARKER in its argv so the host can find them.
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
// sandbox user maps to (65534) would be a target without the pid namespace.
TEST_CASE("kill(-1, SIGKILL) inside reaches no host process, even one running as the mapped host uid",
          "[escape][processes]") {
  std::string marker = UniqueMarker("victim");
  auto victim = StartProcess({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              "/usr/bin/python3", "-c", "import time; time.sleep(60)", marker});
  REQUIRE(WaitForPidWithMarker(marker, 5s));
  auto r = RunPython("print(err(os.kill, -1, 9))\n");
  std::this_thread::sleep_for(200ms);
  bool victim_alive = !PidsWithMarker(marker).empty();
  ::kill(victim.pid, SIGKILL);
  victim.Wait();
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  // No other process of the sandbox (pid 1 is exempt): nothing to signal at all.
  CHECK(r.out() == "ESRCH\n");
  CHECK(victim_alive);
}

// Host pids are not visible: signalling or tracing the test process by its host pid finds nothing, and /proc lists
// only the sandbox's own two processes (pid 1 and the program).
TEST_CASE("host processes are invisible: kill and ptrace by host pid give ESRCH, /proc shows pids 1 and 2",
          "[escape][processes]") {
  std::string host_pid = std::to_string(::getpid());
  auto r = RunPython("print(err(os.kill, " + host_pid + ", 0), sc(101, 16, " + host_pid + ", 0, 0), err(os.stat, '/proc/" +
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
  auto r = RunPython("pidfd = os.pidfd_open(1)\n"
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
time.sleep(0.2)
zombies = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            stat = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        if stat.rsplit(')', 1)[1].split()[0] == "Z":
            zombies.append(p)
print("zombies:", zombies)
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "zombies: []\n");
}

// A time-out that only kills the main process lets a double-forked, setsid, SIGTERM-ignoring daemon live on.
TEST_CASE("a time-out kills double-forked, setsid and SIGTERM-ignoring processes; nothing survives",
          "[escape][processes]") {
  std::string marker = UniqueMarker("timeout");
  auto bg = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "4s", "--lang", "python", "--code",
                          std::string(kPythonPrelude) + EvasiveProcesses(marker)});
  // The evasive processes exist (the test can see them) before the limit strikes.
  bool appeared = WaitForPidsWithMarker(marker, 2, 10s);  // the two sleepers (nsbox's command line is hidden)
  int status = bg.Wait();
  auto json = nlohmann::json::parse(bg.Out(), nullptr, false);
  INFO(bg.Out());
  CHECK(appeared);
  CHECK(WIFEXITED(status));
  CHECK(json.value("status", "") == "timeout");
  CHECK(json.value("stdout", "") == "started\n");
  CHECK(WaitForNoPidsWithMarker(marker, 2s));
}

// nsbox killed with SIGKILL cannot clean up: the kernel must (PR_SET_PDEATHSIG on pid 1, whose death ends the pid
// namespace).
TEST_CASE("nsbox killed with SIGKILL mid-run leaves no process behind", "[escape][processes]") {
  std::string marker = UniqueMarker("sigkill");
  auto bg = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "60s", "--lang", "python", "--code",
                          std::string(kPythonPrelude) + EvasiveProcesses(marker)});
  // The two sleepers. nsbox had the marker in its --code, until its pid 1, which shares nsbox's memory (and with it
  // the command line), hid it from the sandbox.
  bool appeared = WaitForPidsWithMarker(marker, 2, 10s);
  size_t before = PidsWithMarker(marker).size();
  ::kill(bg.pid, SIGKILL);
  bg.Wait();
  CHECK(appeared);
  CHECK(before >= 2);
  CHECK(WaitForNoPidsWithMarker(marker, 3s));
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
  CHECK(r.json["reason"] == "exited with code 0; the pids limit of 256 was reached (a fork or a new thread failed with EAGAIN)");
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
// pid 1 shares nsbox's memory, and the OOM killer kills every process that shares its victim's: were pid 1 in the
// memory group, it would be the largest process there, and nsbox would die with it (no verdict, exit 137 of nsbox's
// own). It is not: the shell is the victim, and the verdict is oom.
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
