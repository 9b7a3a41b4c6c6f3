// Seccomp: compiles a profile with libseccomp into in-memory BPF, installs it, and answers user notifications.
// Files: seccomp.cc (compiling, pid 1's guard, installing), seccomp_load.cc (profiles by name or path, the cache),
// seccomp_notifier.cc (the user-notification listener).
#pragma once

#include <linux/filter.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/spec/seccomp_profile.h"

struct seccomp_notif;       // <linux/seccomp.h>
struct seccomp_notif_resp;

namespace nsbox {

struct SeccompProgram {
  std::vector<sock_filter> filter;
  // The filter returns SECCOMP_RET_USER_NOTIF somewhere: install it with a listener and run a SeccompNotifier.
  bool uses_notify = false;
  std::string name;
  // What the notifier answers to every notification: the profile's default errno.
  int notify_errno = EPERM;
};

// What `nsbox profile check` prints, and what compiling a profile learned about it.
struct SeccompSummary {
  std::string default_action;  // "SCMP_ACT_ERRNO(EPERM)"
  bool notify_denials = false;
  std::map<std::string, int> rules_by_action;     // applied rules, by action name
  std::map<std::string, int> syscalls_by_action;  // distinct syscall names in applied rules, by action name
  std::vector<std::string> architectures;         // as the profile lists them (nsbox filters the native arch only)
  int rules_skipped_for_caps = 0;
  int rules_skipped_for_arch = 0;
  int rules_skipped_for_kernel = 0;
  int rules_redundant = 0;  // same action as the default: libseccomp refuses them and they change nothing
  std::vector<std::string> names_not_on_native_arch;  // known to libseccomp, but not an x86_64 call
  std::vector<std::string> names_unknown;             // not a system call anywhere libseccomp knows
  int enosys_ranges = 0;  // ranges of unassigned/future numbers answered ENOSYS
  size_t bpf_instructions = 0;
};

// nsbox's own filter, installed under every profile (before it, and even with none). It refuses (EPERM) what would
// let the program reach the sandbox's pid 1, which runs as the same user: a new limit for pid 1 (prlimit64; a lowered
// RLIMIT_CPU would let a signal flood kill pid 1 and end the sandbox with a false verdict), its priority, scheduling
// and affinity. And it refuses set-user-id and set-group-id bits in every call that sets a mode (EPERM), and openat2
// (ENOSYS), which could set them unseen: a set-id file left in a host directory the sandbox may write would run as
// the sandbox's uid for any host user. It refuses classic BPF socket filters (EPERM), whose compiled code takes from
// a host-wide budget no cgroup counts. (A profile that allows io_uring_setup lets the ring's calls past all of it.)
// Compiled once per process; call it before clone (the child may not allocate).
StatusOr<const SeccompProgram*> GuardProgram();

// Compiles a parsed profile for the native architecture (x86_64); other architectures (i386, x32)
// meet the bad-arch action, which kills the process. With an errno default action, numbers no
// system call owns (gaps and anything past the newest call nsbox knows) answer ENOSYS, so libc
// falls back as it does on an older kernel.
StatusOr<std::shared_ptr<const SeccompProgram>> CompileSeccompProfile(const SeccompProfile& profile,
                                                                      const std::string& name, const SeccompHost& host,
                                                                      SeccompSummary* summary = nullptr);

// "default", "strict" (files NAME.json in profiles_dir) or a path to a profile file (anything with a '/' or ending in
// .json).
StatusOr<std::string> ResolveSeccompProfilePath(const std::string& name_or_path, const std::string& profiles_dir);
StatusOr<SeccompProfile> ReadSeccompProfile(const std::string& path);
StatusOr<std::shared_ptr<const SeccompProgram>> LoadSeccompProfile(const std::string& name_or_path,
                                                                   const std::string& profiles_dir);
// $NSBOX_PROFILES_DIR, else DataDir()/seccomp-profiles (sandbox/base/data_dir.h: the installed data, or the source
// tree of a build-tree binary). Either is checked: one that others could change ends the process (exit 125).
std::string DefaultSeccompProfilesDir();

// The only calls the child may make between InstallSeccompProgram and execve: hand the listener
// over (sendmsg over a unix socket, close), report a failure (write, exit_group), and exec. A
// profile that notifies must allow them unconditionally, or the child would wait on a notification
// that only the listener it still holds could answer; CompileSeccompProfile refuses it otherwise.
inline constexpr const char* kSyscallsAfterInstall[] = {"sendmsg", "close", "write", "exit_group", "execve"};

// In the sandboxed child, right before execve: async-signal-safe, no allocation. Sets no_new_privs
// (needed without CAP_SYS_ADMIN) and installs the filter. Returns 0 or -errno. When
// program.uses_notify, *listener_fd receives the user-notification fd (SECCOMP_FILTER_FLAG_NEW_LISTENER);
// the kernel opens it close-on-exec, so hand it to the parent (SCM_RIGHTS, or the parent's
// pidfd_getfd) before execve.
int InstallSeccompProgram(const SeccompProgram& program, int* listener_fd);

// Parent side: answers each notification with answer_errno (never lets the call run) and counts
// denials by syscall name. Ends by itself once no process uses the filter any more.
class SeccompNotifier {
 public:
  // nsbox answers at most this many notifications per filter, on its own CPU time and outside the sandbox's cgroup:
  // about 20 µs each here, so that 500k denied calls under --cpus 0.5 cost nsbox as much CPU as the program got
  // (issue 24, item 8). Then it closes the listener, and the kernel answers every further notified call with ENOSYS
  // at once, at no cost to nsbox; Denied() then holds the first answer_budget denials and Capped() says so.
  static constexpr uint64_t kAnswerBudget = 10000;
  explicit SeccompNotifier(UniqueFd listener, int answer_errno = EPERM, uint64_t answer_budget = kAnswerBudget);
  ~SeccompNotifier();
  SeccompNotifier(const SeccompNotifier&) = delete;
  SeccompNotifier& operator=(const SeccompNotifier&) = delete;

  void Start();  // runs the answering thread
  void Stop();   // ends and joins it; idempotent
  std::map<std::string, uint64_t> Denied() const;
  bool Capped() const;  // the budget was spent: denials after it were neither answered nor counted

  // Without a thread (a supervisor that polls anyway; one thread fewer to start and join per sandbox): poll
  // listener_fd() for POLLIN while it is >= 0, and pass what poll returned for it to OnReady. -1 once no process
  // uses the filter any more.
  int listener_fd() const { return thread_.joinable() ? -1 : listener_.get(); }
  void OnReady(short revents);

 private:
  void Loop();
  // Answers one pending notification; false when the listener is done with (no process uses the filter).
  bool AnswerOne();

  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: Stop() wakes the thread out of poll
  int answer_errno_;
  uint64_t answer_budget_;
  uint64_t answered_ = 0;
  bool capped_ = false;  // under mutex_
  std::thread thread_;
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> denied_;
  struct seccomp_notif* request_ = nullptr;
  struct seccomp_notif_resp* response_ = nullptr;
};

// "mount"; "syscall_1000" for numbers no x86_64 call owns. For "violation" verdicts.
std::string SyscallName(int nr);

}  // namespace nsbox
