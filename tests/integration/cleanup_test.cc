// Integration: nothing is left behind after success, failure, setup error, time-out or SIGKILL of nsbox: no
// process, no mount in the host's mount table, no temporary file, no cgroup.
#include <fcntl.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
using namespace std::chrono_literals;

namespace {

size_t EntryCount(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}


// Runs one scenario with a private TMPDIR and a marker in the program's argv, then checks the host.
void CheckNothingLeft(const std::string& scenario, const std::vector<std::string>& options, const std::string& body,
                      const std::string& expected_status, bool kill_nsbox = false) {
  TempDir tmp;
  std::string marker = UniqueMarker("cleanup");
  auto mounts_before = MountLinesContaining("nsbox");
  const auto groups_before = NsboxGroups();
  SpawnOptions spawn;
  spawn.extra_env["TMPDIR"] = tmp.path();
  std::vector<std::string> argv = {NsboxBinary(), "run", "--json"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"--", "/usr/bin/python3", "-c", body, marker});
  std::string status;
  if (kill_nsbox) {
    auto bg = StartProcess(argv, spawn);
    // The program and its child.
    REQUIRE(WaitForProgramsWithMarker(marker, 2, 10s));

    ::kill(bg.pid, SIGKILL);
    bg.Wait();
    status = "killed";
  } else {
    auto r = RunProcess(argv, spawn);
    status = nlohmann::json::parse(r.out, nullptr, false).value("status", "<no json>");
  }
  INFO(scenario);
  CHECK(status == expected_status);
  // The groups are gone when nsbox has returned (their reaper may remove them, but nsbox waits for it), unless nsbox
  // was killed: then the reaper removes them on its own time.
  if (!kill_nsbox) CHECK(NsboxGroups() == groups_before);
  CHECK(WaitForNoPidsWithMarker(marker, 15s));
  CHECK(MountLinesContaining("nsbox") == mounts_before);
  CHECK(MountLinesContaining(marker).empty());
  CHECK(EntryCount(tmp.path()) == 0);
  CHECK(WaitForGroups(groups_before));
}

const char* const kSpawnsChildren =
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]])\n"
    "time.sleep(0.2)\n";

// A tmpfs of the test's own on the host, watched with inotify: IN_UNMOUNT arrives when its superblock shuts down,
// that is when the last mount of it is gone, in whichever mount namespace. Bound into a sandbox, it tells when the
// sandbox's mount namespace is torn down.
class WatchedTmpfs {
 public:
  explicit WatchedTmpfs(const std::string& dir) : dir_(dir) {
    std::filesystem::create_directories(dir_);
    REQUIRE(::mount("nsbox-test-watched", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") == 0);
    mounted_ = true;
    std::filesystem::create_directories(data());
    inotify_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    REQUIRE(inotify_ >= 0);
    REQUIRE(::inotify_add_watch(inotify_, data().c_str(), IN_ATTRIB) >= 0);
  }
  ~WatchedTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    if (inotify_ >= 0) ::close(inotify_);
  }
  std::string data() const { return dir_ + "/data"; }
  // From now on only other mount namespaces (a sandbox's) can hold the file system.
  void DetachFromHost() {
    REQUIRE(::umount2(dir_.c_str(), MNT_DETACH) == 0);
    mounted_ = false;
  }
  bool WaitForShutdown(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    alignas(struct inotify_event) char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      struct pollfd fd = {inotify_, POLLIN, 0};
      ::poll(&fd, 1, 50);
      ssize_t n;
      while ((n = ::read(inotify_, buf, sizeof buf)) > 0) {
        for (char* p = buf; p < buf + n;) {
          auto* event = reinterpret_cast<struct inotify_event*>(p);
          if (event->mask & IN_UNMOUNT) return true;
          p += sizeof(struct inotify_event) + event->len;
        }
      }
    }
    return false;
  }

 private:
  std::string dir_;
  bool mounted_ = false;
  int inotify_ = -1;
};

struct RefusedRun {
  int exit_code = -1;
  std::string out, err;
};

// nsbox ARGS with one system call refused (errno `err`) by a seccomp filter on nsbox itself, as a container runtime's
// profile does. A run that hangs is killed after 30 s (SIGALRM) and fails.
RefusedRun NsboxWithSyscallRefused(int syscall_nr, int err, const std::vector<std::string>& args) {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  FILE* err_file = std::tmpfile();
  REQUIRE(err_file != nullptr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(::fileno(err_file), 2);
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(static_cast<uint16_t>(err)), syscall_nr, 0) != 0 ||
        ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || seccomp_load(ctx) != 0)
      _exit(126);
    ::alarm(30);
    std::vector<std::string> argv = {NsboxBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    _exit(127);
  }
  ::close(out[1]);
  RefusedRun run;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) run.out.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::rewind(err_file);
  while (size_t got = std::fread(buf, 1, sizeof buf, err_file)) run.err.append(buf, got);
  std::fclose(err_file);
  INFO(run.out << run.err);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) != 126);
  run.exit_code = WEXITSTATUS(status);
  return run;
}

// nsbox run --json ARGS with one system call refused; the parsed result.
nlohmann::json RunWithSyscallRefused(int syscall_nr, int err, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"run", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  return nlohmann::json::parse(NsboxWithSyscallRefused(syscall_nr, err, argv).out, nullptr, false);
}

nlohmann::json RunWithoutIoUring(const std::vector<std::string>& args) {
  return RunWithSyscallRefused(SCMP_SYS(io_uring_setup), EPERM, args);
}

}  // namespace

TEST_CASE("nothing is left behind after a successful run", "[integration][cleanup]") {
  CheckNothingLeft("success", {}, std::string(kSpawnsChildren) + "print('ok')", "ok");
}

TEST_CASE("nothing is left behind after a failing run", "[integration][cleanup]") {
  CheckNothingLeft("failure", {}, std::string(kSpawnsChildren) + "sys.exit(3)", "exit");
}

TEST_CASE("nothing is left behind after a time-out", "[integration][cleanup]") {
  CheckNothingLeft("time-out", {"--timeout", "1s"}, std::string(kSpawnsChildren) + "time.sleep(60)", "timeout");
}

TEST_CASE("nothing is left behind after nsbox is killed with SIGKILL", "[integration][cleanup]") {
  CheckNothingLeft("SIGKILL", {"--timeout", "60s"}, std::string(kSpawnsChildren) + "time.sleep(60)", "killed", true);
}

TEST_CASE("nothing is left behind after a setup error", "[integration][cleanup]") {
  TempDir tmp;
  auto mounts_before = MountLinesContaining("nsbox");
  SpawnOptions spawn;
  spawn.extra_env["TMPDIR"] = tmp.path();
  const auto groups_before = NsboxGroups();
  auto r = RunNsboxJson({"--", "/nonexistent/program"}, spawn);
  CHECK(r.status() == "setup_error");
  CHECK(MountLinesContaining("nsbox") == mounts_before);
  CHECK(EntryCount(tmp.path()) == 0);
  CHECK(NsboxGroups() == groups_before);
}

// A program that survives the forwarded signal (it traps it) is still copied on to a slow reader: only once the
// program has ended does a stop signal give up on what is left to write.
TEST_CASE("a program that survives a forwarded SIGTERM keeps its output, however slow the reader",
          "[integration][cleanup]") {
  TempDir tmp;
  const std::string fifo = tmp.path() + "/out";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  int keep = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // holds the pipe until the real reader comes
  REQUIRE(keep >= 0);
  TempDir ready;  // where the program says its trap is set
  REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
  auto bg = StartProcess({"/bin/sh", "-c",
                          "exec \"$0\" run --bind \"$2\":/ready -- /bin/sh -c 'trap \"echo got-term >&2\" TERM; "
                          "touch /ready/trapped; i=0; while [ $i -lt 20 ]; do seq 1 5000; sleep 0.1; i=$((i+1)); done; "
                          "echo FINAL' > \"$1\"",
                          NsboxBinary(), fifo, ready.path()});
  bool trapped = false;
  for (int i = 0; i < 1500 && !trapped; ++i) {
    trapped = std::filesystem::exists(ready.path() + "/trapped");
    if (!trapped) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(trapped);
  ::kill(bg.pid, SIGTERM);
  std::this_thread::sleep_for(2s);  // the pipe is full meanwhile
  int reader = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(reader >= 0);
  ::close(keep);
  std::string got;
  char buffer[65536];
  for (ssize_t n; (n = ::read(reader, buffer, sizeof buffer)) > 0;) got.append(buffer, static_cast<size_t>(n));
  ::close(reader);
  int status = bg.Wait();
  INFO(got.size() << " bytes; the end: " << got.substr(got.size() > 40 ? got.size() - 40 : 0));
  CHECK(got.ends_with("5000\nFINAL\n"));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// `nsbox run ... | head -n1`: once the reader has gone, the program is ended as a pipeline's writer would be, not
// left running (with its cgroups and host uid) until its time-out.
TEST_CASE("a run whose output reader has gone ends then, not at its time-out", "[integration][cleanup]") {
  std::string marker = UniqueMarker("reader-gone");
  const auto groups_before = NsboxGroups();
  auto r = RunProcess({"/bin/sh", "-c",
                       "\"$0\" run --timeout 60s -- /bin/sh -c 'while :; do echo line; sleep 0.05; done' \"$1\" | "
                       "head -n1",
                       NsboxBinary(), marker});
  INFO(r.out << r.err);
  CHECK(r.out.starts_with("line\n"));
  CHECK(r.err.find("writing the program's output: Broken pipe (EPIPE)") != std::string::npos);
  CHECK(r.elapsed < 30s);  // ended by the broken pipe, not by its 60 s time-out
  CHECK(WaitForNoPidsWithMarker(marker, 15s));
  CHECK(WaitForGroups(groups_before));
}

// A reader that is there but never reads: a SIGTERM to nsbox (forwarded, it ends the program) also gives up on the
// copy, and nsbox exits by the signal's code with nothing left, rather than wait for the reader forever.
TEST_CASE("a stop signal ends nsbox even while its output's reader takes nothing", "[integration][cleanup]") {
  TempDir tmp;
  std::string marker = UniqueMarker("reader-stalled");
  const auto groups_before = NsboxGroups();
  const std::string fifo = tmp.path() + "/out";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  int reader = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // there, and never reads
  REQUIRE(reader >= 0);
  auto bg = StartProcess(
      {"/bin/sh", "-c", "exec \"$0\" run -- /bin/sh -c 'yes; :' \"$1\" > \"$2\"", NsboxBinary(), marker, fifo});
  REQUIRE(WaitForProgramsWithMarker(marker, 1, 10s));
  std::this_thread::sleep_for(500ms);  // the pipe fills; nsbox's copy of the output waits for room
  ::kill(bg.pid, SIGTERM);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 200 && !exited; ++i) {
    exited = ::waitpid(bg.pid, &status, WNOHANG) == bg.pid;
    if (!exited) std::this_thread::sleep_for(100ms);
  }
  ::close(reader);  // unblocks an nsbox that is still waiting, so that a failure is reported, not a hang
  if (!exited) ::waitpid(bg.pid, &status, 0);
  CHECK(exited);
  const bool by_sigterm = (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) ||
                          (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM);
  CHECK(by_sigterm);
  CHECK(WaitForNoPidsWithMarker(marker, 15s));
  CHECK(WaitForGroups(groups_before));
}

// On cgroup v1 the group is made while the child builds its root: a limit that fails then must still stop the run
// before the program starts, and leave no child, cgroup or mount.
TEST_CASE("a cgroup limit that fails after the clone stops the run and leaves nothing behind",
          "[integration][cleanup]") {
  TempDir tmp;
  std::string marker = UniqueMarker("cgroup-fail");
  auto mounts_before = MountLinesContaining("nsbox");
  const auto groups_before = NsboxGroups();  // this run must add none
  SpawnOptions spawn;
  spawn.extra_env["TMPDIR"] = tmp.path();
  auto r =
      RunNsboxJson({"--cpus", "0.001", "--", "/usr/bin/python3", "-c", "open('/workspace/ran','w')", marker}, spawn);
  CHECK(r.status() == "setup_error");
  CHECK(r.process.exit_code == 125);
  CHECK(r.json.value("reason", "").find("--cpus 0.001 is below the minimum of 0.01") != std::string::npos);
  CHECK(WaitForNoPidsWithMarker(marker, 15s));
  CHECK(MountLinesContaining("nsbox") == mounts_before);
  CHECK(EntryCount(tmp.path()) == 0);
  CHECK(NsboxGroups() == groups_before);
}

// pid 1's exit does not tear the sandbox's mount namespace down (nsbox would wait for that, ~0.5 ms): an io_uring's
// file table holds the namespace, and the kernel releases it from a worker once nsbox has closed it. The teardown
// must still happen, soon: the mounts of a file system bound into the sandbox are all gone within seconds.
TEST_CASE("the sandbox's mount namespace is torn down soon after nsbox returns", "[integration][cleanup]") {
  if (::geteuid() != 0) {
    RecordSkip("integration_tests", "the sandbox's mount namespace is torn down soon after nsbox returns",
               "mounting the watched tmpfs needs root");
    return;
  }
  TempDir tmp;
  std::filesystem::permissions(tmp.path(), std::filesystem::perms(0755));  // the sandbox uid reaches the bind source
  const std::string marker = UniqueMarker("ns-release");

  SECTION("with io_uring: nsbox holds the namespace in one while the sandbox runs") {
    WatchedTmpfs fs(tmp.path() + "/fs");
    auto bg = StartProcess({NsboxBinary(), "run", "--json", "--ro-bind", fs.data() + ":/data", "--", "/usr/bin/python3",
                            "-c", "import time; time.sleep(30)", marker});
    // nsbox shows the marker as soon as it starts, the program once it runs (nsbox's own command line is hidden by
    // then: its pid 1 shares it): the ring is looked for until the program has had time to start.
    REQUIRE(WaitForPidWithMarker(marker, 10s));
    bool holds_ring = false;
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         !holds_ring && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(10ms)) {
      for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(bg.pid) + "/fd")) {
        std::error_code ec;
        if (std::filesystem::read_symlink(fd.path(), ec).string() == "anon_inode:[io_uring]") holds_ring = true;
      }
    }
    CHECK(holds_ring);
    ::kill(bg.pid, SIGTERM);
    bg.Wait();
    CHECK(WaitForNoPidsWithMarker(marker, 15s));
    fs.DetachFromHost();
    CHECK(fs.WaitForShutdown(15s));
  }

  // A file the program reads through the bind, then the file system detached from the host: the sandbox's
  // namespace, once released, was its last holder.
  for (bool io_uring : {true, false}) {
    DYNAMIC_SECTION((io_uring
                         ? "with io_uring: a run that ends normally"
                         : "without io_uring (refused by seccomp): the same run; pid 1's exit does the teardown")) {
      WatchedTmpfs fs(tmp.path() + "/fs");
      tmp.Write("fs/data/f", "seen");
      const std::vector<std::string> args = {"--ro-bind", fs.data() + ":/data", "--", "/bin/cat", "/data/f"};
      nlohmann::json json = io_uring ? RunNsboxJson(args).json : RunWithoutIoUring(args);
      INFO(json.dump());
      CHECK(json.value("status", "") == "ok");
      CHECK(json.value("stdout", "") == "seen");
      fs.DetachFromHost();
      CHECK(fs.WaitForShutdown(15s));
    }
  }
}

// A container profile older than close_range(2): the sandbox's child refuses to start without it (its descriptors
// could not all be closed on exec), and nsbox's helpers (the cgroup reaper, pid 1) close one by one instead, so that
// none holds a copy of nsbox's end of a pipe: the run ends at once, 125, and leaves nothing.
TEST_CASE("with close_range refused, a run fails closed at once and leaves nothing", "[integration][cleanup]") {
  const auto groups_before = NsboxGroups();
  auto mounts_before = MountLinesContaining("nsbox");
  auto started = std::chrono::steady_clock::now();
  nlohmann::json r = RunWithSyscallRefused(SCMP_SYS(close_range), ENOSYS, {"--", "/bin/true"});
  // A hang watchdog, not a timing: a copy of nsbox's pipe end left open held the run until something killed it.
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
  CHECK(r.value("status", "") == "setup_error");
  CHECK(r.value("reason", "").find("close_range") != std::string::npos);
  CHECK(MountLinesContaining("nsbox") == mounts_before);
  CHECK(NsboxGroups() == groups_before);
}

// Every exec of a session watches its program through pidfd_open: with it refused (a caller's filter, an old kernel),
// the session is refused at its start, naming the call, rather than made and then failing each exec.
TEST_CASE("with pidfd_open refused, a session is refused at its start and leaves nothing", "[integration][cleanup]") {
  TempDir state;
  const auto groups_before = NsboxGroups();
  ::setenv("NSBOX_STATE_DIR", state.path().c_str(), 1);
  RefusedRun created = NsboxWithSyscallRefused(SCMP_SYS(pidfd_open), EPERM, {"session", "create"});
  const size_t sessions_made = EntryCount(state.path());
  if (sessions_made != 0) (void)RunNsboxRaw({"session", "rm", "--all"});  // made in spite of it: end it
  ::unsetenv("NSBOX_STATE_DIR");
  INFO(created.out << created.err);
  CHECK(created.exit_code == 125);
  CHECK(created.err.find("pidfd_open") != std::string::npos);
  CHECK(created.err.find("EPERM") != std::string::npos);
  CHECK(sessions_made == 0);
  CHECK(NsboxGroups() == groups_before);
}
