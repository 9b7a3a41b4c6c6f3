// The sandbox's pid 1: drops its own privileges, reaps every orphan, forwards termination signals, reports the exit.
#include "sandbox/init.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "sandbox/caps.h"

namespace nsbox {
namespace {

constexpr int kForwardedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// pid 1 ignores signals whose handler is SIG_DFL, even blocked ones; a no-op handler lets sigwaitinfo see them.
void Ignore(int) {}

void Report(const ChildPlan& plan, int wait_status) {
  InitMessage msg;
  msg.kind = InitMessage::kExited;
  msg.value = wait_status;
  ssize_t ignored = ::write(plan.control_fd, &msg, sizeof msg);
  (void)ignored;
}

}  // namespace

void RunInit(const ChildPlan& plan, pid_t payload) {
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

  // pid 1 keeps no privilege it does not need to wait and signal: same user as the payload, no capabilities,
  // not dumpable (the payload cannot ptrace or read its memory).
  const char* step = nullptr;
  bool dropped = ::setresgid(plan.gid, plan.gid, plan.gid) == 0 &&
                 ::setresuid(plan.uid, plan.uid, plan.uid) == 0 && ClearCapabilities(plan.no_caps, &step) == 0 &&
                 ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
  if (!dropped) {
    // Refuse to go on with a privileged pid 1 next to untrusted code.
    ::kill(payload, SIGKILL);
    InitMessage msg;
    msg.kind = InitMessage::kSetupError;
    msg.err = errno;
    snprintf(msg.text, sizeof msg.text, "dropping pid 1's privileges: %s", step ? step : "setresuid/prctl");
    ssize_t ignored = ::write(plan.control_fd, &msg, sizeof msg);
    (void)ignored;
    _exit(125);
  }

  // The credential changes above cleared the parent-death signal; nsbox's death must still end the sandbox.
  ArmDeathSignal(plan.control_fd);

  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  for (int sig : kForwardedSignals) sigaddset(&wanted, sig);
  for (;;) {
    siginfo_t info;
    int sig = ::sigwaitinfo(&wanted, &info);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      ::kill(payload, sig);
      continue;
    }
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG | __WALL)) > 0) {
      if (pid == payload) {
        Report(plan, status);
        // Exiting kills every other process of the pid namespace (double-forked, setsid, ignoring SIGTERM).
        _exit(0);
      }
    }
  }
}

}  // namespace nsbox
