// nsbox doctor's kernel probes: each runs in a forked child (user and other namespaces, a proc mount, seccomp filters
// and listeners) and reports once, through a pipe, whether the step worked and, if not, which step and errno.
#include "src/cli/doctor_checks.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox::doctor {
namespace {

struct ProbeMessage {
  int32_t ok = 0;
  int32_t err = 0;
  char step[200] = {};
};

// Written by the child (or a grandchild) to the probe pipe; the first message wins.
void Report(int fd, bool ok, const char* step, int err) {
  ProbeMessage msg;
  msg.ok = ok ? 1 : 0;
  msg.err = err;
  snprintf(msg.step, sizeof msg.step, "%s", step ? step : "");
  ssize_t ignored = ::write(fd, &msg, sizeof msg);
  (void)ignored;
}

// Forks; the child runs body(fd), which reports once through Report(). The parent waits and decodes. A child killed
// by a signal (SIGSYS from a seccomp filter around us) is a failed probe that says so.
template <typename Body>
ProbeResult RunProbe(const char* what, Body body) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {false, errno, "pipe2"};
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  pid_t child = ::fork();
  if (child < 0) return {false, errno, fmt::format("fork({} probe)", what)};
  if (child == 0) {
    read_end.reset();
    body(write_end.get());
    _exit(0);
  }
  write_end.reset();
  ProbeMessage msg;
  ssize_t n;
  do n = ::read(read_end.get(), &msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof msg)) return {msg.ok != 0, msg.err, msg.step};
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    std::string why = WTERMSIG(status) == SIGSYS ? " (a seccomp filter around nsbox forbids a call)" : "";
    return {false, 0, fmt::format("{} probe killed by SIG{}{}", what, name ? name : "?", why)};
  }
  return {false, 0, fmt::format("{} probe ended without an answer (exit status {})", what, status)};
}

int WriteProcSelf(const char* file, const char* content) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/%s", file);
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = ::write(fd, content, strlen(content));
  int saved = errno;
  ::close(fd);
  errno = saved;
  return n == static_cast<ssize_t>(strlen(content)) ? 0 : -1;
}

// After unshare(CLONE_NEWUSER): map the ids we had to 0 inside, the way an unprivileged process may (one id, its own,
// setgroups denied first).
int MapSelf(uid_t uid, gid_t gid, const char** step) {
  char map[64];
  if (WriteProcSelf("setgroups", "deny") != 0 && errno != ENOENT) {
    *step = "write(/proc/self/setgroups, deny)";
    return -1;
  }
  snprintf(map, sizeof map, "0 %u 1\n", uid);
  if (WriteProcSelf("uid_map", map) != 0) {
    *step = "write(/proc/self/uid_map)";
    return -1;
  }
  snprintf(map, sizeof map, "0 %u 1\n", gid);
  if (WriteProcSelf("gid_map", map) != 0) {
    *step = "write(/proc/self/gid_map)";
    return -1;
  }
  return 0;
}

void UserNamespaceBody(int fd) {
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER) != 0) return Report(fd, false, "unshare(CLONE_NEWUSER)", errno);
  const char* step = nullptr;
  if (MapSelf(uid, gid, &step) != 0) return Report(fd, false, step, errno);
  // A namespace that grants no capabilities (Ubuntu's AppArmor restriction lets unshare succeed, then withholds
  // them) is useless to nsbox: use one of them.
  if (::unshare(CLONE_NEWNS) != 0)
    return Report(fd, false, "unshare(CLONE_NEWNS) with the new user namespace's capabilities", errno);
  Report(fd, true, "", 0);
}

}  // namespace

std::string ProbeResult::Describe() const {
  if (ok) return "ok";
  if (err == 0) return step;
  return fmt::format("{}: {} ({})", step, strerror(err), ErrnoName(err));
}

ProbeResult ProbeUserNamespace() { return RunProbe("user namespace", UserNamespaceBody); }

ProbeResult ProbeUserNamespaceAs(uid_t uid, gid_t gid) {
  return RunProbe("unprivileged user namespace", [&](int fd) {
    if (::setgroups(0, nullptr) != 0) return Report(fd, false, "setgroups(0)", errno);
    if (::setresgid(gid, gid, gid) != 0) return Report(fd, false, "setresgid(ordinary gid)", errno);
    if (::setresuid(uid, uid, uid) != 0) return Report(fd, false, "setresuid(ordinary uid)", errno);
    // Changing ids made us non-dumpable, which hands /proc/self to root; an ordinary process is dumpable.
    if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) return Report(fd, false, "prctl(PR_SET_DUMPABLE, 1)", errno);
    UserNamespaceBody(fd);
  });
}

ProbeResult ProbeNamespace(int clone_flag, const char* flag_name) {
  return RunProbe(flag_name, [&](int fd) {
    char step[96];
    snprintf(step, sizeof step, "unshare(CLONE_NEWUSER|%s)", flag_name);
    if (::unshare(CLONE_NEWUSER | clone_flag) != 0) return Report(fd, false, step, errno);
    Report(fd, true, "", 0);
  });
}

ProbeResult ProbeProcMount() {
  return RunProbe("proc mount", [](int fd) {
    uid_t uid = ::geteuid();
    gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) != 0)
      return Report(fd, false, "unshare(CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS)", errno);
    const char* step = nullptr;
    if (MapSelf(uid, gid, &step) != 0) return Report(fd, false, step, errno);
    // The next child is pid 1 of the new pid namespace; only it can mount that namespace's proc.
    pid_t init = ::fork();
    if (init < 0) return Report(fd, false, "fork(pid 1)", errno);
    if (init == 0) {
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        Report(fd, false, "mount(/, MS_REC|MS_PRIVATE)", errno);
      else if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
        Report(fd, false, "mount(proc, /proc) in a new pid namespace", errno);
      else
        Report(fd, true, "", 0);
      _exit(0);
    }
    while (::waitpid(init, nullptr, 0) < 0 && errno == EINTR) {
    }
  });
}

ProbeResult ProbeSeccompFilter() {
  return RunProbe("seccomp filter", [](int fd) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Report(fd, false, "prctl(PR_SET_NO_NEW_PRIVS)", errno);
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) return Report(fd, false, "seccomp_init(SCMP_ACT_ALLOW)", ENOMEM);
    // The kernel's own errno (EBUSY for a second listener), not libseccomp's catch-all ECANCELED.
    seccomp_attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1);
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EOWNERDEAD), SCMP_SYS(getppid), 0);
    if (rc == 0) rc = seccomp_load(ctx);
    if (rc != 0) return Report(fd, false, "seccomp_load(getppid -> EOWNERDEAD)", -rc);
    errno = 0;
    long answer = ::syscall(SYS_getppid);
    if (answer != -1 || errno != EOWNERDEAD)
      return Report(fd, false, "the loaded filter did not take effect (getppid succeeded)", 0);
    Report(fd, true, "", 0);
  });
}

ProbeResult ProbeSeccompNotifySizes() {
  return RunProbe("SECCOMP_GET_NOTIF_SIZES", [](int fd) {
    struct seccomp_notif_sizes sizes = {};
    if (::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0)
      return Report(fd, false, "seccomp(SECCOMP_GET_NOTIF_SIZES)", errno);
    char text[96];
    snprintf(text, sizeof text, "notif %u, resp %u, data %u bytes", sizes.seccomp_notif, sizes.seccomp_notif_resp,
             sizes.seccomp_data);
    Report(fd, true, text, 0);
  });
}

ProbeResult ProbeSeccompListener() {
  return RunProbe("seccomp listener", [](int fd) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Report(fd, false, "prctl(PR_SET_NO_NEW_PRIVS)", errno);
    // The raw call with a one-instruction allow-all program: libseccomp folds some kernel errors (EBUSY for a
    // second listener in the filter chain) into its own codes, and this probe is about the kernel's answer.
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog program = {1, &allow};
    long listener = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
    if (listener < 0)
      return Report(fd, false, "seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER)", errno);
    Report(fd, true, "", 0);
  });
}

}  // namespace nsbox::doctor
