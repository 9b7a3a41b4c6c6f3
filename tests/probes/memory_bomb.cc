// Probe: allocates and touches memory 8 MiB at a time until something stops it (the cgroup's OOM killer).
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main() {
  constexpr size_t kChunk = 8u << 20;
  constexpr size_t kGiveUp = 4ull << 30;  // no limit in force: stop before it hurts the machine
  size_t total = 0;
  while (total < kGiveUp) {
    char* chunk = static_cast<char*>(std::malloc(kChunk));
    if (!chunk) {
      std::fprintf(stderr, "memory_bomb: malloc failed after %zu MiB\n", total >> 20);
      return 2;
    }
    std::memset(chunk, 0x5a, kChunk);  // touch every page so it is charged
    total += kChunk;
  }
  std::fprintf(stderr, "memory_bomb: allocated %zu MiB and was not stopped\n", total >> 20);
  return 3;
}
