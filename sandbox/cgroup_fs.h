// Groups on the cgroup file system, for both backends: control files, group names, mkdir, kill, rmdir, child groups.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"

namespace nsbox::cgroup_internal {

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

// Kills every process of a group and waits (bounded, about 5 s) until its cgroup.procs stays empty. "Raw": it
// allocates nothing and makes only async-signal-safe calls, so the reaper (a fork of a process that may have threads)
// runs it too. kill_file: cgroup.kill (v2, written once; falls back to SIGKILL per pid when the kernel lacks it);
// freezer_state: v1 freezer.state (freeze, kill, thaw, so nothing forks between reading the list and killing it);
// either may be null. Returns 0, or the errno of the failing step with *failed_call naming it.
int RawKillGroup(const char* kill_file, const char* procs_file, const char* freezer_state, const char** failed_call);
// rmdir, waiting out EBUSY while killed processes finish exiting (bounded), and removing the empty groups below
// (an exec's group in a session) that keep it busy; allocation-free and async-signal-safe. Returns 0 or errno; ENOENT
// is 0.
int RawRemoveDir(const char* dir);

// A CgroupChild for both backends: makes <parent>/<name> and opens its join_file ("tasks" on v1, "cgroup.procs" on
// v2) into join.fds[slot] (slot == join.count: appended), the sandbox's join with the parent's descriptor replaced.
// kill_file: v2's cgroup.kill; freezer: the child is in a v1 freezer hierarchy.
// memory: the child's own memory limit (limit 0: none). v1: a group <memory.parent>/<name> in the memory hierarchy,
// limited by memory.limit_in_bytes (and memory.memsw.limit_in_bytes when swap is accounted: no swap for the step),
// whose tasks file takes join.fds[memory.slot]. mkdir_hook: CgroupConfig::fake_fs_mkdir_hook (tests), after each mkdir.
// v2 (memory.parent empty): memory.max (and memory.swap.max 0) in the child's own directory.
struct ChildMemory {
  uint64_t limit = 0;
  std::string parent;
  int slot = -1;
  bool memsw = false;
};
StatusOr<std::unique_ptr<CgroupChild>> MakeCgroupChild(const std::string& parent, const std::string& name,
                                                       const char* join_file, CgroupSelfJoin join, int slot,
                                                       bool kill_file, bool freezer, const ChildMemory& memory = {},
                                                       const std::function<void(const std::string&)>& mkdir_hook = {});

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
