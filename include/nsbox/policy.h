// Policy and PolicyBuilder: the immutable description of how a sandbox isolates its program.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nsbox/status.h"

namespace nsbox {

struct SeccompProgram;  // sandbox/seccomp.h
struct HostView;        // sandbox/spec/mount_plan.h

struct BindMount {
  std::string source;       // host path
  std::string destination;  // path inside the sandbox
  bool writable = false;
};

enum class NetworkMode { kNone, kHost };

// The most processes a pids limit may allow: the kernel's PID_MAX_LIMIT on 64-bit.
inline constexpr uint64_t kMaxPidsLimit = 4u << 20;
// The smallest memory limit a sandbox (or one step of it) is given: below it nothing starts, not even its pid 1.
inline constexpr uint64_t kMinMemoryLimitBytes = 4u << 20;

struct CgroupLimits {
  uint64_t memory_max_bytes = 512ull << 20;
  std::optional<uint64_t> memory_swap_max_bytes;  // unset: swap off
  uint64_t pids_max = 256;
  double cpus = 1.0;
};

class Policy {
 public:
  // "host" (the built-in read-only view of the host) or a prepared root directory.
  bool host_rootfs() const { return rootfs_dir_.empty(); }
  // What the host root shows of the host (SetHostViewFile); a run on the host root without one is a setup error.
  const HostView* host_view() const { return host_view_.get(); }
  const std::string& rootfs_dir() const { return rootfs_dir_; }
  const std::vector<BindMount>& binds() const { return binds_; }
  const std::string& workspace_dir() const { return workspace_dir_; }  // empty: fresh tmpfs
  uint64_t tmpfs_size_bytes() const { return tmpfs_size_bytes_; }
  NetworkMode network() const { return network_; }
  const std::string& hostname() const { return hostname_; }
  // The sandbox user inside, and the unprivileged host ids it maps to.
  uint32_t sandbox_uid() const { return sandbox_uid_; }
  uint32_t sandbox_gid() const { return sandbox_gid_; }
  uint32_t host_uid() const { return host_uid_; }
  uint32_t host_gid() const { return host_gid_; }
  // The same policy with other host ids (a leased pair, see sandbox/host_id_lease.h); both must not be 0.
  Policy WithHostIds(uint32_t uid, uint32_t gid) const {
    Policy copy = *this;
    copy.host_uid_ = uid;
    copy.host_gid_ = gid;
    return copy;
  }
  const std::shared_ptr<const SeccompProgram>& seccomp() const { return seccomp_; }
  const std::optional<CgroupLimits>& cgroup_limits() const { return cgroup_limits_; }
  bool cgroups_disabled() const { return !cgroup_limits_.has_value(); }

 private:
  friend class PolicyBuilder;
  std::string rootfs_dir_;
  std::shared_ptr<const HostView> host_view_;
  std::vector<BindMount> binds_;
  std::string workspace_dir_;
  uint64_t tmpfs_size_bytes_ = 256ull << 20;
  NetworkMode network_ = NetworkMode::kNone;
  std::string hostname_ = "nsbox";
  uint32_t sandbox_uid_ = 1000, sandbox_gid_ = 1000;
  uint32_t host_uid_ = 65534, host_gid_ = 65534;
  std::shared_ptr<const SeccompProgram> seccomp_;
  std::optional<CgroupLimits> cgroup_limits_ = CgroupLimits{};
};

// Fluent builder; the first error is sticky and surfaces once, at TryBuild().
class PolicyBuilder {
 public:
  PolicyBuilder();
  PolicyBuilder& SetRootfsDir(const std::string& dir);
  // The recipe of the built-in host root: which host directories it shows read-only (nsbox's is rootfs/host.json
  // in its data directory). Read here, once; needed unless SetRootfsDir gives a root of the caller's own.
  PolicyBuilder& SetHostViewFile(const std::string& path);
  // Builds the seccomp filter from a profile: "default", "strict" (both found in profiles_dir), or a Docker/OCI JSON
  // profile file. Without one (and without SetSeccompProgram) the program runs with no seccomp filter.
  PolicyBuilder& SetSeccompProfile(const std::string& name_or_file, const std::string& profiles_dir);
  // A host path bound into the sandbox; an empty destination is the source's real path (links resolved). A source
  // is opened following only links root made; a destination follows no link (sandbox/bind_path.h).
  PolicyBuilder& AddReadOnlyBind(const std::string& source, const std::string& destination);
  PolicyBuilder& AddWritableBind(const std::string& source, const std::string& destination);
  PolicyBuilder& SetWorkspaceDir(const std::string& dir);
  PolicyBuilder& SetTmpfsSize(uint64_t bytes);
  PolicyBuilder& SetHostname(const std::string& hostname);
  // Shares the host's network namespace: the program reaches everything the host reaches.
  PolicyBuilder& DangerAllowHostNetwork();
  PolicyBuilder& SetHostIds(uint32_t uid, uint32_t gid);
  PolicyBuilder& SetSeccompProgram(std::shared_ptr<const SeccompProgram> program);
  PolicyBuilder& SetCgroupLimits(const CgroupLimits& limits);
  // Runs with no memory, pids or CPU limits at all.
  PolicyBuilder& DangerDisableCgroupLimits();
  StatusOr<Policy> TryBuild();

 private:
  PolicyBuilder& Fail(Status status);
  PolicyBuilder& AddBind(const std::string& source, const std::string& destination, bool writable);
  Status error_;
  Policy policy_;
};

}  // namespace nsbox
