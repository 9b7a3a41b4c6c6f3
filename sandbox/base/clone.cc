// Starting child processes: clone3 with a pidfd, and vfork-style children on cached stacks.
#include "sandbox/base/clone.h"

#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#if defined(__SANITIZE_ADDRESS__)  // GCC's name for -fsanitize=address
#define NSBOX_ASAN 1
#elif defined(__has_feature)  // clang's
#if __has_feature(address_sanitizer)
#define NSBOX_ASAN 1
#endif
#endif
#if defined(NSBOX_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace nsbox {

pid_t CloneWithPidfd(uint64_t flags, int* pidfd, int cgroup_fd) {
  struct clone_args args = {};
  args.flags = flags | CLONE_PIDFD;
  if (cgroup_fd >= 0) {
    // Born inside its cgroup: no window in which the child runs outside the limits.
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup_fd);
  }
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

pid_t StartVforkChild(int (*entry)(void*), void* arg, pid_t* published_pid) {
  // Stacks are kept for the next call, one per nesting level, process-wide: a session's supervisor starts one helper
  // per exec, and an mmap, the faults of a fresh stack and the munmap (a TLB shootdown in a multi-threaded process)
  // each time cost it about 20 µs. The caller waits while its child runs on the stack (CLONE_VFORK), so the stack is
  // free again when clone returns. The child shares the caller's memory and thread-local storage, and may start a
  // child of its own (a session's exec helper starts the payload): `depth`, shared with it, sends that one to the
  // next level. Calls from other threads at once take no kept stack, or find it taken, and map their own.
  constexpr size_t kStackSize = 256 << 10;
  constexpr int kLevels = 2;
  static std::atomic<void*> kept[kLevels] = {};
  thread_local int depth = 0;
  const int level = depth;
  void* stack = level < kLevels ? kept[level].exchange(nullptr) : nullptr;
  if (!stack) {
    stack = ::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return -1;
  }
  ++depth;
  const int flags = CLONE_VM | CLONE_VFORK | SIGCHLD | (published_pid ? CLONE_PARENT_SETTID : 0);
  pid_t pid = ::clone(entry, static_cast<char*>(stack) + kStackSize, flags, arg, published_pid);
  int err = errno;
#if defined(NSBOX_ASAN)
  // The child's frames left their red zones marked on the kept stack; the next child would trip over them.
  __asan_unpoison_memory_region(stack, kStackSize);
#endif
  --depth;
  void* expected = nullptr;
  if (level >= kLevels || !kept[level].compare_exchange_strong(expected, stack)) ::munmap(stack, kStackSize);
  errno = err;
  return pid;
}

void CloseDescriptorRange(unsigned int first, unsigned int last) {
  if (first > last || ::syscall(SYS_close_range, first, last, 0) == 0) return;
  struct rlimit limit {};
  const rlim_t open_max = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
  for (unsigned int fd = first; fd <= last && fd < open_max; ++fd) (void)::close(static_cast<int>(fd));
}

}  // namespace nsbox
