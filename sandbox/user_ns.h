// The user namespace from the parent side: the sandbox uid/gid mapped to one unprivileged host uid/gid.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/policy.h"

namespace nsbox {

// Writes /proc/PID/{setgroups,uid_map,gid_map}. Unprivileged callers map to themselves and deny setgroups.
Status WriteIdMaps(pid_t pid, const Policy& policy, bool privileged);

// Lets the sandbox user open a pipe nsbox made for the program's stdio again by name, as a program may
// (/dev/stdin, /dev/stderr, /proc/self/fd/1: node's readFileSync('/dev/stdin'), `echo x > /dev/stderr`): made by
// root, a pipe is root's with mode 0600, which the sandbox user may not open. Its mode becomes 0666 (an owner change
// would need CAP_CHOWN and the sandbox's host ids mapped, which a container does not give); only processes that may
// look into the holder's /proc/PID/fd reach it by name: the sandbox's own, and root. Pipes only: a sealed stdin file
// may be a caller's, and anyone may read it again already; never the caller's own stdin or terminal.
Status LetSandboxReopen(int fd);

// The host uid that owns a sandbox's user namespace, when it is not the caller's own euid. The kernel charges a
// namespace's counts (inotify, namespaces, pending signals, message queue bytes, processes) to its owner as well as
// to the uid inside, and a namespace root makes is root's: every root-run sandbox would draw on host root's quotas.
// So a root-run sandbox's namespace is made by its own host uid, when nsbox runs as root in the initial user
// namespace with the capabilities through which root outside reaches into a namespace it does not own (CAP_SYS_ADMIN
// for setns, CAP_SYS_PTRACE for /proc/PID/ns, CAP_KILL for signals and the parent-death signal, CAP_NET_ADMIN for the
// loopback; as the owner it had them all in the namespace without asking) and those of the switch (CAP_SETUID,
// CAP_SETPCAP, CAP_DAC_OVERRIDE) (and StartPid1 keeps root the owner where pid 1 joins cgroup v1 groups itself on a
// kernel before 5.16: KernelChecksOpenerForCgroupMoves). nullopt otherwise: rootless nsbox owns its sandboxes'
// namespaces, and so does a container's root with a few capabilities. Never the shared nobody (65534), the host uid of
// a policy given none: any host process of that uid would own the namespace. The owner's processes in the host's user
// namespace have every capability in the sandbox's namespaces: the lease (host_id_lease.h) picks an id no account has.
std::optional<uid_t> NamespaceOwnerFor(const Policy& policy);
// cgroup v1 checks a move into a group against the credentials that opened its tasks file from 5.16 on (and in
// backports): before, against the mover's own, and pid 1 moves itself in with the owner's euid (ChildMain, step 2).
// `release`: uname's (null: this kernel's), "6.1.0-13-amd64".
bool KernelChecksOpenerForCgroupMoves(const char* release = nullptr);
// Of the capabilities above, those this thread's effective set lacks ("CAP_SYS_PTRACE" ...).
std::vector<std::string> MissingNamespaceOwnerCapabilities();

// While entered, the calling thread's effective uid is the namespace owner's, with its capabilities kept
// (SECBIT_NO_SETUID_FIXUP), so that a clone(CLONE_NEWUSER) it makes gives the new namespace that owner. Credentials
// are per thread in the kernel: raw system calls change this thread's only (glibc's set*id() would change every
// thread's). Process-wide, the euid change makes the process not dumpable until Leave() (so that neither it nor the
// child, born not dumpable, is the owner's to open through /proc); one thread at a time switches, so that they do not
// undo each other's dumpable flag. The child inherits the switched credentials; its new user namespace resets its
// securebits and gives it every capability there, as before.
class NamespaceOwnerSwitch {
 public:
  NamespaceOwnerSwitch() = default;
  NamespaceOwnerSwitch(const NamespaceOwnerSwitch&) = delete;
  NamespaceOwnerSwitch& operator=(const NamespaceOwnerSwitch&) = delete;
  ~NamespaceOwnerSwitch() { Leave(); }

  // Switches to `owner`; nullopt does nothing. An error leaves the thread as it was.
  Status Enter(std::optional<uid_t> owner);
  // Back to the euid, securebits, dumpable flag and parent-death signal as they were. Aborts the process when
  // it cannot: a thread left with another uid and root's capabilities must not go on. Does nothing when not entered.
  void Leave();

 private:
  std::unique_lock<std::mutex> lock_;
  bool securebits_set_ = false, euid_set_ = false;
  uid_t euid_ = 0;
  int securebits_ = 0, dumpable_ = 0, parent_death_signal_ = 0;
};

// What a failed clone into new namespaces (errno `err`) most likely means, and where to look for the fix.
std::string NamespaceFailureHint(int err);

}  // namespace nsbox
