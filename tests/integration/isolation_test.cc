// Integration: the isolation items of the run contract: namespaces, pid 1, hostname, loopback, the uid mapping seen
// from the host, capabilities, no_new_privs, session and terminal, descriptors, environment.
#include <linux/kcmp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
using namespace std::chrono_literals;

namespace {

std::string HostNamespace(const std::string& name) {
  char buf[256] = {};
  ssize_t n = ::readlink(("/proc/self/ns/" + name).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

}  // namespace

TEST_CASE("every namespace differs from the host's: user, pid, mnt, net, ipc, uts, cgroup",
          "[integration][isolation]") {
  std::string names[] = {"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"};
  std::string code = "print(' '.join(os.readlink('/proc/self/ns/' + n) for n in " +
                     std::string("['user', 'pid', 'mnt', 'net', 'ipc', 'uts', 'cgroup']))\n");
  auto r = RunPython(code);
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  std::istringstream inside(r.out());
  for (const auto& name : names) {
    std::string link;
    inside >> link;
    INFO(name << ": inside " << link << ", host " << HostNamespace(name));
    CHECK(link.starts_with(name + ":["));
    CHECK(link != HostNamespace(name));
  }
}

TEST_CASE("--network host shares the host's network namespace and nothing else", "[integration][isolation]") {
  auto r =
      RunPython("print(os.readlink('/proc/self/ns/net'), os.readlink('/proc/self/ns/uts'))\n", {"--network", "host"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  std::istringstream words(r.out());
  std::string net, uts;
  words >> net >> uts;
  CHECK(net == HostNamespace("net"));
  CHECK(uts != HostNamespace("uts"));
}

TEST_CASE("the program runs as pid 2 under nsbox's own pid 1", "[integration][isolation]") {
  auto r = RunPython("print(os.getpid(), os.getppid(), open('/proc/1/comm').read().strip())\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "2 1 nsbox\n");
}

TEST_CASE("the hostname is nsbox", "[integration][isolation]") {
  auto r = RunNsboxJson({"--", "/bin/hostname"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "nsbox\n");
}

TEST_CASE("loopback is up and usable; it is the only interface", "[integration][isolation]") {
  auto r = RunPython(R"(
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
cli = socket.create_connection(srv.getsockname(), timeout=2)
conn, _ = srv.accept(); cli.sendall(b"ping"); print(conn.recv(4).decode(), socket.if_nameindex())
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ping [(1, 'lo')]\n");
}

// Run as root, the host uid is leased from a range (sandbox/host_id_lease.h), pinned here to one id; it used to be
// 65534 for every sandbox.
TEST_CASE("the sandbox user is uid 1000 inside and a leased unprivileged host uid outside",
          "[integration][isolation]") {
  TempDir locks;
  SpawnOptions spawn;
  spawn.extra_env["NSBOX_HOST_ID_DIR"] = locks.path() + "/ids";
  spawn.extra_env["NSBOX_HOST_ID_RANGE"] = "3200000-3200000";
  // The program ends once the host has read its status (the file `done` in the workspace), not on a signal that could
  // come before it printed.
  TempDir workspace;
  REQUIRE(::chmod(workspace.path().c_str(), 0777) == 0);
  std::string marker = UniqueMarker("uid");
  auto bg =
      StartProcess({NsboxBinary(), "run", "--json", "--timeout", "20s", "--workspace", workspace.path(), "--",
                    "/usr/bin/python3", "-c",
                    "import os, sys, time\nprint(os.getuid(), os.getgid(), open('/proc/self/uid_map').read().split(), "
                    "flush=True)\nfor _ in range(300):\n    if os.path.exists('/workspace/done'): break\n"
                    "    time.sleep(0.05)",
                    marker},
                   spawn);
  // The sandboxed python is the marker process named python3 (nsbox and its pid 1 carry the marker in their own
  // command lines before pid 1 wipes its copy).
  std::string uid_line, gid_line;
  for (int i = 0; i < 500 && uid_line.empty(); ++i) {
    for (pid_t pid : PidsWithMarker(marker)) {
      std::ifstream status("/proc/" + std::to_string(pid) + "/status");
      std::string line, name;
      while (std::getline(status, line)) {
        if (line.starts_with("Name:")) name = line;
        if (line.starts_with("Uid:") && name.find("python3") != std::string::npos) uid_line = line;
        if (line.starts_with("Gid:") && name.find("python3") != std::string::npos) gid_line = line;
      }
    }
    if (uid_line.empty()) std::this_thread::sleep_for(20ms);
  }
  std::ofstream(workspace.path() + "/done") << "";
  bg.Wait();
  auto json = nlohmann::json::parse(bg.Out(), nullptr, false);
  INFO(bg.Out());
  CHECK(uid_line == "Uid:\t3200000\t3200000\t3200000\t3200000");
  CHECK(gid_line == "Gid:\t3200000\t3200000\t3200000\t3200000");
  CHECK(json.value("stdout", "").starts_with("1000 1000 ['1000', '3200000', '1']\n"));
}

TEST_CASE("no capabilities in any set and no_new_privs set", "[integration][isolation]") {
  auto r = RunShell("grep -E '^(Cap|NoNewPrivs)' /proc/self/status");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() ==
        "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
        "CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n");
}

// pid 1 is a fork of nsbox: it must not keep the supplementary groups nsbox was started with (here host groups 4 and
// 27, which would show as the overflow gid 65534 inside), nor any other credential of nsbox's.
TEST_CASE("pid 1 and the program hold the sandbox's uid and gid and no other group, whatever nsbox's groups",
          "[integration][isolation]") {
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    RecordSkip("integration_tests", "pid 1 and the program hold the sandbox's uid and gid and no other group",
               "needs root and setpriv to start nsbox with extra groups");
    return;
  }
  auto p = RunProcess({"/usr/bin/setpriv", "--groups", "4,27", "--", NsboxBinary(), "run", "--json", "--", "/bin/sh",
                       "-c", "grep -E '^(Uid|Gid|Groups)' /proc/1/status /proc/self/status"});
  INFO(p.out << p.err);
  auto json = nlohmann::json::parse(p.out, nullptr, false);
  REQUIRE(json.value("status", "") == "ok");
  CHECK(json.value("stdout", "") ==
        "/proc/1/status:Uid:\t1000\t1000\t1000\t1000\n/proc/1/status:Gid:\t1000\t1000\t1000\t1000\n"
        "/proc/1/status:Groups:\t1000 \n"
        "/proc/self/status:Uid:\t1000\t1000\t1000\t1000\n/proc/self/status:Gid:\t1000\t1000\t1000\t1000\n"
        "/proc/self/status:Groups:\t1000 \n");
}

TEST_CASE("the program leads a new session and has no controlling terminal", "[integration][isolation]") {
  auto r = RunPython(R"(
stat = open("/proc/self/stat").read().rsplit(')', 1)[1].split()
print(os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid(), stat[4])   # field 7: tty_nr
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "True True 0\n");
}

TEST_CASE("only descriptors 0, 1 and 2 are open, and with --lang the code's sealed memfd", "[integration][isolation]") {
  auto r = RunNsboxJson({"--", "/bin/ls", "/proc/self/fd"});  // ls's own directory handle is 3
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "0\n1\n2\n3\n");
  auto code = RunShell("ls -l /proc/self/fd | grep -c ' -> '; ls -l /proc/self/fd/ | grep -c 'memfd:nsbox-code'");
  INFO(code.Describe());
  REQUIRE(code.status() == "ok");
  CHECK(code.out() == "5\n1\n");  // 0, 1, 2, the code and ls's handle
}

TEST_CASE("the environment is small and clean; --env adds to it", "[integration][isolation]") {
  SpawnOptions spawn;
  spawn.extra_env["NSBOX_TEST_LEAK"] = "1";
  auto r = RunNsboxJson({"--env", "EXTRA=yes", "--env", "PATH=/usr/bin:/bin", "--", "/usr/bin/env"}, spawn);
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  std::istringstream lines(r.out());
  std::vector<std::string> env;
  for (std::string line; std::getline(lines, line);) env.push_back(line);
  std::sort(env.begin(), env.end());
  CHECK(env == std::vector<std::string>{"EXTRA=yes", "HOME=/home/sandbox", "LANG=C.UTF-8", "LOGNAME=sandbox",
                                        "PATH=/usr/bin:/bin", "PIP_BREAK_SYSTEM_PACKAGES=1", "SHELL=/bin/sh",
                                        "TMPDIR=/tmp", "USER=sandbox"});
}

// pid 1 is a fork of nsbox, not a process sharing its memory (docs/notes/engine-proc.md): while the sandbox runs,
// nsbox's own command line is intact (pid 1 wipes only its own copy), and the kernel sees two memories (kcmp KCMP_VM).
TEST_CASE("pid 1 has memory of its own: nsbox's command line stays whole while the sandbox runs",
          "[integration][isolation]") {
  TempDir ready;
  REQUIRE(::chmod(ready.path().c_str(), 0777) == 0);
  const std::string marker = UniqueMarker("argv");
  auto bg = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "20s", "--bind", ready.path() + ":/ready", "--",
                          "/bin/sh", "-c", "touch /ready/ok; exec sleep 60", marker});
  bool is_ready = false;
  for (int i = 0; i < 500 && !is_ready; ++i) {
    is_ready = std::filesystem::exists(ready.path() + "/ok");
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(is_ready);
  std::ifstream cmdline_file("/proc/" + std::to_string(bg.pid) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(cmdline_file)), std::istreambuf_iterator<char>());
  // pid 1: nsbox's child whose command line reads "nsbox-init".
  pid_t pid1 = -1;
  std::ifstream children("/proc/" + std::to_string(bg.pid) + "/task/" + std::to_string(bg.pid) + "/children");
  for (pid_t child; children >> child;) {
    std::ifstream child_cmdline("/proc/" + std::to_string(child) + "/cmdline");
    std::string text((std::istreambuf_iterator<char>(child_cmdline)), std::istreambuf_iterator<char>());
    if (text.rfind("nsbox-init", 0) == 0) pid1 = child;
  }
  const long same_vm = pid1 > 0 ? ::syscall(SYS_kcmp, bg.pid, pid1, KCMP_VM, 0, 0) : -2;
  const int kcmp_errno = errno;
  ::kill(bg.pid, SIGTERM);
  bg.Wait();
  INFO("nsbox's cmdline: " << cmdline);
  CHECK(cmdline.find(marker) != std::string::npos);
  CHECK(cmdline.find("--timeout") != std::string::npos);
  REQUIRE(pid1 > 0);
  if (same_vm < 0 && kcmp_errno == ENOSYS) {
    WARN("kcmp(2) is not in this kernel (CONFIG_KCMP): the memory check is skipped");
  } else {
    CHECK(same_vm > 0);  // 0 would be one memory shared by both
  }
}
