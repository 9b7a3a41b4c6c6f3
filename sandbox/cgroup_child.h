// An exec's group inside a sandbox's group (CgroupChild), for both backends: its mkdir, join and memory limit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sandbox/base/status.h"
#include "sandbox/cgroup.h"

namespace nsbox::cgroup_internal {

// The child's own memory limit (limit 0: none). v1: a group <parent>/<name> in the memory hierarchy, limited by
// memory.limit_in_bytes (and memory.memsw.limit_in_bytes when swap is accounted: no swap for the step), whose tasks
// file takes join.fds[slot]. v2 (parent empty): memory.max (and memory.swap.max 0) in the child's own directory.
struct ChildMemory {
  uint64_t limit = 0;
  std::string parent;
  int slot = -1;
  bool memsw = false;
};

// What MakeCgroupChild makes: <parent>/<name>, whose join_file ("tasks" on v1, "cgroup.procs" on v2) it opens into
// join.fds[slot] (slot == join.count: appended), the sandbox's join with the parent's descriptor replaced.
struct ChildGroupOptions {
  std::string parent;
  std::string name;
  const char* join_file = "";
  CgroupSelfJoin join;
  int slot = 0;
  bool kill_file = false;  // v2's cgroup.kill
  bool freezer = false;    // the child is in a v1 freezer hierarchy
  ChildMemory memory;
  std::function<void(const std::string&)> mkdir_hook;  // CgroupConfig::fake_fs_mkdir_hook (tests), after each mkdir
};

// A CgroupChild for both backends, as options says.
StatusOr<std::unique_ptr<CgroupChild>> MakeCgroupChild(const ChildGroupOptions& options);

}  // namespace nsbox::cgroup_internal
