// Cgroup: one sandbox's cgroup behind one interface (v2 and v1 backends), backend detection, and cleanup after nsbox
// dies. Files: cgroup.cc (detection, placement), cgroup_v2.cc and cgroup_v1.cc (the backends, cgroup_backends.h),
// cgroup_fs.cc (control files, names, kill and rmdir), cgroup_reaper.cc (the reaper), spec/cgroup_text.cc (parsing).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "sandbox/base/status.h"
#include "sandbox/policy.h"
#include "sandbox/result.h"

namespace nsbox {

// A cgroup reaper (cgroup_reaper.h) started before its group exists. Sandbox::Run starts one first thing, while the
// process is small (the reaper is a fork) and before the stretch where the group is made while the sandbox's child
// builds its root. Released unused, it is dismissed.
struct PrestartedReaper;
StatusOr<std::shared_ptr<PrestartedReaper>> StartCgroupReaper();

// Reaps every reaper dismissed so far, waiting for those still exiting (a dismissed reaper exits as soon as it reads
// the dismissal). Called before a process that made groups exits, so that no reaper outlives it: an orphan is left
// to init, which may take seconds to reap it (a zombie until then).
void WaitForDismissedReapers();

struct CgroupConfig {
  // Where the cgroup file systems are mounted; tests point it at a fake tree in a temp dir.
  std::string cgroup_root = "/sys/fs/cgroup";
  // v2: the directory, under the hierarchy root (root) or under nsbox's own cgroup (non-root), that holds one group
  // per sandbox; it is removed again when it becomes empty. v1: the prefix of each group's name, "<subtree>-<id>"
  // directly in each hierarchy's root (or nsbox's own group).
  std::string subtree = "nsbox";
  // Where nsbox's own cgroup membership is read from (cgroup(7) format).
  std::string proc_self_cgroup = "/proc/self/cgroup";

  enum class Placement {
    kAuto,         // the hierarchy root's subtree when euid is 0, nsbox's own (delegated) cgroup otherwise
    kRootSubtree,  // <root>/<subtree>/<id> (v2), <root>/<ctrl>/<subtree>/<id> (v1)
    kOwnCgroup,    // <own cgroup>/<subtree>/<id>: a subtree delegated to nsbox's user (systemd Delegate=yes)
  };
  Placement placement = Placement::kAuto;

  enum class Backend { kAuto, kV2, kV1 };
  Backend backend = Backend::kAuto;  // kAuto: v2 when it has every controller delegated, else v1

  // v1 only: also a group in the cpuacct hierarchy (CPU usage in ReadStats) and in the freezer hierarchy (a kill
  // that a fork bomb cannot race). A sandbox in its own pid namespace needs neither: its pid 1 reaps, so its CPU
  // time is in pid 1's rusage, and pid 1's death kills every process of the namespace at once. Each costs a
  // group directory to make and remove (about 0.1 ms).
  bool v1_cpu_accounting = true;
  bool v1_freezer = true;

  // Forks a small reaper that kills and removes the group if nsbox dies without doing it (SIGKILL).
  bool reaper = true;
  // A reaper forked earlier (StartCgroupReaper), to arm instead of forking one: the first group made with this
  // config takes it.
  std::shared_ptr<PrestartedReaper> prestarted_reaper;
  // Removes groups left behind by an nsbox that is no longer alive (reaper killed too, machine crash).
  bool sweep_stale = true;
  // Tests only: a fake tree is a plain directory, so the kernel does not fill new groups with control
  // files; this is called after each mkdir to create them.
  std::function<void(const std::string& dir)> fake_fs_mkdir_hook;
};

// Descriptors through which a freshly cloned or forked, still single-threaded child moves itself into its group,
// opened by nsbox. v1: each hierarchy's `tasks` file; moving oneself ("0", the calling thread) skips the global
// threadgroup lock that moving another process by pid takes, and with it an RCU grace period (5-10 ms here).
// v2: the group's cgroup.procs ("0" moves the caller's process), for children that cannot be cloned into it.
struct CgroupSelfJoin {
  static constexpr int kMax = 6;
  int fds[kMax] = {-1, -1, -1, -1, -1, -1};
  int count = 0;
  // Which of fds is the memory controller's group (v1: a hierarchy of its own), -1 when none is apart. pid 1 stays
  // out of that group (ChildMain says why).
  int memory_index = -1;
};

// In the child, allocation-free: writes "0" to each descriptor. 0, or -1 with errno.
int JoinCgroupSelf(const CgroupSelfJoin& join);

struct CgroupStats {
  uint64_t peak_memory_bytes = 0;
  uint64_t oom_kills = 0;
  uint64_t pids_limit_events = 0;  // how often a fork or clone failed on the pids limit (pids.events "max")
  bool pids_limit_hit = false;     // pids_limit_events > 0
  uint64_t cpu_usage_us = 0;
  uint64_t cpu_throttled_us = 0;
  // The counters that could not be read ("<file>: <why>"): their figures above are 0 for want of a measurement.
  std::vector<std::string> read_errors;
};

// A group inside a sandbox's group for one exec of a session: no limits of its own unless asked for a memory limit
// (the session's hold for it too), only membership, so that a time-out can kill every process the exec started, those
// that left its process group or session included. Where it lives: v2, <group>/<name>; v1, in the freezer hierarchy (a
// kill that a fork bomb cannot race), else the pids one. Its destructor kills nothing and removes the directory if it
// is empty; one it leaves (a background process still runs in it) goes with the sandbox's group, whose removal takes
// the empty groups below it (RawRemoveDir), in nsbox, in the reaper and in the stale sweep alike.
class CgroupChild {
 public:
  virtual ~CgroupChild() = default;
  CgroupChild(const CgroupChild&) = delete;
  CgroupChild& operator=(const CgroupChild&) = delete;
  // The sandbox's descriptors with this group's in place of its parent's: valid while both exist.
  virtual CgroupSelfJoin self_join() const = 0;
  // Kills every process in this group (v2 cgroup.kill; v1 freeze, SIGKILL, thaw) and waits until it is empty.
  virtual Status KillAll() = 0;
  // rmdir; false while processes are still in it.
  virtual bool TryRemove() = 0;
  virtual std::string path() const = 0;
  // OOM kills in this group that the sandbox's own counter does not include (v1: its memory group is a group of its
  // own, whose oom_kill count stays there); 0 without a memory limit of its own, and on v2 (memory.events counts
  // the subtree).
  virtual uint64_t OomKillsApart() const { return 0; }
  // The most memory the group used, for one with a memory limit of its own (v1 memory.max_usage_in_bytes of its
  // memory group, v2 memory.peak): what the exec's processes held at once, page cache included, as a run's
  // peak_memory_bytes is its cgroup's. nullopt without a limit of its own, or when the file cannot be read.
  virtual std::optional<uint64_t> PeakMemoryBytes() const { return std::nullopt; }

 protected:
  CgroupChild() = default;
};

// One sandbox's cgroup. The destructor kills every process in it and removes it.
class Cgroup {
 public:
  virtual ~Cgroup() = default;
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  virtual const char* backend() const = 0;  // "cgroup2" / "cgroup1"
  // v2: a directory fd for clone3(CLONE_INTO_CGROUP), valid until the Cgroup is destroyed; v1: -1.
  virtual int clone_into_fd() const { return -1; }
  // The group's directory (v2) or its memory controller's directory (v1), for messages and tests.
  virtual std::string path() const = 0;
  // Moves a process (and its future children) into the group: cgroup.procs of every controller.
  virtual Status AddProcess(pid_t pid) = 0;
  // Descriptors for JoinCgroupSelf, valid until the Cgroup is destroyed. On v2, prefer clone_into_fd where the
  // child can be cloned into the group.
  virtual CgroupSelfJoin self_join() const = 0;
  // Descriptors through which a process of the group moves itself (JoinCgroupSelf) back out into the group's parent,
  // so that the group can be removed while that process is still exiting: a run's pid 1, whose last step, tearing
  // down the namespaces, takes longer than removing the group. v1 only (the parent's `tasks` files); empty where
  // moving out would cost more than waiting (v2: a move by cgroup.procs takes the global threadgroup lock).
  virtual CgroupSelfJoin leave_join() const { return {}; }
  virtual CgroupStats ReadStats() const = 0;
  // The counters that only grow (oom_kills, pids_limit_events, cpu_throttled_us) alone: three files instead of five.
  // A session reads them before each exec, to report what happened during that exec.
  virtual CgroupStats ReadCounters() const = 0;
  // Kills every process in the group and waits until it is empty (v2: cgroup.kill; v1: freeze, SIGKILL, thaw).
  virtual Status KillAll() = 0;
  // Removes the group's directories, and the subtree directory when no other sandbox uses it.
  virtual Status Remove() = 0;
  // For an empty group: leaves its removal to its reaper, which does it (kill what is left, then Remove's rmdirs)
  // while the caller goes on with its verdict and its own exit. False, and nothing done, without a reaper. The
  // caller reaps the reaper before it exits (WaitForDismissedReapers), so the group is gone by then.
  virtual bool RemoveInBackground() = 0;
  // A group below this one (CgroupChild), named `name` (one path component); memory_max_bytes > 0 gives it a memory
  // limit of its own (v1: a group in the memory hierarchy too), or fails saying which limit could not be set.
  virtual StatusOr<std::unique_ptr<CgroupChild>> CreateChild(const std::string& name,
                                                             uint64_t memory_max_bytes = 0) = 0;
  // Which mechanism enforced each limit, with measurements already read by ReadStats().
  virtual LimitsReport ReportFrom(const CgroupLimits& limits, const CgroupStats& stats) const = 0;
  // The same, reading the measurements now.
  LimitsReport Report(const CgroupLimits& limits) const { return ReportFrom(limits, ReadStats()); }

 protected:
  Cgroup() = default;
};

// Creates a cgroup for one sandbox with the limits applied, or fails with a message naming what is
// missing and how to fix it.
StatusOr<std::unique_ptr<Cgroup>> CreateSandboxCgroup(const CgroupLimits& limits, const CgroupConfig& config = {});

// The last sentence of the error when no backend is usable: a program that offers no way to run without limits
// (the service) leaves it out.
inline constexpr const char kRunWithoutLimitsHint[] =
    " Or run without any limits (PolicyBuilder::DangerDisableCgroupLimits).";

// The backend CreateSandboxCgroup would use ("cgroup2" / "cgroup1"), or the same error it would give;
// creates nothing (for `nsbox doctor`).
StatusOr<std::string> DetectCgroupBackend(const CgroupConfig& config = {});

}  // namespace nsbox
