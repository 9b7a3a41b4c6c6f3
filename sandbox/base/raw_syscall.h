// System calls that return -errno and never touch errno or any other thread-local state: for code that runs in a
// process sharing nsbox's memory (the cgroup reaper, cloned with CLONE_VM), where libc's errno would be nsbox's own.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace nsbox::raw {

// True where Syscall below is a direct system call instruction (no errno). Elsewhere it wraps syscall(2), which
// sets errno: only a process with memory of its own (a forked one) may use it there.
#if defined(__x86_64__)
inline constexpr bool kDirect = true;

inline long Syscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  long result;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(result)
                   : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return result;
}
#else
inline constexpr bool kDirect = false;

inline long Syscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  long result = ::syscall(nr, a, b, c, d, e, f);
  return result == -1 ? -errno : result;
}
#endif

inline long L(const void* p) { return reinterpret_cast<long>(p); }

// Each returns what the system call returns, or -errno.
inline int Open(const char* path, int flags) { return static_cast<int>(Syscall(SYS_openat, AT_FDCWD, L(path), flags, 0)); }
inline int OpenAt(int dir, const char* path, int flags) { return static_cast<int>(Syscall(SYS_openat, dir, L(path), flags, 0)); }
inline ssize_t Read(int fd, void* buf, size_t n) { return Syscall(SYS_read, fd, L(buf), static_cast<long>(n)); }
inline ssize_t Write(int fd, const void* buf, size_t n) { return Syscall(SYS_write, fd, L(buf), static_cast<long>(n)); }
inline int Close(int fd) { return static_cast<int>(Syscall(SYS_close, fd)); }
inline int Rmdir(const char* path) { return static_cast<int>(Syscall(SYS_unlinkat, AT_FDCWD, L(path), AT_REMOVEDIR)); }
inline int Kill(pid_t pid, int sig) { return static_cast<int>(Syscall(SYS_kill, pid, sig)); }
inline long Getdents64(int fd, void* buf, size_t n) { return Syscall(SYS_getdents64, fd, L(buf), static_cast<long>(n)); }
inline int Poll(struct pollfd* fds, int n, const struct timespec* timeout) {
  return static_cast<int>(Syscall(SYS_ppoll, L(fds), n, L(timeout), 0, 8));
}
inline ssize_t RecvDontWait(int fd, void* buf, size_t n) {
  return Syscall(SYS_recvfrom, fd, L(buf), static_cast<long>(n), MSG_DONTWAIT, 0, 0);
}
inline int CloseRange(unsigned first, unsigned last) { return static_cast<int>(Syscall(SYS_close_range, first, last, 0)); }
inline int Setsid() { return static_cast<int>(Syscall(SYS_setsid)); }
// Sets a signal's disposition to SIG_IGN (the kernel's struct sigaction: handler, flags, restorer, mask).
inline int IgnoreSignal(int sig) {
  struct {
    long handler, flags, restorer;
    unsigned long mask;
  } action = {1 /* SIG_IGN */, 0, 0, 0};
  return static_cast<int>(Syscall(SYS_rt_sigaction, sig, L(&action), 0, sizeof action.mask));
}
// Sleeps `ms` milliseconds, resuming after signals.
inline void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (Syscall(SYS_nanosleep, L(&ts), L(&ts)) == -EINTR) {
  }
}
[[noreturn]] inline void ExitProcess(int code) {
  for (;;) Syscall(SYS_exit_group, code);
}

}  // namespace nsbox::raw
