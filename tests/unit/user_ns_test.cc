// Unit tests: the namespace owner switch (sandbox/user_ns.h), root only: one thread's euid for one clone.
#include <fcntl.h>
#include <linux/nsfs.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <sched.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "sandbox/base/clone.h"
#include "sandbox/user_ns.h"

namespace {

// The effective uid of one thread of this process, from /proc ("Uid:" real, effective, saved, fs).
long ThreadEuid(pid_t tid) {
  std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    long real = -1, effective = -1;
    std::sscanf(line.c_str(), "Uid: %ld %ld", &real, &effective);
    return effective;
  }
  return -1;
}

bool HasEffective(cap_value_t cap) {
  cap_t caps = cap_get_proc();
  cap_flag_value_t value = CAP_CLEAR;
  cap_get_flag(caps, cap, CAP_EFFECTIVE, &value);
  cap_free(caps);
  return value == CAP_SET;
}

}  // namespace

TEST_CASE("the owner switch changes one thread's euid for a clone, keeps its capabilities, and restores it all") {
  if (::geteuid() != 0 || !nsbox::MissingNamespaceOwnerCapabilities().empty()) {
    WARN("SKIP: the switch is root's, with CAP_SETUID, CAP_SETPCAP, CAP_SYS_ADMIN and CAP_SYS_PTRACE");
    return;
  }
  constexpr uid_t kOwner = 3200000;
  const pid_t main_tid = static_cast<pid_t>(::syscall(SYS_gettid));
  REQUIRE(::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1);
  long during_euid = -1, main_euid_during = -1, owner = -1, after_euid = -1, child_proc_owner = -1;
  int dumpable_during = -1;
  bool kept_caps = false, entered = false;
  int securebits_during = -1, securebits_after = -1, dumpable_after = -1, death_signal_after = -1;
  std::thread([&] {
    const int securebits_before = ::prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGWINCH, 0, 0, 0);  // ignored by default, should it ever come
    {
      nsbox::NamespaceOwnerSwitch owner_switch;
      entered = owner_switch.Enter(kOwner).ok();
      during_euid = ::geteuid();  // a system call: this thread's own
      main_euid_during = ThreadEuid(main_tid);
      kept_caps = HasEffective(CAP_SYS_ADMIN) && HasEffective(CAP_SETUID);
      securebits_during = ::prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
      dumpable_during = ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
      // A child in a new user namespace, made now: its namespace is the switched euid's.
      int pidfd = -1;
      const pid_t child = nsbox::CloneWithPidfd(CLONE_NEWUSER, &pidfd, -1);
      if (child == 0) {
        ::pause();
        _exit(0);
      }
      owner_switch.Leave();
      if (child > 0) {
        // Born not dumpable, the child's /proc is root's: were it the owner's, a process of that uid could read its
        // environment and memory (a copy of nsbox's) and race its id maps.
        struct stat st;
        if (::stat(("/proc/" + std::to_string(child) + "/environ").c_str(), &st) == 0) child_proc_owner = st.st_uid;
        const int user_ns = ::open(("/proc/" + std::to_string(child) + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
        uid_t got = 0;
        if (user_ns >= 0 && ::ioctl(user_ns, NS_GET_OWNER_UID, &got) == 0) owner = got;
        if (user_ns >= 0) ::close(user_ns);
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        ::close(pidfd);
      }
    }
    after_euid = ::geteuid();
    securebits_after = ::prctl(PR_GET_SECUREBITS, 0, 0, 0, 0) == securebits_before ? 1 : 0;
    dumpable_after = ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    int sig = 0;
    ::prctl(PR_GET_PDEATHSIG, &sig, 0, 0, 0);
    death_signal_after = sig;
    ::prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
  }).join();
  REQUIRE(entered);
  CHECK(during_euid == kOwner);
  CHECK(main_euid_during == 0);  // the other threads keep root's
  CHECK(kept_caps);
  CHECK((securebits_during & SECBIT_NO_SETUID_FIXUP) != 0);
  CHECK(dumpable_during == 0);  // nsbox's own /proc is not the owner's either, while this thread is
  CHECK(child_proc_owner == 0);
  CHECK(owner == kOwner);
  CHECK(after_euid == 0);
  CHECK(securebits_after == 1);
  CHECK(dumpable_after == 1);  // the euid change made the process not dumpable; the switch undid it
  CHECK(death_signal_after == SIGWINCH);
  CHECK(::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1);
}

TEST_CASE("cgroup v1 checks a move against the opener's credentials from Linux 5.16 on") {
  CHECK_FALSE(nsbox::KernelChecksOpenerForCgroupMoves("5.15.0-91-generic"));
  CHECK_FALSE(nsbox::KernelChecksOpenerForCgroupMoves("4.19.0"));
  CHECK_FALSE(nsbox::KernelChecksOpenerForCgroupMoves("not a release"));
  CHECK(nsbox::KernelChecksOpenerForCgroupMoves("5.16.0"));
  CHECK(nsbox::KernelChecksOpenerForCgroupMoves("6.1.0-13-amd64"));
  CHECK(nsbox::KernelChecksOpenerForCgroupMoves("10.0"));
}

TEST_CASE("no owner given: the switch changes nothing") {
  nsbox::NamespaceOwnerSwitch owner_switch;
  const uid_t before = ::geteuid();
  REQUIRE(owner_switch.Enter(std::nullopt).ok());
  CHECK(::geteuid() == before);
  owner_switch.Leave();
  CHECK(::geteuid() == before);
}
