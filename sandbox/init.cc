// The sandbox's pid 1: drops its own privileges, reaps every orphan, forwards termination signals, reports the exit.
#include "sandbox/init.h"

#include <grp.h>
#include <signal.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sandbox/caps.h"
#include "sandbox/cgroup.h"

namespace nsbox {
namespace {

constexpr int kForwardedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// pid 1 ignores signals whose handler is SIG_DFL, even blocked ones; a no-op handler lets sigwaitinfo see them.
void Ignore(int) {}

// pid 1's last message: every other process is reaped. It moves itself out of the sandbox's groups first, so that
// nsbox can remove them while the kernel still tears down the namespaces at pid 1's exit; value 0 tells nsbox it
// could not (or had nowhere to go), and nsbox then waits for the exit. The rusage is what wait4 would give nsbox.
[[noreturn]] void ReportGoneAndExit(const ChildPlan& plan, const CgroupSelfJoin& leave) {
  if (plan.persistent) _exit(0);  // a session's pid 1 has closed its control pipe: nobody waits for this
  InitMessage msg;
  msg.kind = InitMessage::kGone;
  msg.value = leave.count > 0 && JoinCgroupSelf(leave) == 0 ? 1 : 0;
  struct rusage self = {}, children = {};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &children);
  auto us = [](const struct timeval& tv) { return static_cast<int64_t>(tv.tv_sec) * 1000000 + tv.tv_usec; };
  msg.cpu_us = us(self.ru_utime) + us(self.ru_stime) + us(children.ru_utime) + us(children.ru_stime);
  // pid 1's own resident size is its copy of nsbox's memory, not the program's: only the children's counts.
  msg.max_rss_kb = children.ru_maxrss;
  ssize_t ignored = ::write(plan.control_fd, &msg, sizeof msg);
  (void)ignored;
  _exit(0);
}

// Kills every process of the pid namespace but pid 1 and reaps them (and any other child), so that their CPU time
// counts in pid 1's rusage. A sweep reaps all that is dead; kill(-1) is repeated while children remain (one may have
// forked during the sweep), once per round rather than once per child, which a fork bomb would make quadratic.
[[noreturn]] void KillAllAndExit(const ChildPlan& plan, const CgroupSelfJoin& leave) {
  for (;;) {
    ::kill(-1, SIGKILL);
    pid_t pid;
    while ((pid = ::waitpid(-1, nullptr, __WALL | WNOHANG)) > 0) {
    }
    if (pid < 0 && errno == ECHILD) ReportGoneAndExit(plan, leave);
    pid = ::waitpid(-1, nullptr, __WALL);  // the rest are still dying: wait for one, then sweep again
    if (pid < 0 && errno == ECHILD) ReportGoneAndExit(plan, leave);
  }
}

void Report(const ChildPlan& plan, int wait_status) {
  InitMessage msg;
  msg.kind = InitMessage::kExited;
  msg.value = wait_status;
  ssize_t ignored = ::write(plan.control_fd, &msg, sizeof msg);
  (void)ignored;
}

// Fields of /proc/<pid>/stat after the command name: state is field 3, ppid 4, arg_start 48, arg_end 49.
int ReadStatFields(int fd, long* ppid, unsigned long* arg_start, unsigned long* arg_end) {
  char buf[2048];
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char* p = strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (!p) {
    errno = EINVAL;
    return -1;
  }
  ++p;
  for (int field = 3; field <= 49; ++field) {
    while (*p == ' ') ++p;
    if (!*p) {
      errno = EINVAL;
      return -1;
    }
    if (field == 4) *ppid = strtol(p, nullptr, 10);
    if (field == 48 && arg_start) *arg_start = strtoul(p, nullptr, 10);
    if (field == 49 && arg_end) *arg_end = strtoul(p, nullptr, 10);
    while (*p && *p != ' ') ++p;
  }
  return 0;
}

}  // namespace

int OpenParentWatch(ParentWatch* watch) {
  watch->host_stat_fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (watch->host_stat_fd < 0) return -1;
  return ReadStatFields(watch->host_stat_fd, &watch->nsbox_pid, &watch->arg_start, &watch->arg_end);
}

int RearmParentDeathSignal(const ParentWatch& watch) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return -1;
  long ppid = 0;
  if (ReadStatFields(watch.host_stat_fd, &ppid, nullptr, nullptr) != 0) return -1;
  if (ppid != watch.nsbox_pid) {
    errno = ESRCH;
    return -1;
  }
  return 0;
}

void HideNsboxCommandLine(const ParentWatch& watch, const char* name) {
  if (watch.arg_start == 0 || watch.arg_end <= watch.arg_start) return;
  // pid 1's private copy of nsbox's stack (it is forked): only this process sees the change, nsbox's command line
  // stays as it was. Ends in NUL bytes, so the kernel reports it as plain argv.
  char* args = reinterpret_cast<char*>(watch.arg_start);
  size_t size = watch.arg_end - watch.arg_start;
  memset(args, 0, size);
  const size_t name_size = strlen(name) + 1;
  if (size > name_size) memcpy(args, name, name_size);
}

void DropInitPrivileges(const ChildPlan& plan, ParentWatch& watch) {
  // pid 1 keeps no privilege it does not need to wait and signal. Done before the payload exists: what is left for
  // pid 1 once the payload runs is a few closes, so the two do not compete for a CPU while the payload starts.
  // Raw system calls: glibc's set*id() would also change the credentials of every thread it knows of, and in a child
  // of clone3 (which runs none of glibc's fork handlers) it still knows of nsbox's.
  const char* step = nullptr;
  bool dropped = true;
  if (plan.may_setgroups) {
    gid_t groups[1] = {plan.gid};
    dropped = ::syscall(SYS_setgroups, 1, groups) == 0;
    if (!dropped) step = "setgroups([sandbox gid])";
  }
  dropped = dropped && ::syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) == 0 &&
            ::syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) == 0 &&
            ClearCapabilities(plan.no_caps, &step) == 0 && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
            ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
  // The credential changes above cleared the parent-death signal: arm it again, for good this time.
  if (dropped && RearmParentDeathSignal(watch) != 0) _exit(125);  // nsbox is gone: nobody to report to
  ::close(watch.host_stat_fd);
  watch.host_stat_fd = -1;
  if (!dropped) {
    // Refuse to go on with a privileged pid 1 next to untrusted code.
    InitMessage msg;
    msg.kind = InitMessage::kSetupError;
    msg.err = errno;
    snprintf(msg.text, sizeof msg.text, "dropping pid 1's privileges: %s", step ? step : "setresuid/prctl");
    ssize_t ignored = ::write(plan.control_fd, &msg, sizeof msg);
    (void)ignored;
    _exit(125);
  }
}

void RunInit(const ChildPlan& plan, pid_t payload, const CgroupSelfJoin& leave) {
  // pid 1 holds none of the payload's stdio: when the sandbox ends, nsbox sees end-of-file.
  if (plan.stdin_fd >= 0) ::close(plan.stdin_fd);
  ::close(plan.stdout_fd);
  ::close(plan.stderr_fd);
  if (plan.seccomp_socket >= 0) ::close(plan.seccomp_socket);

  struct sigaction action = {};
  action.sa_handler = Ignore;
  sigfillset(&action.sa_mask);
  for (int sig : kForwardedSignals) ::sigaction(sig, &action, nullptr);
  ::sigaction(SIGCHLD, &action, nullptr);
  ::sigaction(KillSandboxSignal(), &action, nullptr);

  if (payload < 0) {
    // A session's pid 1: ready; from now on it only reaps (orphans of execs end up here).
    InitMessage ready;
    ready.kind = InitMessage::kReady;
    ssize_t ignored = ::write(plan.control_fd, &ready, sizeof ready);
    (void)ignored;
    ::close(plan.control_fd);
  }

  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  for (int sig : kForwardedSignals) sigaddset(&wanted, sig);
  sigaddset(&wanted, KillSandboxSignal());
  for (;;) {
    siginfo_t info;
    int sig;
    if (payload > 0 && plan.wall_deadline_ns > 0) {
      // The run's deadline holds here too, so that it holds while nsbox cannot act (stopped, say).
      struct timespec now;
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      const int64_t left = plan.wall_deadline_ns - (static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec);
      if (left <= 0) {
        InitMessage deadline;
        deadline.kind = InitMessage::kDeadline;
        ssize_t ignored = ::write(plan.control_fd, &deadline, sizeof deadline);
        (void)ignored;
        KillAllAndExit(plan, leave);
      }
      struct timespec wait = {static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
      sig = ::sigtimedwait(&wanted, &info, &wait);
    } else {
      sig = ::sigwaitinfo(&wanted, &info);
    }
    if (sig < 0) continue;
    // Only nsbox, outside, may end the sandbox this way: the payload's own processes share pid 1's uid.
    if (sig == KillSandboxSignal() && info.si_code == SI_USER && info.si_pid == 0) KillAllAndExit(plan, leave);
    if (sig == KillSandboxSignal()) continue;
    if (sig != SIGCHLD) {
      // To the payload's process group (it leads its own session), so that a shell's children get it as well.
      if (payload > 0 && ::kill(-payload, sig) != 0) ::kill(payload, sig);
      continue;
    }
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG | __WALL)) > 0) {
      if (payload > 0 && pid == payload) {
        Report(plan, status);
        KillAllAndExit(plan, leave);
      }
    }
  }
}

}  // namespace nsbox
