// ChildPlan and the in-child sequence: everything the cloned child does between clone and the payload's execve.
#pragma once

#include <sys/capability.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/cgroup.h"
#include "sandbox/executor.h"
#include "sandbox/spec/mount_plan.h"

namespace nsbox {

struct SeccompProgram;

// One message from the sandbox's pid 1 (or the payload before exec) to nsbox, atomic on a pipe.
struct InitMessage {
  // kReady: a persistent pid 1 (sessions) finished setting up. kStarted: a run's payload called execve (or failed
  // to, and said why first); an exec's payload was forked (value: its pid as the supervisor sees it). kGone: a run's
  // pid 1 has killed and reaped every other process of the sandbox and is about to exit (value: 1 when it holds no
  // group of the sandbox's any more, having moved itself out). kDeadline: a run's pid 1 reached plan.wall_deadline_ns
  // first (nsbox did not end the sandbox: it was stopped, say) and kills everything; kGone follows.
  enum Kind : int32_t { kSetupError = 1, kExited = 2, kReady = 3, kStarted = 4, kGone = 5, kDeadline = 6 };
  int32_t kind = 0;
  int32_t value = 0;  // kExited: the payload's wait status
  int32_t err = 0;    // kSetupError: errno
  int32_t at_execve = 0;  // kSetupError: 1 when the step that failed is the program's own execve
  // kExited from a session exec: the payload's CPU time (its parent measures it). kGone: pid 1's own and its reaped
  // children's, what wait4 on pid 1 would report.
  int64_t cpu_us = 0;
  int64_t max_rss_kb = 0;   // kExited from a session exec, kGone: the peak resident size, as cpu_us
  char text[224] = {};  // kSetupError: the step and call that failed
};
static_assert(sizeof(InitMessage) == 256);

// A mount step with absolute paths as the child sees them before pivot_root: targets under /newroot,
// host sources under /oldroot. Built in the parent; the child only reads it (no allocation after clone).
struct ChildMount {
  MountStep::Kind kind;
  std::string source;
  std::string target;
  std::string data;
  bool optional;
  char source_type = 0;  // MountStep::source_type
  // The target's parent directory exists when this step runs (an earlier step of the plan made it, and no mount
  // since hides it): the child skips the mkdir -p of the parent, one failing mkdir per path component.
  bool parent_exists = false;
  bool user_source = false;  // MountStep::user_source
};

struct ChildPlan {
  std::vector<ChildMount> mounts;
  std::string hostname;
  bool new_network = true;
  uint32_t uid = 1000, gid = 1000;
  // The host uid that makes (and so owns) the sandbox's user namespace; nullopt: the caller (NamespaceOwnerFor).
  std::optional<uid_t> namespace_owner;
  bool may_setgroups = true;  // false where setgroups is denied (unprivileged user namespaces)
  std::vector<std::string> argv_storage, env_storage;
  std::string path;  // PATH, for a program named without a slash
  std::vector<char*> argv, envp;
  std::string cwd;
  mode_t umask = 022;
  std::string code_path;  // the argv entry that names the code (replaced by /dev/fd/N); empty when there is no code
  std::string code;
  // File descriptors, as numbered in the parent (the child inherits them).
  int stdin_fd = -1;       // -1: /dev/null inside the sandbox
  int stdout_fd = -1, stderr_fd = -1;
  int control_fd = -1;     // write end: InitMessage to nsbox
  int sync_fd = -1;        // read end: one byte from nsbox once the id maps are written
  int seccomp_socket = -1; // where the payload sends its seccomp listener fd, -1 when unused
  // v1: the cgroup the child moves itself into first thing (JoinCgroupSelf); count 0 when nsbox places it otherwise.
  CgroupSelfJoin cgroup_join;
  // v1, a session's pid 1: the memory hierarchy's group above the session's, which pid 1 moves back into once its
  // cgroup namespace is made (a run's pid 1 does so at step 7, through cgroup_join_socket). -1 when unused.
  int memory_leave_fd = -1;
  // v1, made while the child builds its root: a socket on which nsbox sends two bytes, N and the memory index plus
  // one (CgroupSelfJoin::memory_index), then N descriptors (SendFd) for JoinCgroupSelf, before the payload is forked;
  // then the same for the descriptors through which pid 1 moves itself out again at its end (Cgroup::leave_join).
  // -1 when unused.
  int cgroup_join_socket = -1;
  const SeccompProgram* seccomp = nullptr;
  // A run's pid 1 ends the sandbox at this CLOCK_MONOTONIC time (ns), whatever becomes of nsbox, which normally does
  // so a little earlier, at the time-out; 0: never.
  int64_t wall_deadline_ns = 0;
  const SeccompProgram* guard = nullptr;  // GuardProgram(), installed before `seccomp`; required
  cap_t no_caps = nullptr;  // an empty capability set, made before clone
  // Sessions: pid 1 sets up the sandbox, reports kReady and then only reaps, with no payload of its own.
  bool persistent = false;
  // Sessions (REPL): a descriptor the payload keeps open as fd 3 across execve, -1 when unused.
  int channel_fd = -1;
  // The payload dies with its parent (PR_SET_PDEATHSIG). A session's exec is reparented to the supervisor once its
  // helper exits, and dies with the session's pid namespace instead.
  bool parent_death_signal = true;
};

// Fills the program part of a plan from an Executor (argv, environment, PATH directories, cwd, code). In the
// parent: it allocates, so that the child only reads.
void SetPlanProgram(ChildPlan& plan, const Executor& executor);

// Builds the child view of a mount plan.
std::vector<ChildMount> PrepareChildMounts(const std::vector<MountStep>& plan);

// The program's code lives in a memfd, never in a file of the sandbox: other runs may share a --workspace, and a
// session's earlier execs leave processes behind. The interpreter reads it as /dev/fd/N.
// An empty memfd that can be sealed. -1 with errno.
int CreateCodeFd(bool close_on_exec);
// A close-on-exec memfd holding plan.code, sealed (F_SEAL_WRITE|SHRINK|GROW|SEAL): nobody, however privileged, can
// change it after this returns. -1 with errno. Allocation-free.
int MakeSealedCodeFd(const ChildPlan& plan);

// The sandbox user's credentials for the calling process only: its groups, uids and gids, no capabilities,
// no_new_privs (raw system calls: safe vfork-style in a process with threads). 0, or -1 with errno and *step naming
// the call that failed.
int BecomeSandboxUser(const ChildPlan& plan, const char** step);

// The payload's own steps, shared by run and session exec: a new session, its stdio, the sandbox user, no
// capabilities, no_new_privs, seccomp last, execve. Failures go to plan.control_fd as kSetupError. Never returns.
// inherited: the caller is the sandbox user already (pid 1 of a run, a session's exec helper: BecomeSandboxUser), so
// the payload keeps those credentials and makes no credential calls of its own.
// memory_join_fd: a tasks descriptor of the sandbox's memory group, which the payload joins before anything else of
// its own (v1: pid 1 stays out of that group, ChildMain says why); -1 when it is in every group already.
// code_fd: MakeSealedCodeFd's, kept open across execve and named by /dev/fd/N in place of plan.code_path in argv; -1
// when there is no code.
[[noreturn]] void RunPayload(const ChildPlan& plan, bool inherited = false, int memory_join_fd = -1, int code_fd = -1);

// The cloned child's entry point: sets up the sandbox, forks the payload, then serves as pid 1. Never returns.
[[noreturn]] void ChildMain(const ChildPlan& plan);

}  // namespace nsbox
