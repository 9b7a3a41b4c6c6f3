// Probe: keeps N processes busy on the CPU for S seconds of wall time ("spinner N S").
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

static double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

int main(int argc, char** argv) {
  int workers = argc > 1 ? std::atoi(argv[1]) : 1;
  double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  double end = Now() + seconds;
  for (int i = 1; i < workers; ++i) {
    if (fork() == 0) break;
  }
  volatile unsigned long counter = 0;
  while (Now() < end) {
    for (int i = 0; i < 100000; ++i) counter = counter + 1;
  }
  while (wait(nullptr) > 0) {
  }
  return 0;
}
