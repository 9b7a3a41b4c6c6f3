// PolicyBuilder: validates each setting as it is given; the first error is kept for TryBuild().
#include "sandbox/policy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/bind_path.h"
#include "sandbox/seccomp.h"
#include "sandbox/spec/mount_plan.h"

namespace nsbox {
namespace {

// A bind destination as the mount plan uses it: absolute, no "." or ".." component, repeated and trailing slashes
// dropped ("/opt//x/" is "/opt/x"), so that two spellings of one place compare equal. The root itself is refused: a
// bind there would replace everything the sandbox's root holds, /proc and /dev included.
StatusOr<std::string> NormalizeBindDestination(const std::string& path) {
  if (path.empty() || path[0] != '/')
    return Status::Error(fmt::format("bind destination '{}' must be an absolute path", path));
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
    return Status::Error("bind destination '/' would replace the sandbox's whole root: give a root of your own "
                         "(PolicyBuilder::SetRootfsDir)");
  // The sandbox's kernel filesystems are nsbox's: its own /proc (with its masks), its /dev, and no /sys. A bind may
  // go below /dev (/dev/shm), not over it, and nowhere in /proc or /sys.
  for (std::string_view kernel_dir : {"/proc", "/sys", "/dev"}) {
    if (normal == kernel_dir || (kernel_dir != "/dev" && normal.starts_with(std::string(kernel_dir) + "/")))
      return Status::Error(
          fmt::format("bind destination '{}' would cover the sandbox's own {}: refused", path, kernel_dir));
  }
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

// mountinfo's octal escapes (\040 for a space) undone.
std::string UnescapeMountPath(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    auto octal = [&](size_t k) { return i + k < field.size() && field[i + k] >= '0' && field[i + k] <= '7'; };
    if (field[i] == '\\' && octal(1) && octal(2) && octal(3)) {
      out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

// A kernel filesystem mounted at or below the host path `dir` (a recursive bind would carry it in): its type and
// mount point, from the host's mountinfo. Only the host's administrator mounts there, never a sandbox, so reading
// it once in nsbox is enough.
std::optional<std::pair<std::string, std::string>> KernelMountBelow(const std::string& dir) {
  static const std::set<std::string> kKernelTypes = {
      "proc",     "sysfs",   "cgroup",  "cgroup2", "debugfs",  "tracefs",     "securityfs", "selinuxfs", "smackfs",
      "bpf",      "pstore",  "efivarfs", "devpts", "mqueue",   "nsfs",        "binfmt_misc", "configfs",  "fusectl",
      "devtmpfs"};
  auto text = ReadFile("/proc/self/mountinfo", 16 << 20);
  if (!text.ok()) return std::nullopt;
  std::string_view rest = *text;
  while (!rest.empty()) {
    size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS
    std::vector<std::string_view> fields;
    for (size_t pos = 0; pos <= line.size();) {
      size_t space = line.find(' ', pos);
      if (space == std::string_view::npos) space = line.size();
      fields.push_back(line.substr(pos, space - pos));
      pos = space + 1;
    }
    if (fields.size() < 7) continue;
    size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash + 1 >= fields.size()) continue;
    std::string type(fields[dash + 1]);
    if (!kKernelTypes.count(type)) continue;
    std::string point = UnescapeMountPath(fields[4]);
    if (point == dir || point.starts_with(dir == "/" ? dir : dir + "/")) return std::make_pair(type, point);
  }
  return std::nullopt;
}

// A bind source or workspace as the child will open it again (sandbox/bind_path.h): walked by descriptor from the
// host's root, following only links root made, refused when it is the host's root or on a kernel filesystem; the
// result is the path of what was opened, with no link left. The child repeats the walk and the test by descriptor:
// this one is here to refuse early, with the user's own words.
StatusOr<std::string> ResolveBindSource(const std::string& given, std::string_view what, bool want_dir) {
  std::string path = given;
  if (path.empty()) return Status::Error(fmt::format("{} must not be empty", what));
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (!::getcwd(cwd, sizeof cwd)) return Status::Errno(fmt::format("{} '{}': getcwd", what, given));
    path = std::string(cwd) + "/" + path;
  }
  UniqueFd root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return Status::Errno("open(/)");
  char bad_link[NAME_MAX + 1] = "";
  UniqueFd fd(OpenHostPath(root.get(), path.c_str(), bad_link, sizeof bad_link));
  if (!fd) {
    if (errno == ELOOP && bad_link[0])
      return Status::Error(fmt::format(
          "{} '{}': the symbolic link '{}' in it was not made by root, and nsbox follows only links that root owns in "
          "directories only root can write (a sandbox may have planted this one): give the path it points to",
          what, given, bad_link));
    return Status::Errno(fmt::format("{} '{}'", what, given));
  }
  if (const char* refusal = KernelFsBindRefusal(root.get(), fd.get()))
    return Status::Error(fmt::format("{} '{}' is refused: {}", what, given, refusal));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::Errno(fmt::format("{} '{}': fstat", what, given));
  if (want_dir && !S_ISDIR(st.st_mode)) return Status::Error(fmt::format("{} '{}' is not a directory", what, given));
  char resolved[PATH_MAX];
  std::string self = fmt::format("/proc/self/fd/{}", fd.get());
  ssize_t n = ::readlink(self.c_str(), resolved, sizeof resolved - 1);
  if (n <= 0) return Status::Errno(fmt::format("{} '{}': readlink({})", what, given, self));
  std::string result(resolved, static_cast<size_t>(n));
  if (result[0] != '/') return Status::Error(fmt::format("{} '{}' is not reachable from the host's root", what, given));
  if (S_ISDIR(st.st_mode)) {
    if (auto below = KernelMountBelow(result))
      return Status::Error(
          fmt::format("{} '{}' is refused: it holds a {} filesystem at {}, which the bind would carry in", what, given,
                      below->first, below->second));
  }
  return result;
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
  if (*resolved == "/")
    return Fail(Status::Error("rootfs '/' is the host's own root: leave the rootfs unset for the built-in host view"));
  policy_.rootfs_dir_ = *resolved;
  return *this;
}

PolicyBuilder& PolicyBuilder::SetHostViewFile(const std::string& path) {
  auto view = LoadHostView(path);
  if (!view.ok()) return Fail(view.status().Wrap("the host view"));
  policy_.host_view_ = std::make_shared<const HostView>(std::move(*view));
  return *this;
}

PolicyBuilder& PolicyBuilder::SetSeccompProfile(const std::string& name_or_file, const std::string& profiles_dir) {
  auto program = LoadSeccompProfile(name_or_file, profiles_dir);
  if (!program.ok()) return Fail(program.status().Wrap("the seccomp profile"));
  policy_.seccomp_ = std::move(*program);
  return *this;
}

PolicyBuilder& PolicyBuilder::AddBind(const std::string& source, const std::string& destination, bool writable) {
  auto resolved = ResolveBindSource(source, "bind source", false);
  if (!resolved.ok()) return Fail(resolved.status());
  // No destination: the source's real path, so that it does not pass through a link of the sandbox's root (a bind
  // destination follows none): --ro-bind /bin/x appears at /usr/bin/x, which the sandbox's /bin link shows.
  auto normal = NormalizeBindDestination(destination.empty() ? *resolved : destination);
  if (!normal.ok()) return Fail(normal.status());
  // Two binds at one place: only the last would be seen, so the first was a mistake.
  for (const BindMount& bind : policy_.binds_)
    if (bind.destination == *normal)
      return Fail(Status::Error(fmt::format("bind destination '{}' is given twice", *normal)));
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
  auto resolved = ResolveBindSource(dir, "workspace", true);
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
  // A name the program may print or put in a log as it is: letters, digits, '-' and '.', as a host name has.
  const bool plain = std::all_of(hostname.begin(), hostname.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
  });
  if (!plain || hostname.front() == '-')
    return Fail(Status::Error("hostname may hold only letters, digits, '-' and '.', and may not start with '-'"));
  policy_.hostname_ = hostname;
  return *this;
}

PolicyBuilder& PolicyBuilder::DangerAllowHostNetwork() {
  policy_.network_ = NetworkMode::kHost;
  return *this;
}

PolicyBuilder& PolicyBuilder::SetHostIds(uint32_t uid, uint32_t gid) {
  if (uid == 0 || gid == 0)
    return Fail(Status::Error(fmt::format("host ids {}:{}: the sandbox user must not be host root (uid or gid 0)",
                                          uid, gid)));
  policy_.host_uid_ = uid;
  policy_.host_gid_ = gid;
  return *this;
}

PolicyBuilder& PolicyBuilder::SetSeccompProgram(std::shared_ptr<const SeccompProgram> program) {
  policy_.seccomp_ = std::move(program);
  return *this;
}

PolicyBuilder& PolicyBuilder::SetCgroupLimits(const CgroupLimits& limits) {
  if (limits.memory_max_bytes < kMinMemoryLimitBytes) return Fail(Status::Error("memory limit must be at least 4M"));
  if (limits.pids_max < 2)
    return Fail(Status::Error("pids limit must be at least 2 (the sandbox's pid 1 and the program)"));
  // The kernel's own ceiling (PID_MAX_LIMIT on 64-bit): a pids.max above it is refused with EINVAL.
  if (limits.pids_max > kMaxPidsLimit)
    return Fail(Status::Error(fmt::format("pids limit must be at most {} (the kernel's limit)", kMaxPidsLimit)));
  if (limits.memory_swap_max_bytes && *limits.memory_swap_max_bytes > UINT64_MAX - limits.memory_max_bytes)
    return Fail(Status::Error(fmt::format("a swap limit of {} bytes: memory plus swap overflows",
                                          *limits.memory_swap_max_bytes)));
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
