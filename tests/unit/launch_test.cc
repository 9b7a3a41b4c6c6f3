// Unit tests: launch helpers that need no privileges (vfork-style children and their stacks).
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "sandbox/launch.h"

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

}  // namespace

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
