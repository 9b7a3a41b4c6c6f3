// Launch helpers shared by one-shot sandboxes and sessions: pipes, clone3 into a cgroup, PATH lookup.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/result.h"
#include "sandbox/verdict.h"  // SetupError, ExitReason

namespace nsbox {

struct Pipe {
  UniqueFd read, write;
};

// A close-on-exec pipe.
StatusOr<Pipe> MakePipe();
void SetNonBlocking(int fd);
// fork-like clone3 (no new stack) returning a pidfd; with cgroup_fd >= 0 the child is born in that cgroup (v2).
pid_t CloneWithPidfd(uint64_t flags, int* pidfd, int cgroup_fd);
// The memory a child started by StartSharedMemoryChild runs on: its stack and its own copy of the caller's
// thread-local storage, in one mapping. Unmapped by Release() once the child is reaped, not before.
struct SharedChildMemory {
  void* base = nullptr;
  size_t size = 0;
  void Release();
  ~SharedChildMemory() { Release(); }
};
// A child that shares the caller's memory (CLONE_VM) and runs concurrently with it: entry(arg) on a stack of its
// own, with a copy of the caller's thread-local storage (errno, the stack protector's canary, glibc's locale), born
// into the namespaces `flags` asks for, with a pidfd in *pidfd and SIGCHLD at its exit. Nothing is copied: no page
// tables at the clone, no copy-on-write faults after it in either process, nothing to tear down at the child's exit
// (measured: a run 18 % faster on a 2-CPU PVM guest). entry must not allocate, nor call what changes state shared
// with the caller's threads (glibc's set*id() broadcast among them), nor return. x86-64 only (the layout of its
// thread-local storage is known); elsewhere, and when the copy cannot be made, -1 with errno ENOSYS, and the caller
// forks instead (CloneWithPidfd).
pid_t StartSharedMemoryChild(uint64_t flags, int* pidfd, int (*entry)(void*), void* arg, SharedChildMemory* memory);
// A vfork-style child (CLONE_VM|CLONE_VFORK, SIGCHLD) running entry(arg) on a stack of its own: no copy of the
// caller's page tables, no copy-on-write faults, and its execve drops only a reference to the shared memory. The
// caller is suspended until the child calls execve or exits. entry must make only system calls: the child shares the
// caller's memory and thread state (errno among it). Returns the child's pid, or -1 with errno.
// published_pid (may be null): where the kernel stores the child's pid (CLONE_PARENT_SETTID) before the child runs,
// so that another thread can signal it while this one is suspended.
pid_t StartVforkChild(int (*entry)(void*), void* arg, pid_t* published_pid = nullptr);
// Passes one descriptor over a unix socket (SCM_RIGHTS). Async-signal-safe: used between clone and execve.
// Returns 0, or -1 with errno.
int SendFd(int socket, int fd);
// Takes one descriptor sent by SendFd (close-on-exec). Returns it; -1 with errno EAGAIN when nothing is there yet
// (non-blocking socket), or ENOMSG when the peer closed without sending one.
int ReceiveFd(int socket);

}  // namespace nsbox
