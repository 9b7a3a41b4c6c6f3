// Launch helpers shared by one-shot sandboxes and sessions.
#include "sandbox/launch.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

namespace nsbox {

StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Errno("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

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

int SendFd(int socket, int fd) {
  char byte = 'F';
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
  return ::sendmsg(socket, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

void SharedChildMemory::Release() {
  if (base) ::munmap(base, size);
  base = nullptr;
  size = 0;
}

}  // namespace nsbox

#if defined(__x86_64__)
// glibc's size of its thread control block (struct pthread), published for libthread_db.
extern "C" const uint32_t _thread_db_sizeof_pthread;
#endif

namespace nsbox {

namespace {

#if defined(__x86_64__)
// The static thread-local area of the calling thread: every loaded module's block lies below the thread pointer
// (x86-64's variant II), the lowest of them is where the area starts. Not ok when a module's block lies elsewhere (a
// library loaded later, whose block glibc allocates on first use): a copy could not hold it.
struct TlsArea {
  uintptr_t thread_pointer = 0;
  uintptr_t lowest = 0;
  size_t align = 1;
  bool ok = true;
};

int VisitTlsBlock(struct dl_phdr_info* info, size_t, void* data) {
  auto* area = static_cast<TlsArea*>(data);
  if (info->dlpi_tls_modid == 0) return 0;  // no thread-local storage in this module
  const auto block = reinterpret_cast<uintptr_t>(info->dlpi_tls_data);
  if (block == 0 || block > area->thread_pointer || area->thread_pointer - block > (1u << 20)) {
    area->ok = false;
    return 1;
  }
  area->lowest = std::min(area->lowest, block);
  for (size_t i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_TLS) area->align = std::max<size_t>(area->align, info->dlpi_phdr[i].p_align);
  return 0;
}
#endif

}  // namespace

pid_t StartSharedMemoryChild(uint64_t flags, int* pidfd, int (*entry)(void*), void* arg, SharedChildMemory* memory) {
#if defined(__x86_64__)
  // The copy holds the static thread-local area (below the thread pointer) and glibc's thread control block (at
  // it), with the block's two pointers to itself (tcb, self) pointing at the copy.
  TlsArea area;
  area.thread_pointer = reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
  area.lowest = area.thread_pointer;
  ::dl_iterate_phdr(VisitTlsBlock, &area);
  const size_t tcb_size = _thread_db_sizeof_pthread;
  // clone(2) takes the flags as an int: none of clone3's (CLONE_INTO_CGROUP) here.
  if (!area.ok || tcb_size < 3 * sizeof(void*) || tcb_size > (64u << 10) || flags > 0x7fffffffu) {
    errno = ENOSYS;
    return -1;
  }
  const size_t tls_offset = area.thread_pointer - area.lowest;
  const size_t tls_align = area.align;
  constexpr size_t kPage = 4096, kStackSize = 256 << 10;
  const size_t align = std::max<size_t>(64, tls_align);  // a cache line at least, as glibc's own
  const size_t tls_room = (tls_offset + align + tcb_size + kPage - 1) / kPage * kPage;
  // Guard page, stack (growing down towards it), then the thread-local copy.
  const size_t size = kPage + kStackSize + tls_room;
  char* base = static_cast<char*>(
      ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0));
  if (base == MAP_FAILED) return -1;
  if (::mprotect(base, kPage, PROT_NONE) != 0) {
    int err = errno;
    ::munmap(base, size);
    errno = err;
    return -1;
  }
  char* const stack_top = base + kPage + kStackSize;
  // The thread pointer aligned as the block's alignment needs, with the block below it.
  const uintptr_t lowest = reinterpret_cast<uintptr_t>(stack_top) + tls_offset;
  char* const thread_pointer = reinterpret_cast<char*>((lowest + align - 1) / align * align);
  const char* const own = static_cast<const char*>(__builtin_thread_pointer());
  memcpy(thread_pointer - tls_offset, own - tls_offset, tls_offset + tcb_size);
  void** header = reinterpret_cast<void**>(thread_pointer);
  header[0] = thread_pointer;  // tcbhead_t.tcb
  header[2] = thread_pointer;  // tcbhead_t.self
  const int clone_flags = static_cast<int>(flags) | CLONE_VM | CLONE_SETTLS | CLONE_PIDFD | SIGCHLD;
  pid_t pid = ::clone(entry, stack_top, clone_flags, arg, pidfd, thread_pointer, nullptr);
  if (pid < 0) {
    int err = errno;
    ::munmap(base, size);
    errno = err;
    return -1;
  }
  memory->Release();
  memory->base = base;
  memory->size = size;
  return pid;
#else
  (void)flags, (void)pidfd, (void)entry, (void)arg, (void)memory;
  errno = ENOSYS;
  return -1;
#endif
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
  --depth;
  void* expected = nullptr;
  if (level >= kLevels || !kept[level].compare_exchange_strong(expected, stack)) ::munmap(stack, kStackSize);
  errno = err;
  return pid;
}

int ReceiveFd(int socket) {
  char byte;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC); while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  struct cmsghdr* cmsg = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (!cmsg || cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) {
    errno = ENOMSG;
    return -1;
  }
  int fd;
  memcpy(&fd, CMSG_DATA(cmsg), sizeof fd);
  return fd;
}

}  // namespace nsbox
