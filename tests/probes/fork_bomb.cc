// Probe: forks children that sleep until fork fails; exits 0 when fork failed with EAGAIN (the pids limit).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

int main() {
  constexpr int kGiveUp = 5000;  // no limit in force: stop before it hurts the machine
  for (int forked = 0; forked < kGiveUp; ++forked) {
    pid_t pid = fork();
    if (pid == 0) {
      for (;;) pause();  // hold the pid until the sandbox is torn down
    }
    if (pid < 0) {
      int err = errno;
      std::printf("fork_bomb: fork failed after %d children: %s\n", forked, std::strerror(err));
      return err == EAGAIN ? 0 : 2;
    }
  }
  std::printf("fork_bomb: forked %d children and was not stopped\n", kGiveUp);
  return 3;
}
