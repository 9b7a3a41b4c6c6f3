// The two cgroup backends as cgroup.cc sees them: detection's checks, group creation and the stale sweep.
#pragma once

#include <memory>
#include <string>

#include "sandbox/base/status.h"
#include "sandbox/cgroup.h"

namespace nsbox::cgroup_internal {

// The leaf a non-root nsbox moves itself into, so that its delegated cgroup can give controllers to children.
inline constexpr const char* kSupervisorLeaf = "supervisor";
// The CPU quota's period: the kernel's default for a new group (100 ms); only the quota is written.
inline constexpr uint64_t kCpuPeriodUs = 100000;

// v2 (cgroup_v2.cc). `parent` is the directory that holds the subtree.
StatusOr<std::unique_ptr<Cgroup>> CreateCgroupV2(const CgroupLimits& limits, const CgroupConfig& config,
                                                 const std::string& parent, bool own_cgroup);
Status CheckCgroupV2(const CgroupConfig& config, const std::string& parent);
void SweepStaleV2(const std::string& parent, const CgroupConfig& config);

// v1 (cgroup_v1.cc).
struct V1Dirs {  // controller -> the directory that holds the subtree in that controller's hierarchy
  std::string memory, pids, cpu, cpuacct;  // cpu and cpuacct are the same when co-mounted
  std::string freezer;                     // empty when there is no freezer hierarchy
};
StatusOr<std::unique_ptr<Cgroup>> CreateCgroupV1(const CgroupLimits& limits, const CgroupConfig& config,
                                                 const V1Dirs& parents);
void SweepStaleV1(const V1Dirs& parents, const CgroupConfig& config);

}  // namespace nsbox::cgroup_internal
