// Unit tests: launch helpers that need no privileges (vfork-style children and their stacks, children sharing memory).
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

// What a child sharing the test's memory reads and writes.
std::atomic<int> shared_value{0};
std::atomic<int> child_saw{0};
thread_local int tls_value = 1;
int go_pipe[2];

// Waits for the parent's go, then reports what it sees: the value the parent stored after the clone, its copy of the
// thread-local value, and that a failing call sets its own errno, not the parent's.
int SharedChild(void*) {
  char go;
  if (::read(go_pipe[0], &go, 1) != 1) _exit(10);
  child_saw = shared_value.load();
  if (tls_value != 42) _exit(11);
  tls_value = 7;
  errno = 0;
  if (::close(-1) == 0 || errno != EBADF) _exit(12);
  char text[32];  // formatting reads the thread's locale, a thread-local pointer of libc's own
  snprintf(text, sizeof text, "%d-%s", 1234, "x");
  if (strcmp(text, "1234-x") != 0) _exit(13);
  _exit(0);
}

}  // namespace

// pid 1 of a run shares nsbox's memory: it must see nsbox's memory as it is (no copy), and keep errno and every
// other thread-local value to itself while both run.
// A copy of the mapping's owner would unmap the child's stack twice.
static_assert(!std::is_copy_constructible_v<nsbox::SharedChildMemory> &&
              !std::is_copy_assignable_v<nsbox::SharedChildMemory>);

TEST_CASE("a child sharing memory sees the caller's writes and has thread-local storage of its own", "[launch]") {
  REQUIRE(::pipe(go_pipe) == 0);
  tls_value = 42;
  nsbox::SharedChildMemory memory;
  int pidfd = -1;
  pid_t pid = nsbox::StartSharedMemoryChild(0, &pidfd, SharedChild, nullptr, &memory);
#if defined(__x86_64__)
  REQUIRE(pid > 0);
  CHECK(pidfd >= 0);
  CHECK(memory.base != nullptr);
  shared_value = 1234;  // after the clone: a forked child would not see it
  errno = EINTR;
  const bool sent = ::write(go_pipe[1], "g", 1) == 1;
  int status = 0;
  const bool waited = ::waitpid(pid, &status, 0) == pid;
  const int parent_errno = errno;  // before any assertion's own calls
  REQUIRE(sent);
  REQUIRE(waited);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(child_saw == 1234);
  CHECK(parent_errno == EINTR);  // the child's failing close set its own errno
  CHECK(tls_value == 42);        // and its own copy of tls_value
  struct pollfd exited = {pidfd, POLLIN, 0};
  CHECK(::poll(&exited, 1, 0) == 1);
  ::close(pidfd);
  memory.Release();
  CHECK(memory.base == nullptr);
#else
  CHECK(pid == -1);
  CHECK(errno == ENOSYS);
#endif
  ::close(go_pipe[0]);
  ::close(go_pipe[1]);
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
