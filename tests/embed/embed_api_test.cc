// The public API (include/nsbox/) on its own: this file is compiled with only include/ on its include path and
// linked with the engine's library. Real sandboxes: Run, RunAsync/AwaitResult, and Kill as its own verdict.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include <nsbox/executor.h>
#include <nsbox/policy.h>
#include <nsbox/result.h>
#include <nsbox/sandbox.h>

// The public headers bring no JSON library with them (the system's include path would find one).
#ifdef NLOHMANN_JSON_VERSION_MAJOR
#error "include/nsbox/ pulled in nlohmann_json"
#endif

namespace fs = std::filesystem;

namespace {

nsbox::Policy TestPolicy() {
  nsbox::PolicyBuilder builder;
  builder.SetHostViewFile(NSBOX_TEST_DATADIR "/rootfs/host.json")
      .SetSeccompProfile("default", NSBOX_TEST_DATADIR "/seccomp-profiles");
  // An ordinary user gets no cgroup of nsbox's without a delegated one; root gets the limits.
  if (::geteuid() == 0) {
    nsbox::CgroupLimits limits;
    limits.memory_max_bytes = 128ull << 20;
    limits.pids_max = 32;
    builder.SetCgroupLimits(limits);
  } else {
    builder.DangerDisableCgroupLimits();
  }
  auto policy = builder.TryBuild();
  INFO(policy.status().message());
  REQUIRE(policy.ok());
  return *policy;
}

nsbox::Executor Command(std::vector<std::string> argv) {
  nsbox::Executor executor;
  executor.argv = std::move(argv);
  executor.env = nsbox::DefaultSandboxEnv();
  executor.wall_timeout = std::chrono::seconds(120);
  return executor;
}

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The host pid of the sandbox's pid 1, from the hook the engine calls once it exists.
struct Pid1Hook : nsbox::SandboxHooks {
  std::atomic<pid_t> pid1{-1};
  nsbox::Status OnChildCreated(pid_t child) override {
    pid1 = child;
    return nsbox::OkStatus();
  }
};

// The directory of the memory cgroup (v1) or the one group (v2) that a process sits in, "" if none is found.
std::string CgroupDirOf(pid_t pid) {
  std::istringstream lines(ReadWhole("/proc/" + std::to_string(pid) + "/cgroup"));
  std::string line, unified;
  while (std::getline(lines, line)) {
    auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (controllers.find("memory") != std::string::npos) return "/sys/fs/cgroup/memory" + path;
    if (controllers.empty()) unified = path;
  }
  if (unified.empty() || unified == "/") return "";
  return (fs::exists("/sys/fs/cgroup/cgroup.controllers") ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified") + unified;
}

}  // namespace

TEST_CASE("an embedder's Run gives the program's output and exit code") {
  nsbox::Sandbox sandbox(Command({"/bin/sh", "-c", "echo hello; exit 3"}), TestPolicy());
  nsbox::Result result = sandbox.Run();
  INFO(result.reason);
  CHECK(result.status == nsbox::RunStatus::kExit);
  CHECK(result.exit_code == 3);
  CHECK(result.stdout_data == "hello\n");
}

TEST_CASE("Kill during RunAsync ends the run as killed (not a time-out) and leaves no process or cgroup behind") {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  Pid1Hook hook;
  nsbox::Sandbox sandbox(Command({"/bin/sh", "-c", "echo started; exec sleep 600"}), TestPolicy());
  sandbox.SetHooks(&hook);
  sandbox.PassOutputOn(pipe_fds[1], pipe_fds[1]);
  sandbox.RunAsync();
  // The program runs: its first line has come out.
  char buffer[64] = {};
  ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer - 1);
  REQUIRE(n > 0);
  CHECK(std::string(buffer, static_cast<size_t>(n)) == "started\n");
  const pid_t pid1 = hook.pid1;
  REQUIRE(pid1 > 0);
  // The program (sleep) is pid 1's child; where it sits is the sandbox's cgroup.
  std::string children = ReadWhole("/proc/" + std::to_string(pid1) + "/task/" + std::to_string(pid1) + "/children");
  const pid_t program = static_cast<pid_t>(std::atoi(children.c_str()));
  REQUIRE(program > 0);
  const std::string group = ::geteuid() == 0 ? CgroupDirOf(program) : "";
  if (::geteuid() == 0) {
    INFO("the program's cgroup: " << group);
    REQUIRE(!group.empty());
    REQUIRE(fs::exists(group));
  }

  sandbox.Kill();
  nsbox::Result result = sandbox.AwaitResult();
  INFO(result.reason);
  CHECK(result.status == nsbox::RunStatus::kKilled);
  CHECK(std::string(nsbox::RunStatusName(result.status)) == "killed");
  CHECK(result.reason.find("cancelled by the caller") != std::string::npos);
  CHECK(result.ShellExitCode() == 137);
  // Nothing left behind: pid 1 and the program are gone (reaped, not zombies), and so is the group.
  CHECK_FALSE(fs::exists("/proc/" + std::to_string(pid1)));
  CHECK_FALSE(fs::exists("/proc/" + std::to_string(program)));
  if (!group.empty()) CHECK_FALSE(fs::exists(group));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

// A reader that never reads held Run() after the sandbox had ended, past its own time-out and past a Kill(): the
// copy of the output waited for the pipe. Kill() now gives up on what is left of the copy.
TEST_CASE("a Kill ends the wait for a PassOutputOn pipe that nobody reads") {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  nsbox::Executor executor = Command({"/bin/sh", "-c", "head -c 1000000 /dev/zero; exec sleep 600"});
  executor.wall_timeout = std::chrono::milliseconds(1500);
  nsbox::Sandbox sandbox(std::move(executor), TestPolicy());
  sandbox.PassOutputOn(pipe_fds[1], pipe_fds[1]);
  Pid1Hook hook;
  sandbox.SetHooks(&hook);
  sandbox.RunAsync();
  // The Kill comes once the time-out has struck (its verdict is what this test keeps): once pid 1 is gone or a zombie,
  // however long a loaded machine took to set the sandbox up. The copy of the output waits meanwhile.
  auto ended = [&] {
    const pid_t pid1 = hook.pid1;
    if (pid1 <= 0) return false;
    const std::string stat = ReadWhole("/proc/" + std::to_string(pid1) + "/stat");
    const size_t paren = stat.rfind(')');
    return stat.empty() || (paren != std::string::npos && stat.compare(paren, 4, ") Z ") == 0);
  };
  for (int i = 0; i < 1200 && !ended(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(ended());
  sandbox.Kill();
  auto awaited = std::async(std::launch::async, [&] { return sandbox.AwaitResult(); });
  bool returned = awaited.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!returned) {  // unblock it, so that the test fails rather than hangs
    char buffer[65536];
    ::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
    while (awaited.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready)
      (void)!::read(pipe_fds[0], buffer, sizeof buffer);
  }
  CHECK(returned);
  nsbox::Result result = awaited.get();
  INFO(result.reason);
  CHECK(result.status == nsbox::RunStatus::kTimeout);  // the verdict the program had earned stays
  CHECK(result.stdout_data.size() > 0);
  CHECK(result.output_write_errno == ECANCELED);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST_CASE("a Kill before the run starts ends it as killed, and its program never runs") {
  nsbox::Sandbox sandbox(Command({"/bin/sh", "-c", "echo RAN"}), TestPolicy());
  sandbox.Kill();
  sandbox.RunAsync();
  nsbox::Result result = sandbox.AwaitResult();
  INFO(result.reason);
  CHECK(result.status == nsbox::RunStatus::kKilled);
  CHECK(result.stdout_data.empty());
  CHECK(result.reason.find("before the program started; nothing ran") != std::string::npos);
}

// Kills the run from the hook the engine calls while pid 1 exists but is still setting up (before it is released).
struct KillAtCreation : nsbox::SandboxHooks {
  nsbox::Sandbox* sandbox = nullptr;
  nsbox::Status OnChildCreated(pid_t) override {
    sandbox->Kill();
    return nsbox::OkStatus();
  }
};

TEST_CASE("a Kill while the sandbox is set up is not lost: the program never runs") {
  // Before pid 1 is released the engine sees the request and releases nothing; after it, pid 1 holds nsbox's kill
  // signal pending (an init of a pid namespace drops one it has no handler for) and starts no program.
  for (int i = 0; i < 5; ++i) {
    nsbox::Sandbox sandbox(Command({"/bin/sh", "-c", "echo RAN"}), TestPolicy());
    KillAtCreation hook;
    hook.sandbox = &sandbox;
    sandbox.SetHooks(&hook);
    nsbox::Result result = sandbox.Run();
    INFO(result.reason);
    CHECK(result.status == nsbox::RunStatus::kKilled);
    CHECK(result.stdout_data.empty());
  }
}

TEST_CASE("an Executor's time limit must be positive; one beyond a year is no limit, not an overflow") {
  auto zero = Command({"/bin/true"});
  zero.wall_timeout = std::chrono::milliseconds(0);
  nsbox::Result refused = nsbox::Sandbox(zero, TestPolicy()).Run();
  CHECK(refused.status == nsbox::RunStatus::kSetupError);
  CHECK(refused.reason.find("must be positive") != std::string::npos);

  auto forever = Command({"/bin/sh", "-c", "sleep 0.2; echo finished"});
  forever.wall_timeout = std::chrono::milliseconds::max();
  nsbox::Result result = nsbox::Sandbox(forever, TestPolicy()).Run();
  INFO(result.reason);
  CHECK(result.status == nsbox::RunStatus::kOk);
  CHECK(result.stdout_data == "finished\n");
}

// As a pipeline's writer is ended by SIGPIPE: a copy of the output whose reader has gone ends the run.
TEST_CASE("a PassOutputOn pipe whose reader has gone ends the run early, and says why") {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  ::close(pipe_fds[0]);
  nsbox::Sandbox sandbox(Command({"/bin/sh", "-c", "while :; do echo line; sleep 0.05; done"}), TestPolicy());
  sandbox.PassOutputOn(pipe_fds[1], pipe_fds[1]);
  nsbox::Result result = sandbox.Run();  // its time limit is 120 s
  INFO(result.reason);
  CHECK(result.status == nsbox::RunStatus::kKilled);
  CHECK(result.reason == "ended early: its output could not be passed on (EPIPE)");
  CHECK(result.output_write_errno == EPIPE);
  CHECK(result.wall_ms < 60'000);
  CHECK(result.stdout_data.starts_with("line\n"));
  ::close(pipe_fds[1]);
}

// What a C string cannot carry, and a descriptor that is not there, were once cut or read as end of file in silence.
TEST_CASE("Run refuses an executor it could not run as given, naming the field") {
  auto refused = [](nsbox::Executor executor) {
    nsbox::Sandbox sandbox(std::move(executor), TestPolicy());
    nsbox::Result result = sandbox.Run();
    CHECK(result.status == nsbox::RunStatus::kSetupError);
    return result.reason;
  };
  CHECK_THAT(refused(Command({"/bin/echo", std::string("a\0b", 3)})), Catch::Contains("Executor::argv[1] holds a NUL"));
  nsbox::Executor bad_name = Command({"/bin/true"});
  bad_name.env["A=B"] = "c";
  CHECK_THAT(refused(bad_name), Catch::Contains("the name 'A=B' is empty or holds '='"));
  nsbox::Executor bad_value = Command({"/bin/true"});
  bad_value.env["A"] = std::string("x\0y", 3);
  CHECK_THAT(refused(bad_value), Catch::Contains("the value of A holds a NUL byte"));
  nsbox::Executor closed_stdin = Command({"/bin/cat"});
  closed_stdin.stdin_fd = 9999;
  CHECK_THAT(refused(closed_stdin), Catch::Contains("Executor::stdin_fd 9999 is not an open descriptor"));
  // A descriptor input cannot be read from read as an empty input: the program ran "ok" on nothing.
  int pipe_ends[2];
  REQUIRE(::pipe2(pipe_ends, O_CLOEXEC) == 0);
  nsbox::Executor write_end = Command({"/bin/cat"});
  write_end.stdin_fd = pipe_ends[1];
  CHECK_THAT(refused(write_end), Catch::Contains("is open for writing only"));
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
  const int dir = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(dir >= 0);
  nsbox::Executor directory = Command({"/bin/cat"});
  directory.stdin_fd = dir;
  CHECK_THAT(refused(directory), Catch::Contains("is a directory"));
  ::close(dir);
}

TEST_CASE("a Sandbox runs once: a second Run or RunAsync is a setup error and runs nothing") {
  nsbox::PolicyBuilder builder;
  builder.SetHostViewFile(NSBOX_TEST_DATADIR "/rootfs/host.json")
      .SetSeccompProfile("default", NSBOX_TEST_DATADIR "/seccomp-profiles")
      .DangerDisableCgroupLimits();
  auto policy = builder.TryBuild();
  REQUIRE(policy.ok());
  nsbox::Sandbox sandbox(Command({"/bin/echo", "once"}), *policy);
  CHECK(sandbox.Run().stdout_data == "once\n");
  nsbox::Result again = sandbox.Run();
  CHECK(again.status == nsbox::RunStatus::kSetupError);
  CHECK(again.reason == "this Sandbox has run already (once per Sandbox: make another)");
  CHECK(again.stdout_data.empty());
  sandbox.RunAsync();
  nsbox::Result async_again = sandbox.AwaitResult();
  CHECK(async_again.status == nsbox::RunStatus::kSetupError);
  CHECK(async_again.stdout_data.empty());
}

TEST_CASE("Run refuses Executor::memory_max_bytes, a session exec's own limit, rather than ignore it") {
  auto executor = Command({"/bin/true"});
  executor.memory_max_bytes = 32ull << 20;
  nsbox::Result result = nsbox::Sandbox(executor, TestPolicy()).Run();
  CHECK(result.status == nsbox::RunStatus::kSetupError);
  CHECK(result.reason.find("memory_max_bytes") != std::string::npos);
}

TEST_CASE("AwaitResult without RunAsync is a setup error, and a Sandbox destroyed while running kills its run") {
  {
    nsbox::Sandbox sandbox(Command({"/bin/true"}), TestPolicy());
    nsbox::Result result = sandbox.AwaitResult();
    CHECK(result.status == nsbox::RunStatus::kSetupError);
    CHECK(result.reason.find("RunAsync") != std::string::npos);
  }
  Pid1Hook hook;
  {
    nsbox::Sandbox sandbox(Command({"/bin/sleep", "600"}), TestPolicy());
    sandbox.SetHooks(&hook);
    sandbox.RunAsync();
    // The destructor kills the run and waits for it; the hook may or may not have seen pid 1 by then.
  }
  if (hook.pid1 > 0) CHECK_FALSE(fs::exists("/proc/" + std::to_string(hook.pid1.load())));
}

TEST_CASE("a policy on the host root without a host view is refused at run time, naming the setting") {
  auto policy = nsbox::PolicyBuilder().DangerDisableCgroupLimits().TryBuild();
  REQUIRE(policy.ok());
  nsbox::Sandbox sandbox(Command({"/bin/true"}), *policy);
  nsbox::Result result = sandbox.Run();
  CHECK(result.status == nsbox::RunStatus::kSetupError);
  CHECK(result.reason.find("SetHostViewFile") != std::string::npos);
}

TEST_CASE("a hostname is a host name: other characters are refused when the policy is built") {
  auto built = [](const std::string& name) { return nsbox::PolicyBuilder().SetHostname(name).TryBuild(); };
  CHECK(built("box-1.local").ok());
  for (const std::string& bad :
       std::vector<std::string>{"a\nb", "a/b", "-box", "b\x1b[31m", std::string(64, 'a'), ""}) {
    auto refused = built(bad);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.status().message(), Catch::StartsWith("hostname"));
  }
}

TEST_CASE("a process that ignores SIGCHLD is refused a run: the kernel would take pid 1's end before the engine") {
  struct sigaction previous {};
  for (bool no_wait_flag : {false, true}) {
    INFO(no_wait_flag);
    struct sigaction ignoring {};
    if (no_wait_flag) {
      ignoring.sa_handler = SIG_DFL;
      ignoring.sa_flags = SA_NOCLDWAIT;
    } else {
      ignoring.sa_handler = SIG_IGN;
    }
    REQUIRE(::sigaction(SIGCHLD, &ignoring, &previous) == 0);
    nsbox::Sandbox sandbox(Command({"/bin/sh", "-c", "exit 7"}), TestPolicy());
    nsbox::Result result = sandbox.Run();
    REQUIRE(::sigaction(SIGCHLD, &previous, nullptr) == 0);
    CHECK(result.status == nsbox::RunStatus::kSetupError);
    CHECK_THAT(result.reason, Catch::Contains("SIGCHLD is ignored in this process"));
  }
  // With the default action back, the same run ends as it does.
  nsbox::Sandbox sandbox(Command({"/bin/sh", "-c", "exit 7"}), TestPolicy());
  nsbox::Result result = sandbox.Run();
  CHECK(result.status == nsbox::RunStatus::kExit);
  CHECK(result.exit_code == 7);
}

TEST_CASE("RunAsync that cannot start its thread gives a setup error from AwaitResult, not an exception") {
  if (::geteuid() != 0) return;  // needs to become another user, whose process limit root is not held to
  nsbox::Policy policy = TestPolicy();
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // As nobody, with no process (or thread) to spare: the thread cannot be made.
    struct rlimit none = {0, 0};
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0 ||
        ::setrlimit(RLIMIT_NPROC, &none) != 0)
      ::_exit(2);
    nsbox::Sandbox sandbox(Command({"/bin/true"}), policy);
    sandbox.RunAsync();
    nsbox::Result result = sandbox.AwaitResult();
    const bool refused = result.status == nsbox::RunStatus::kSetupError &&
                         result.reason.find("RunAsync: starting the run's thread") != std::string::npos;
    ::_exit(refused ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("the builder refuses host ids of root and a swap limit that overflows, before any run") {
  nsbox::PolicyBuilder root_ids;
  root_ids.SetHostViewFile(NSBOX_TEST_DATADIR "/rootfs/host.json").SetHostIds(0, 1000);
  auto refused = root_ids.TryBuild();
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("must not be host root"));

  nsbox::CgroupLimits limits;
  limits.memory_swap_max_bytes = ~uint64_t{0};
  nsbox::PolicyBuilder swap;
  swap.SetHostViewFile(NSBOX_TEST_DATADIR "/rootfs/host.json").SetCgroupLimits(limits);
  auto overflow = swap.TryBuild();
  REQUIRE_FALSE(overflow.ok());
  CHECK_THAT(overflow.status().message(), Catch::Contains("memory plus swap overflows"));
}
