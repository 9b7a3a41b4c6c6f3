// The in-child sequence, in order: wait for id maps, hostname, mounts, pivot, loopback, code memfd, join the cgroup,
// then fork the payload and serve as pid 1. Runs after clone: no allocation, every failure reported to nsbox with its
// step and errno.
#include "sandbox/child.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <set>
#include <string>
#include <string_view>

#include "sandbox/base/clone.h"
#include "sandbox/base/fd_passing.h"
#include "sandbox/caps.h"
#include "sandbox/quotas.h"
#include "sandbox/init.h"
#include "sandbox/launch.h"
#include "sandbox/mount_ns.h"
#include "sandbox/net.h"
#include "sandbox/seccomp.h"

namespace nsbox {

namespace {

// Where a program named without a slash is looked for: the executor's PATH, else the usual directories.
std::string_view ProgramSearchPath(const Executor& ex) {
  auto path = ex.env.find("PATH");
  return path != ex.env.end() ? std::string_view(path->second) : "/usr/bin:/bin";
}

}  // namespace

void SetPlanProgram(ChildPlan& plan, const Executor& ex) {
  plan.argv_storage = ex.argv;
  plan.env_storage.clear();
  for (const auto& [key, value] : ex.env) plan.env_storage.push_back(key + "=" + value);
  plan.argv.clear();
  for (auto& s : plan.argv_storage) plan.argv.push_back(s.data());
  plan.argv.push_back(nullptr);
  plan.envp.clear();
  for (auto& s : plan.env_storage) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  plan.path = ProgramSearchPath(ex);
  plan.cwd = ex.cwd;
  plan.umask = ex.umask;
  plan.code_path = ex.code_path;
  plan.code = ex.code;
}

std::vector<ChildMount> PrepareChildMounts(const std::vector<MountStep>& plan) {
  using Kind = MountStep::Kind;
  std::vector<ChildMount> out;
  out.reserve(plan.size());
  // Directories of the new root that exist, as far as the steps so far tell (MakeDirs and MakeParent create every
  // missing component). A mount hides what was made below its target; a skipped optional step makes nothing.
  std::set<std::string> made = {"/newroot"};
  auto add_with_parents = [&](std::string dir) {
    while (dir.size() > strlen("/newroot") && made.insert(dir).second) dir.resize(dir.rfind('/'));
  };
  auto hide_below = [&](const std::string& target) {
    for (auto it = made.lower_bound(target + "/"); it != made.end() && it->starts_with(target + "/");)
      it = made.erase(it);
  };
  for (const auto& step : plan) {
    ChildMount m{step.kind, step.source, "/newroot" + step.target, step.data, step.optional, step.source_type};
    bool has_host_source = step.kind == Kind::kBindReadOnly || step.kind == Kind::kBindWritable ||
                           step.kind == Kind::kBindDevice;
    if (has_host_source) m.source = "/oldroot" + step.source;
    m.user_source = step.user_source;
    const std::string parent = m.target.substr(0, m.target.rfind('/'));
    m.parent_exists = made.count(parent) > 0;
    const bool makes_only = step.kind == Kind::kDir || step.kind == Kind::kFile || step.kind == Kind::kSymlink;
    if (!makes_only) {
      hide_below(m.target);  // a mount (if it happens) hides what was made below its target
      // A bind's target, or a mask that may be skipped, is not a directory of the plan's.
      if (has_host_source || step.optional) made.erase(m.target);
    }
    if (!step.optional) {
      if (step.kind == Kind::kDir) add_with_parents(m.target);
      else if (step.kind == Kind::kFile || step.kind == Kind::kSymlink || has_host_source) add_with_parents(parent);
    }
    out.push_back(std::move(m));
  }
  return out;
}

namespace {

[[noreturn]] void Fail(const ChildPlan& plan, const char* step, int err, bool at_execve = false) {
  InitMessage msg;
  msg.kind = InitMessage::kSetupError;
  msg.err = err;
  msg.at_execve = at_execve ? 1 : 0;
  snprintf(msg.text, sizeof msg.text, "%s", step);
  ssize_t ignored = ::write(plan.control_fd, &msg, sizeof msg);
  (void)ignored;
  _exit(125);
}

}  // namespace

namespace {

void ExecSearching(char* const argv[], char* const envp[], const char* path);

// Writes all of data to fd, then seals it: no write, no size change, no seal removed. 0, or -1 with errno.
int FillAndSealCode(int fd, const char* data, size_t left) {
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  return ::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
}

// execve with every argv entry equal to code_path replaced by "/dev/fd/<code_fd>" (code_fd < 0: argv as it is).
// Returns only on failure, with errno. Allocation-free: the copy of argv is on the stack.
void ExecWithCode(char* const argv[], char* const envp[], const char* path, const char* code_path, int code_fd) {
  if (code_fd < 0 || !code_path) {
    ExecSearching(argv, envp, path);
    return;
  }
  constexpr int kMaxArgs = 64;  // an interpreter, its fixed arguments and the code: a language table's entry
  char* args[kMaxArgs + 1];
  char fd_path[32];
  snprintf(fd_path, sizeof fd_path, "/dev/fd/%d", code_fd);
  int count = 0;
  for (; argv[count]; ++count) {
    if (count == kMaxArgs) {
      errno = E2BIG;
      return;
    }
    args[count] = strcmp(argv[count], code_path) == 0 ? fd_path : argv[count];
  }
  args[count] = nullptr;
  ExecSearching(args, envp, path);
}

}  // namespace

int CreateCodeFd(bool close_on_exec) {
  return ::memfd_create("nsbox-code", MFD_ALLOW_SEALING | (close_on_exec ? MFD_CLOEXEC : 0));
}

int MakeSealedCodeFd(const ChildPlan& plan) {
  int fd = CreateCodeFd(/*close_on_exec=*/true);
  if (fd < 0) return -1;
  if (FillAndSealCode(fd, plan.code.data(), plan.code.size()) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

namespace {

void CloseUnplannedDescriptors(const ChildPlan& plan, int also_keep = -1);

// execve, searching the directories of `path` (a PATH value) for a program named without a slash; relative entries
// are skipped (the working directory is the sandbox's). Returns only on failure, with errno from the first directory
// that had the program but could not run it (else ENOENT). Allocation-free.
void ExecSearching(char* const argv[], char* const envp[], const char* path) {
  const char* file = argv[0];
  if (strchr(file, '/')) {
    ::execve(file, argv, envp);
    return;
  }
  int first_error = ENOENT;
  for (const char* dir = path; dir && *dir;) {
    const char* end = strchrnul(dir, ':');
    const int dir_len = static_cast<int>(end - dir);
    char candidate[PATH_MAX];
    if (dir_len > 0 && dir[0] == '/' &&
        snprintf(candidate, sizeof candidate, "%.*s/%s", dir_len, dir, file) < static_cast<int>(sizeof candidate)) {
      ::execve(candidate, argv, envp);
      if (errno != ENOENT && errno != ENOTDIR) first_error = errno;
    }
    dir = *end ? end + 1 : end;
  }
  errno = first_error;
}

[[noreturn]] void FailExec(const ChildPlan& plan, const char* program) {
  int err = errno;
  char step_text[200];
  snprintf(step_text, sizeof step_text, "execve(%s)", program);
  Fail(plan, step_text, err, /*at_execve=*/true);
}

}  // namespace

int BecomeSandboxUser(const ChildPlan& plan, const char** step) {
  // Raw system calls: this may run vfork-style in the memory of a process with threads (a session supervisor), where
  // glibc's set*id() would change the credentials of all of those threads too.
  if (plan.may_setgroups) {
    gid_t groups[1] = {plan.gid};
    *step = "setgroups([sandbox gid])";
    if (::syscall(SYS_setgroups, 1, groups) != 0) return -1;
  }
  *step = "setresgid(sandbox gid)";
  if (::syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0) return -1;
  *step = "setresuid(sandbox uid)";
  if (::syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) return -1;
  if (ClearCapabilities(plan.no_caps, step) != 0) return -1;
  *step = "prctl(PR_SET_NO_NEW_PRIVS, 1)";
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

namespace {

// RunPayload's steps before the program: the memory group, setsid, default signals, stdio, credentials, the working
// directory and umask, seccomp.
// code_fd: the sealed code (MakeSealedCodeFd), kept open across execve; -1 for none.
void PreparePayload(const ChildPlan& plan, bool inherited, int memory_join_fd = -1, int code_fd = -1) {
  if (memory_join_fd >= 0 && ::write(memory_join_fd, "0", 1) != 1)
    Fail(plan, "write(cgroup tasks, \"0\"): the program joining the sandbox's memory group", errno);
  if (::setsid() < 0) Fail(plan, "setsid()", errno);
  // Every signal at its default action: a signal nsbox's own caller ignored (`trap '' INT`, a shell's background
  // job, nsbox's SIGPIPE) would otherwise stay ignored across execve, and the signals pid 1 forwards would do nothing.
  // Handlers need no reset (execve does that); this process's table is its own even when it shares memory.
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &default_action, nullptr);  // 32, 33: glibc's, EINVAL
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) Fail(plan, "sigprocmask(unblock all)", errno);

  int in = plan.stdin_fd;
  if (in < 0) {
    in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0) Fail(plan, "open(/dev/null)", errno);
  }
  if (::dup2(in, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 || ::dup2(plan.stderr_fd, 2) < 0)
    Fail(plan, "dup2(stdio)", errno);
  // A session's REPL driver talks to its supervisor on fd 3; fd 3 must not be the control pipe we still report on.
  unsigned first_closed = 3;
  if (plan.channel_fd >= 0) {
    if (plan.control_fd == 3) Fail(plan, "dup2(channel, 3): fd 3 is the control pipe", EBADF);
    if (::dup2(plan.channel_fd, 3) < 0) Fail(plan, "dup2(channel, 3)", errno);
    first_closed = 4;
  }
  // Every other descriptor closes at execve; the control pipe and seccomp socket stay usable until then.
  if (::syscall(SYS_close_range, first_closed, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
    Fail(plan, "close_range(3, ~0, CLOEXEC)", errno);
  // The code stays open for the interpreter, which reads it as /dev/fd/N (ExecWithCode).
  if (code_fd >= 0 && ::fcntl(code_fd, F_SETFD, 0) != 0) Fail(plan, "fcntl(code memfd, F_SETFD, 0)", errno);

  // No core dumps: a crashing program would write its memory as a file into its working directory, the host's own
  // directory under --workspace. Soft and hard 0, so the program cannot raise it again.
  struct rlimit no_core = {0, 0};
  if (::setrlimit(RLIMIT_CORE, &no_core) != 0) Fail(plan, "setrlimit(RLIMIT_CORE, 0)", errno);
  const char* step = nullptr;
  // Pending signals and message queue bytes count per uid, and against the namespace owner's quota too (quotas.h).
  if (LimitPerUserRlimits(&step) != 0) Fail(plan, step, errno);

  // The bounding set is already empty: pid 1 emptied it before the fork (each drop costs a credential commit).
  // Inherited: pid 1 of a run, or a session's exec helper, made itself the sandbox user (DropInitPrivileges,
  // BecomeSandboxUser) before this process existed, and we have its credentials.
  if (!inherited && BecomeSandboxUser(plan, &step) != 0) Fail(plan, step, errno);
  // A new process has none: the payload dies with its parent, pid 1 (a session's exec: see parent_death_signal).
  if (plan.parent_death_signal && ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
    Fail(plan, "prctl(PR_SET_PDEATHSIG)", errno);
  // The working directory, resolved without magic links: /proc/self/fd/N (a descriptor this process inherited from
  // the session supervisor, say) or /proc/self/cwd would name a directory outside the sandbox's root.
  struct open_how cwd_how = {};
  cwd_how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  cwd_how.resolve = RESOLVE_NO_MAGICLINKS;
  const int cwd_fd = static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, plan.cwd.c_str(), &cwd_how, sizeof cwd_how));
  if (cwd_fd < 0 || ::fchdir(cwd_fd) != 0) {  // named: a --workdir or an API cwd that is not there
    const int err = errno;
    char step_text[300];
    snprintf(step_text, sizeof step_text, "%s(working directory %s%s)", cwd_fd < 0 ? "openat2" : "fchdir",
             plan.cwd.c_str(), cwd_fd < 0 ? ", RESOLVE_NO_MAGICLINKS" : "");
    Fail(plan, step_text, err);
  }
  ::close(cwd_fd);
  ::umask(plan.umask);  // this process's own: a vfork-style child does not share the file-system context

  // Seccomp last: from here on only sendmsg, close, write, exit_group and execve (kSyscallsAfterInstall).
  // nsbox's guard first (the profile may deny seccomp itself once installed), under every profile.
  if (!plan.guard) Fail(plan, "seccomp: nsbox's guard filter is missing", EINVAL);
  if (int rc = InstallSeccompProgram(*plan.guard, nullptr); rc != 0)
    Fail(plan, "seccomp(SECCOMP_SET_MODE_FILTER): nsbox's guard", -rc);
  if (plan.seccomp) {
    int listener = -1;
    int rc = InstallSeccompProgram(*plan.seccomp, &listener);
    if (rc != 0) Fail(plan, "seccomp(SECCOMP_SET_MODE_FILTER)", -rc);
    if (listener >= 0) {
      if (SendFd(plan.seccomp_socket, listener) != 0) Fail(plan, "sendmsg(seccomp listener)", errno);
      ::close(listener);
    }
  }
}

}  // namespace

void RunPayload(const ChildPlan& plan, bool inherited, int memory_join_fd, int code_fd) {
  PreparePayload(plan, inherited, memory_join_fd, code_fd);
  ExecWithCode(plan.argv.data(), plan.envp.data(), plan.path.c_str(), plan.code_path.c_str(), code_fd);
  FailExec(plan, plan.argv[0]);  // only reached when execve failed; the message names the program
}

namespace {

// Closes every descriptor inherited from nsbox except stdio and the ones the plan names: pid 1 must hold nothing
// of nsbox's (its end of the sync pipe above all, so that EOF there means nsbox is gone).
void CloseUnplannedDescriptors(const ChildPlan& plan, int also_keep) {
  const int named[] = {
      plan.stdin_fd,       plan.stdout_fd,  plan.stderr_fd,          plan.control_fd,      plan.sync_fd,
      plan.seccomp_socket, plan.channel_fd, plan.cgroup_join_socket, plan.memory_leave_fd, also_keep};
  int keep[std::size(named) + CgroupSelfJoin::kMax];
  int count = 0;
  for (int fd : named)
    if (fd > 2) keep[count++] = fd;
  for (int i = 0; i < plan.cgroup_join.count; ++i)
    if (plan.cgroup_join.fds[i] > 2) keep[count++] = plan.cgroup_join.fds[i];
  // Sort the few kept descriptors (insertion sort: no allocation after clone).
  for (int i = 1; i < count; ++i)
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) {
      int t = keep[j];
      keep[j] = keep[j - 1];
      keep[j - 1] = t;
    }
  unsigned int next = 3;
  for (int i = 0; i < count; ++i) {
    if (static_cast<unsigned int>(keep[i]) > next) CloseDescriptorRange(next, keep[i] - 1);
    next = static_cast<unsigned int>(keep[i]) + 1;
  }
  CloseDescriptorRange(next, ~0U);
}

}  // namespace

namespace {

// What pid 1 hands its payload, on pid 1's stack (the payload runs vfork-style, while pid 1 waits).
struct PayloadStart {
  const ChildPlan* plan;
  int memory_join_fd;
  int code_fd;
};

int PayloadEntry(void* arg) {
  const auto* start = static_cast<const PayloadStart*>(arg);
  RunPayload(*start->plan, /*inherited=*/true, start->memory_join_fd, start->code_fd);
}

}  // namespace

void ChildMain(const ChildPlan& plan) {
  // 0. Out of nsbox's process group and session: a signal to nsbox's group (a terminal's Ctrl-C, kill -- -PGID) is
  //    nsbox's to act on (a batch cancels its jobs, which then get no result; a run forwards it to its program once),
  //    not pid 1's, which forwarded it to the program as well, or died of it while setting up.
  if (::setsid() < 0) Fail(plan, "setsid()", errno);
  CloseUnplannedDescriptors(plan, DeviceNodeTreeFd());  // the device tree until the root is built (step 4)
  // 1. Die with nsbox: if nsbox is killed, the kernel kills pid 1 and with it the whole pid namespace. The watch
  //    (through the host's /proc, still mounted here) re-arms that signal after each credential change.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) Fail(plan, "prctl(PR_SET_PDEATHSIG)", errno);
  ParentWatch watch;
  if (OpenParentWatch(&watch) != 0) Fail(plan, "open(/proc/self/stat) to watch nsbox", errno);
  // pid 1's own copy of nsbox's command line (pid 1 is a fork): nsbox's stays as it is.
  HideNsboxCommandLine(watch, "nsbox-init");
  // 2. Into the sandbox's cgroup (v1; v2 cloned us into it), before anything else runs here.
  if (plan.cgroup_join.count > 0) {
    if (JoinCgroupSelf(plan.cgroup_join) != 0)
      Fail(plan, "write(cgroup tasks, \"0\"): joining the sandbox's cgroup", errno);
    for (int i = 0; i < plan.cgroup_join.count; ++i) ::close(plan.cgroup_join.fds[i]);
  }
  //    Then wait until nsbox has written our id maps. EOF means nsbox is gone.
  char go = 0;
  ssize_t n;
  do n = ::read(plan.sync_fd, &go, 1); while (n < 0 && errno == EINTR);
  if (n != 1) _exit(125);
  ::close(plan.sync_fd);
  // A cgroup namespace rooted at the sandbox's own cgroup, once we are in it (now, unless it comes later).
  if (plan.cgroup_join_socket < 0 && ::unshare(CLONE_NEWCGROUP) != 0) Fail(plan, "unshare(CLONE_NEWCGROUP)", errno);
  //    A session's pid 1 then leaves the memory group (v1), as a run's does at step 7: its files (/workspace, /tmp)
  //    count for no process, so the OOM killer's choice of the largest process was pid 1, and the session ended.
  //    Each exec's processes join the group instead.
  if (plan.memory_leave_fd >= 0) {
    if (::write(plan.memory_leave_fd, "0", 1) != 1)
      Fail(plan, "write(cgroup tasks, \"0\"): pid 1 leaving the session's memory group", errno);
    ::close(plan.memory_leave_fd);
  }
  // Files we create (/etc) belong to the sandbox user, a uid mapped in our namespace.
  ::setfsuid(plan.uid);
  ::setfsgid(plan.gid);
  if (RearmParentDeathSignal(watch) != 0) Fail(plan, "prctl(PR_SET_PDEATHSIG) after setfsuid", errno);

  // 3. Own hostname (uts namespace).
  if (::sethostname(plan.hostname.data(), plan.hostname.size()) != 0) Fail(plan, "sethostname", errno);
  const char* step = nullptr;
  //    The user namespace's own quotas (inotify, fanotify, namespaces), while we hold CAP_SYS_RESOURCE in it: its
  //    counts are charged to its owner as well (quotas.h).
  if (SetUserNamespaceQuotas(&step) != 0) Fail(plan, step, errno);
  // 4. The root filesystem.
  if (MountBaseAndPivotToIt(&step) != 0) Fail(plan, step, errno);
  for (const auto& m : plan.mounts)
    if (ApplyChildMount(m, plan.uid, plan.gid, &step) != 0) Fail(plan, step, errno);
  if (FinishRoot(&step) != 0) Fail(plan, step, errno);
  CloseDeviceNodeTree();
  // 5. Loopback up in the new network namespace; nothing else exists there.
  if (plan.new_network && BringUpLoopback(&step) != 0) Fail(plan, step, errno);
  // 6. The code to run, sealed in a memfd of its own: no file in /workspace, which other runs may share, and nothing
  //    that anyone, the program included, can change once it is written (the interpreter reads it as /dev/fd/N).
  int code_fd = -1;
  if (!plan.code_path.empty() && (code_fd = MakeSealedCodeFd(plan)) < 0) Fail(plan, "write(code memfd)", errno);

  // 7. The cgroup nsbox made meanwhile (v1): into it before anything of the payload's runs, then its namespace. The
  //    descriptors to leave it again stay with pid 1, for its end.
  CgroupSelfJoin leave;
  int memory_join_fd = -1;  // for the payload, when pid 1 stays out of the memory group
  if (plan.cgroup_join_socket >= 0) {
    CgroupSelfJoin join;  // count 0: nsbox has placed us itself
    for (CgroupSelfJoin* fds : {&join, &leave}) {
      char header[2] = {};  // the count, and the memory index plus one
      ssize_t got;
      do got = ::read(plan.cgroup_join_socket, header, sizeof header); while (got < 0 && errno == EINTR);
      if (got != sizeof header) _exit(125);  // nsbox is gone, or gave up on the cgroup and kills us
      const int count = header[0], memory_index = header[1] - 1;
      if (count < 0 || count > CgroupSelfJoin::kMax || memory_index < -1 || memory_index >= count)
        Fail(plan, "receiving the sandbox's cgroup: bad count", EPROTO);
      for (int i = 0; i < count; ++i) {
        int fd = ReceiveFd(plan.cgroup_join_socket);
        if (fd < 0) Fail(plan, "recvmsg(cgroup tasks descriptor)", errno);
        fds->fds[fds->count++] = fd;
      }
      fds->memory_index = memory_index;
    }
    if (JoinCgroupSelf(join) != 0) Fail(plan, "write(cgroup tasks, \"0\"): joining the sandbox's cgroup", errno);
    // pid 1 stays out of the memory group (v1, where it is a hierarchy of its own): the OOM killer takes the largest
    // process of the group, and pid 1, a copy of nsbox's memory, may well be larger than the program. Its death would
    // end the sandbox at once; the program's own death leaves pid 1 to report it. The payload joins it instead.
    const bool apart = join.memory_index >= 0 && leave.memory_index >= 0;
    for (int i = 0; i < join.count; ++i)
      if (!apart || i != join.memory_index) ::close(join.fds[i]);
    ::close(plan.cgroup_join_socket);
    // The namespace is rooted at the sandbox's groups, the memory group among them; then pid 1 leaves that one.
    if (::unshare(CLONE_NEWCGROUP) != 0) Fail(plan, "unshare(CLONE_NEWCGROUP)", errno);
    if (apart) {
      memory_join_fd = join.fds[join.memory_index];
      if (::write(leave.fds[leave.memory_index], "0", 1) != 1)
        Fail(plan, "write(cgroup tasks, \"0\"): pid 1 leaving the sandbox's memory group", errno);
      // Out of that one for good: its way out is not taken again at the end.
      ::close(leave.fds[leave.memory_index]);
      leave.fds[leave.memory_index] = leave.fds[--leave.count];
      leave.memory_index = -1;
    }
  }
  // 8. An empty capability bounding set, inherited by the payload and everything it starts.
  if (DropBoundingSet(&step) != 0) Fail(plan, step, errno);
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  // 9. pid 1 becomes the sandbox user (groups, uid, gid, no capabilities); the payload inherits those credentials.
  DropInitPrivileges(plan, watch);
  // 10. The payload, and pid 1 for as long as it runs.
  // A session's pid 1 has no payload: it stays, reaping, while execs join its namespaces from outside.
  if (plan.persistent) RunInit(plan, -1, leave);
  // A kill nsbox sent while pid 1 set up (held pending since the clone, launcher.cc): no payload starts. Nothing but
  // pid 1 is in the sandbox yet, so nsbox is the only possible sender.
  sigset_t pending;
  if (::sigpending(&pending) == 0 && sigismember(&pending, KillSandboxSignal())) _exit(128 + SIGKILL);
  // vfork-style: pid 1 waits until the payload has called execve (RunPayload makes only system calls).
  PayloadStart start = {&plan, memory_join_fd, code_fd};
  pid_t payload = StartVforkChild(PayloadEntry, &start);
  if (payload < 0) Fail(plan, "clone(CLONE_VM|CLONE_VFORK, payload)", errno);
  if (memory_join_fd >= 0) ::close(memory_join_fd);
  if (code_fd >= 0) ::close(code_fd);
  // The payload has called execve (or reported why not): from here on the program may have run, and an early end of
  // pid 1 is not a set-up failure.
  InitMessage started;
  started.kind = InitMessage::kStarted;
  ssize_t ignored = ::write(plan.control_fd, &started, sizeof started);
  (void)ignored;
  RunInit(plan, payload, leave);
}

}  // namespace nsbox
