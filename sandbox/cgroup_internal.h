// Shared between the cgroup backends: group naming, control-file parsing, directory creation with races, the reaper.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"

namespace nsbox::cgroup_internal {

// The leaf a non-root nsbox moves itself into, so that its delegated cgroup can give controllers to children.
inline constexpr const char* kSupervisorLeaf = "supervisor";

// nsbox's own cgroup membership, from /proc/self/cgroup.
struct SelfCgroup {
  std::optional<std::string> unified_path;          // the "0::/path" line
  std::map<std::string, std::string> v1_paths;      // controller -> path, from "N:ctrl,ctrl:/path"
  std::map<std::string, std::string> v1_mount_dir;  // controller -> hierarchy name ("cpu,cpuacct")
};
SelfCgroup ParseSelfCgroup(std::string_view content);

// "key value" lines (memory.events, cpu.stat, memory.oom_control, pids.events).
std::map<std::string, uint64_t> ParseKeyedFile(std::string_view content);
// Reads one key of a keyed file; 0 when the file or key is missing (an older kernel).
uint64_t ReadKeyed(const std::string& path, const std::string& key);
// Reads a file holding one number; 0 when missing or "max".
uint64_t ReadNumber(const std::string& path);
// As ReadKeyed and ReadNumber for a measurement: a file that cannot be read, or lacks the key, is not a 0 but a line
// in *errors ("<file>: <why>"), and gives 0.
uint64_t ReadKeyedOrNote(const std::string& path, const std::string& key, std::vector<std::string>* errors);
uint64_t ReadNumberOrNote(const std::string& path, std::vector<std::string>* errors);
// A control file opened once and then read with pread from offset 0, which makes the kernel generate it afresh: the
// counters a run reads at its end cost one system call each instead of an open, a read and a close (a cgroup file's
// open is the expensive part). Read by path when it is not open (not opened yet, or missing on an older kernel).
class ControlFile {
 public:
  ControlFile() = default;
  explicit ControlFile(std::string path) : path_(std::move(path)) {}
  void Open();  // O_RDONLY; a failure leaves reads by path
  std::string Read() const;  // "" when unreadable
  uint64_t Number() const;   // as ReadNumber
  uint64_t Keyed(const std::string& key) const;  // as ReadKeyed
  // As ReadNumberOrNote and ReadKeyedOrNote.
  uint64_t NumberOrNote(std::vector<std::string>* errors) const;
  uint64_t KeyedOrNote(const std::string& key, std::vector<std::string>* errors) const;
  // 1 when the file (a cgroup.procs) lists nothing, 0 when it lists something, -1 when it cannot tell (not open, or
  // the group is gone).
  int Empty() const;

 private:
  StatusOr<std::string> TryRead() const;
  std::string path_;
  UniqueFd fd_;
};

// The pids listed in a cgroup.procs or tasks file.
std::vector<pid_t> ReadPids(const std::string& path);

// Group names carry their creator: "<pid>-<start time in ticks>-<sequence>", so a later nsbox can tell
// a group whose creator is dead (and whose pid may have been reused) from a live one.
std::string NewGroupName();
bool IsStaleGroupName(const std::string& name);

// Writes a control file with one write(2); *err (if given) gets the errno of a failure.
Status WriteCgroupFile(const std::string& path, std::string_view content, int* err = nullptr);

// mkdir <parent>/<subtree> (if needed), then mkdir <parent>/<subtree>/<name>, then prepare_subtree() on the
// subtree (v2: enable the controllers). Another nsbox may remove the subtree directory in between when its
// last group goes (ENOENT): retried. The subtree is prepared only once our group is in it, as only then
// can it not be removed and re-created bare under us.
template <typename Prepare>
Status MakeGroupDir(const std::string& subtree_dir, const std::string& group_dir, const CgroupConfig& config,
                    Prepare prepare_subtree);
// mkdir that accepts EEXIST (reported through *created); *err gets the errno of a failure.
Status MakeDir(const std::string& dir, const CgroupConfig& config, bool* created, int* err);

// RawRemoveDir with a Status.
Status RemoveDir(const std::string& dir);
// rmdir of a subtree directory that other sandboxes may still use: EBUSY/ENOTEMPTY/ENOENT are fine.
void RemoveSubtreeIfEmpty(const std::string& dir);

// Kills every process of a group and waits (bounded, about 5 s) until its cgroup.procs stays empty.
// Allocation-free, async-signal-safe and errno-free (sandbox/base/raw_syscall.h), so the reaper runs it. kill_file: cgroup.kill (v2,
// written once; falls back to SIGKILL per pid when the kernel lacks it); freezer_state: v1 freezer.state
// (freeze, kill, thaw, so nothing forks between reading the list and killing it); either may be null.
// Returns 0, or the errno of the failing step with *failed_call naming it.
int RawKillGroup(const char* kill_file, const char* procs_file, const char* freezer_state, const char** failed_call);
// rmdir, waiting out EBUSY while killed processes finish exiting (bounded), and removing the empty groups below
// (an exec's group in a session) that keep it busy; allocation-free. Returns 0 or errno; ENOENT is 0.
int RawRemoveDir(const char* dir);

// A CgroupChild for both backends: makes <parent>/<name> and opens its join_file ("tasks" on v1, "cgroup.procs" on
// v2) into join.fds[slot] (slot == join.count: appended), the sandbox's join with the parent's descriptor replaced.
// kill_file: v2's cgroup.kill; freezer: the child is in a v1 freezer hierarchy.
StatusOr<std::unique_ptr<CgroupChild>> MakeCgroupChild(const std::string& parent, const std::string& name,
                                                       const char* join_file, CgroupSelfJoin join, int slot,
                                                       bool kill_file, bool freezer);

// What the reaper must do if nsbox dies. It travels to the reaper as one message (Reaper::Arm), which the reaper
// parses into a buffer of its own: it allocates nothing.
struct ReaperPlan {
  std::string kill_file;                 // v2: <group>/cgroup.kill; empty on v1
  std::string procs_file;                // the group's cgroup.procs, polled until empty
  std::string freezer_state_file;        // v1: <freezer group>/freezer.state, or empty
  std::vector<std::string> group_dirs;   // removed after the kill, in order
  std::vector<std::string> subtree_dirs; // removed if empty
};

// A process that waits on a socket from nsbox and on a pidfd of nsbox. On x86-64 it is a clone that shares nsbox's
// memory (CLONE_VM, with a stack and thread pointer of its own, and system calls that leave errno alone): nothing to
// copy when it starts, nothing to tear down when it exits, 0.1 ms of a run here; elsewhere it is forked. Messages on the socket: a plan (Arm:
// what to kill and remove), or "cleaned up, exit" (Dismiss). nsbox's exit (pidfd readable, or the socket's end of
// file) without a dismissal means nsbox died, and the reaper carries out the last plan it received. The pidfd
// matters because a sandbox child that does not exec keeps a copy of the socket. Its own session keeps it out of
// nsbox's process group (a terminal's Ctrl-C or `kill -- -pgid` does not take it along).
//
// It may be started before its group exists (Start() with no plan, then Arm before the group's first mkdir): `run`
// starts it before anything else, so that the start is not part of the stretch where the group is made while the
// sandbox's child builds its root, both competing for the kernel's per-CPU allocator.
class Reaper {
 public:
  static StatusOr<std::unique_ptr<Reaper>> Start();
  static StatusOr<std::unique_ptr<Reaper>> Start(const ReaperPlan& plan);  // Start() and Arm(plan)
  // Sends the plan; the reaper acts on the last one it received. Call it before the group's first mkdir: a plan
  // whose directories do not exist yet costs the reaper nothing, a group made before the plan could be left behind.
  Status Arm(const ReaperPlan& plan);
  ~Reaper();  // Dismiss()
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;
  // Tells the reaper the group is gone; it is reaped without blocking, now or on a later call.
  void Dismiss();
  // Leaves the cleanup to the reaper (nsbox failed to do it itself); it starts at once.
  void Abandon();
  pid_t pid() const { return pid_; }

 private:
  Reaper(pid_t pid, int socket_fd) : pid_(pid), socket_fd_(socket_fd) {}
  pid_t pid_;
  int socket_fd_;
};

// Cgroup::RemoveInBackground for both backends: hands a group not yet removed to its reaper (Abandon) and marks it
// removed, the reaper's from then on. False, and nothing done, when it is removed already or has no reaper.
bool LeaveRemovalToReaper(bool* removed, Reaper* reaper);

// Arms config.prestarted_reaper (taking it) when there is one, else starts a reaper with the plan.
Status ArmReaper(const CgroupConfig& config, const ReaperPlan& plan, std::unique_ptr<Reaper>* reaper);

// Backends (cgroup_v2.cc, cgroup_v1.cc). `parent` is the directory that holds the subtree.
StatusOr<std::unique_ptr<Cgroup>> CreateCgroupV2(const CgroupLimits& limits, const CgroupConfig& config,
                                                 const std::string& parent, bool own_cgroup);
Status CheckCgroupV2(const CgroupConfig& config, const std::string& parent);
void SweepStaleV2(const std::string& parent, const CgroupConfig& config);

struct V1Dirs {  // controller -> the directory that holds the subtree in that controller's hierarchy
  std::string memory, pids, cpu, cpuacct;  // cpu and cpuacct are the same when co-mounted
  std::string freezer;                     // empty when there is no freezer hierarchy
};
StatusOr<std::unique_ptr<Cgroup>> CreateCgroupV1(const CgroupLimits& limits, const CgroupConfig& config,
                                                 const V1Dirs& parents);
void SweepStaleV1(const V1Dirs& parents, const CgroupConfig& config);

// --- template definition ---
template <typename Prepare>
Status MakeGroupDir(const std::string& subtree_dir, const std::string& group_dir, const CgroupConfig& config,
                    Prepare prepare_subtree) {
  Status last;
  for (int attempt = 0; attempt < 50; ++attempt) {
    bool created = false;
    int err = 0;
    last = MakeDir(subtree_dir, config, &created, &err);
    if (!last.ok()) return last;
    last = MakeDir(group_dir, config, &created, &err);
    if (last.ok()) {
      if (!created) return Status::Error("mkdir(" + group_dir + "): exists already (a name clash)");
      return prepare_subtree();
    }
    if (err != ENOENT) return last;  // ENOENT: the subtree went away under us; start over
  }
  return last;
}

}  // namespace nsbox::cgroup_internal

namespace nsbox {

struct PrestartedReaper {
  std::unique_ptr<cgroup_internal::Reaper> reaper;  // dismissed, unarmed, when it was never taken
};

}  // namespace nsbox
