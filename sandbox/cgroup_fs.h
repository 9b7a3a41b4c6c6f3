// Groups on the cgroup file system, for both backends: control files, group names, mkdir (kill and rmdir:
// cgroup_kill.h; child groups: cgroup_child.h).
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
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
// Whether this process's pid namespace is the host's (the initial one), where every creator's pid can be looked up.
bool InInitialPidNamespace();

// The creator's hold on its group: a shared flock on the group's directory (v2's, v1's memory one), kept open as long
// as the group is in use and dropped by the kernel however the holder ends. Unlike the creator's pid in the name, it
// is seen from any pid namespace: one nsbox in a container and another on the host, sharing a parent, tell each
// other's live groups from a dead creator's.
StatusOr<UniqueFd> HoldGroup(const std::string& dir);

// A group left by a dead creator, to be killed and removed: a name of nsbox's ("<pid>-<start>-<seq>", or with
// "-nested"), and its creator gone. Judged by the creator's pid when this process can look it up (the host's pid
// namespace, a name made there); else by no hold on `hold_dir` (or no such directory) and that directory at least
// `grace` old (a creator takes its hold within microseconds of the mkdir).
bool IsStaleGroup(const std::string& name, const std::string& hold_dir,
                  std::chrono::seconds grace = std::chrono::seconds(5));

// IsStaleGroup and IsStaleGroupName for the many groups of one sweep: the pid namespace is looked at once, and each
// creator once, however many of its groups (and hierarchies carrying them) there are. A sweep runs before every
// sandbox: looked at per group and hierarchy, 64 sandboxes at once cost each new one some 300 reads of /proc.
class StaleGroupJudge {
 public:
  explicit StaleGroupJudge(std::chrono::seconds grace = std::chrono::seconds(5));
  bool IsStale(const std::string& name, const std::string& hold_dir);
  bool IsStaleName(const std::string& name);

 private:
  uint64_t StartTime(pid_t pid);  // ProcessStartTime, looked up once per pid

  std::chrono::seconds grace_;
  bool initial_pid_namespace_;
  std::map<pid_t, uint64_t> start_times_;
};

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
