// PolicyBuilder: validates each setting as it is given; the first error is kept for TryBuild().
#include "sandbox/policy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "sandbox/base/fs.h"

namespace nsbox {
namespace {

// A bind destination as the mount plan uses it: absolute, no "." or ".." component, repeated and trailing slashes
// dropped ("/opt//x/" is "/opt/x"), so that two spellings of one place compare equal. The root itself is refused: a
// bind there would replace everything the sandbox's root holds, /proc and /dev included.
StatusOr<std::string> NormalizeBindDestination(const std::string& path) {
  if (path.empty() || path[0] != '/') return Status::Error(fmt::format("bind destination '{}' must be an absolute path", path));
  if (path.size() > 1024) return Status::Error("bind destination is longer than 1024 bytes");
  std::vector<std::string_view> parts;
  if (!SplitPathComponents(path, &parts))
    return Status::Error(fmt::format("bind destination '{}' must not contain '.' or '..' components", path));
  std::string normal;
  for (std::string_view part : parts) {
    normal += '/';
    normal += part;
  }
  if (normal.empty())
    return Status::Error("bind destination '/' would replace the sandbox's whole root: use --rootfs DIR for a root of your own");
  return normal;
}

Status CheckHostPath(const std::string& path, std::string_view what, bool want_dir) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::Errno(fmt::format("{} '{}'", what, path));
  if (want_dir && !S_ISDIR(st.st_mode)) return Status::Error(fmt::format("{} '{}' is not a directory", what, path));
  return OkStatus();
}

// A host path as the sandbox's mount code needs it: absolute, with no symlink left. The mounts are made after the
// pivot, from /oldroot, where a relative path ("ws") or an absolute symlink's target would not be found.
StatusOr<std::string> ResolveHostPath(const std::string& path, std::string_view what) {
  char resolved[PATH_MAX];
  if (!::realpath(path.c_str(), resolved)) return Status::Errno(fmt::format("{} '{}': realpath", what, path));
  return std::string(resolved);
}

}  // namespace

PolicyBuilder::PolicyBuilder() = default;

PolicyBuilder& PolicyBuilder::Fail(Status status) {
  if (error_.ok()) error_ = std::move(status);
  return *this;
}

PolicyBuilder& PolicyBuilder::SetRootfsDir(const std::string& dir) {
  if (Status s = CheckHostPath(dir, "rootfs", true); !s.ok()) return Fail(s);
  auto resolved = ResolveHostPath(dir, "rootfs");
  if (!resolved.ok()) return Fail(resolved.status());
  if (*resolved == "/") return Fail(Status::Error("rootfs '/' is the host's own root: use --rootfs host"));
  policy_.rootfs_dir_ = *resolved;
  return *this;
}

PolicyBuilder& PolicyBuilder::AddBind(const std::string& source, const std::string& destination, bool writable) {
  if (Status s = CheckHostPath(source, "bind source", false); !s.ok()) return Fail(s);
  auto resolved = ResolveHostPath(source, "bind source");
  if (!resolved.ok()) return Fail(resolved.status());
  auto normal = NormalizeBindDestination(destination);
  if (!normal.ok()) return Fail(normal.status());
  // Two binds at one place: only the last would be seen, so the first was a mistake.
  for (const BindMount& bind : policy_.binds_)
    if (bind.destination == *normal) return Fail(Status::Error(fmt::format("bind destination '{}' is given twice", *normal)));
  policy_.binds_.push_back({*resolved, *normal, writable});
  return *this;
}

PolicyBuilder& PolicyBuilder::AddReadOnlyBind(const std::string& source, const std::string& destination) {
  return AddBind(source, destination, false);
}

PolicyBuilder& PolicyBuilder::AddWritableBind(const std::string& source, const std::string& destination) {
  return AddBind(source, destination, true);
}

PolicyBuilder& PolicyBuilder::SetWorkspaceDir(const std::string& dir) {
  if (Status s = CheckHostPath(dir, "workspace", true); !s.ok()) return Fail(s);
  auto resolved = ResolveHostPath(dir, "workspace");
  if (!resolved.ok()) return Fail(resolved.status());
  policy_.workspace_dir_ = *resolved;
  return *this;
}

PolicyBuilder& PolicyBuilder::SetTmpfsSize(uint64_t bytes) {
  if (bytes < 4096) return Fail(Status::Error("tmpfs size must be at least 4K"));
  policy_.tmpfs_size_bytes_ = bytes;
  return *this;
}

PolicyBuilder& PolicyBuilder::SetHostname(const std::string& hostname) {
  if (hostname.empty() || hostname.size() > 63) return Fail(Status::Error("hostname must be 1 to 63 characters"));
  policy_.hostname_ = hostname;
  return *this;
}

PolicyBuilder& PolicyBuilder::DangerAllowHostNetwork() {
  policy_.network_ = NetworkMode::kHost;
  return *this;
}

PolicyBuilder& PolicyBuilder::SetHostIds(uint32_t uid, uint32_t gid) {
  policy_.host_uid_ = uid;
  policy_.host_gid_ = gid;
  return *this;
}

PolicyBuilder& PolicyBuilder::SetSeccompProgram(std::shared_ptr<const SeccompProgram> program) {
  policy_.seccomp_ = std::move(program);
  return *this;
}

PolicyBuilder& PolicyBuilder::SetCgroupLimits(const CgroupLimits& limits) {
  if (limits.memory_max_bytes < (4u << 20)) return Fail(Status::Error("memory limit must be at least 4M"));
  if (limits.pids_max < 2) return Fail(Status::Error("pids limit must be at least 2 (the sandbox's pid 1 and the program)"));
  // The kernel's own ceiling (PID_MAX_LIMIT on 64-bit): a pids.max above it is refused with EINVAL.
  if (limits.pids_max > kMaxPidsLimit)
    return Fail(Status::Error(fmt::format("pids limit must be at most {} (the kernel's limit)", kMaxPidsLimit)));
  if (!(limits.cpus > 0)) return Fail(Status::Error("cpus must be a number above 0"));
  if (limits.cpus > 4096) return Fail(Status::Error("cpus must be at most 4096"));
  policy_.cgroup_limits_ = limits;
  return *this;
}

PolicyBuilder& PolicyBuilder::DangerDisableCgroupLimits() {
  policy_.cgroup_limits_.reset();
  return *this;
}

StatusOr<Policy> PolicyBuilder::TryBuild() {
  if (!error_.ok()) return error_;
  return policy_;
}

}  // namespace nsbox
