// Unit tests: the clone helpers (sandbox/base/clone.h) that need no privileges: clone3 children, vfork-style children.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "sandbox/base/clone.h"

namespace {

int ExitWith7(void*) { _exit(7); }

// A child that starts a vfork-style child of its own, as a session's exec helper starts the payload.
int StartsOneMore(void*) {
  pid_t inner = nsbox::StartVforkChild(ExitWith7, nullptr);
  _exit(inner > 0 ? 0 : 1);
}

// The child's exit code, or -1 (no assertions here: threads call it).
int RunAndWait(int (*entry)(void*)) {
  pid_t pid = nsbox::StartVforkChild(entry, nullptr);
  int status = 0;
  if (pid <= 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

long VmSizeKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmSize:", 0) == 0) return std::stol(line.substr(7));
  return -1;
}

// What a cloned child reads and writes: its own copy, not the test's.
int value_in_memory = 0;

}  // namespace

// pid 1 of a run is a fork-like clone3 (CloneWithPidfd): a copy of nsbox's memory, so that nothing it changes (its
// command line, its dumpable flag, its variables) is nsbox's, and a pidfd that reports its exit.
TEST_CASE("a fork-like clone3 child has a copy of the caller's memory and a pidfd", "[launch]") {
  int go[2];
  REQUIRE(::pipe(go) == 0);
  value_in_memory = 1;
  int pidfd = -1;
  pid_t pid = nsbox::CloneWithPidfd(0, &pidfd, -1);
  if (pid == 0) {
    char byte;
    if (::read(go[0], &byte, 1) != 1) _exit(10);
    const int seen = value_in_memory;  // the caller's write after the clone is not in this copy
    value_in_memory = 99;              // nor is this write in the caller's
    _exit(seen == 1 ? 0 : 11);
  }
  REQUIRE(pid > 0);
  CHECK(pidfd >= 0);
  value_in_memory = 2;
  REQUIRE(::write(go[1], "g", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(value_in_memory == 2);
  struct pollfd exited = {pidfd, POLLIN, 0};
  CHECK(::poll(&exited, 1, 0) == 1);
  ::close(pidfd);
  ::close(go[0]);
  ::close(go[1]);
}

// The supervisor of a session starts a helper (which starts the payload) from whichever worker thread serves the
// exec, and workers come and go: the stacks those children ran on are reused, not kept per thread until it ends.
TEST_CASE("vfork-style children reuse their stacks; threads that come and go leave no memory behind", "[launch]") {
  CHECK(RunAndWait(ExitWith7) == 7);
  CHECK(RunAndWait(StartsOneMore) == 0);
  int failures = 0;
  std::thread([&] { failures += RunAndWait(StartsOneMore) != 0; }).join();  // glibc's own thread stack cache, warmed
  const long before = VmSizeKb();
  REQUIRE(before > 0);
  for (int i = 0; i < 24; ++i) {
    std::thread([&] {
      for (int j = 0; j < 3; ++j) failures += RunAndWait(StartsOneMore) != 0;
    }).join();
  }
  CHECK(failures == 0);
  // Kept per thread, two 256 KiB stacks for each of the 24 threads would be 12 MiB.
  CHECK(VmSizeKb() - before < 1024);
}
