// DataDir: the environment override, the source tree of a build-tree binary, or the install location; each checked.
#include "nsbox_config.h"
#include "sandbox/base/data_dir.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "sandbox/base/fs.h"

namespace nsbox {

bool RunningFromBuildTree() {
  static const bool in_build_tree = [] {
    const std::string build_dir = NSBOX_BUILD_DIR;
    if (build_dir.empty()) return false;
    char exe[PATH_MAX], build[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || ::realpath(build_dir.c_str(), build) == nullptr) return false;
    std::string exe_path(exe, static_cast<size_t>(n));
    std::string prefix = std::string(build) + "/";
    return exe_path.compare(0, prefix.size(), prefix) == 0;
  }();
  return in_build_tree;
}

namespace {

// Whether a file owner the kernel shows as the overflow uid may be root outside this user namespace: only in a user
// namespace other than the initial one (where nsbox itself runs nested: inside its own sandbox, under `unshare -U`),
// and only when the overflow uid is not mapped here, so that no process of this namespace can own it.
bool UnmappedOwnerMayBeRoot(uid_t owner) {
  auto overflow = ReadFile("/proc/sys/fs/overflowuid", 64);
  auto map = ReadFile("/proc/self/uid_map", 1 << 16);
  if (!overflow.ok() || !map.ok() || std::to_string(owner) + "\n" != *overflow) return false;
  unsigned long inside = 0, outside = 0, count = 0;
  bool initial = std::sscanf(map->c_str(), "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 &&
                 outside == 0 && count == 4294967295UL;
  if (initial) return false;
  for (size_t start = 0; start < map->size();) {
    size_t end = map->find('\n', start);
    if (end == std::string::npos) end = map->size();
    if (std::sscanf(map->c_str() + start, "%lu %lu %lu", &inside, &outside, &count) == 3 && owner >= inside &&
        owner - inside < count)
      return false;  // the overflow uid is someone here
    start = end + 1;
  }
  return true;
}

}  // namespace

StatusOr<std::string> CheckTrustedPath(const std::string& path, uid_t uid) {
  char resolved_buf[PATH_MAX];
  if (::realpath(path.c_str(), resolved_buf) == nullptr) return Status::Errno(fmt::format("realpath({})", path));
  const std::string resolved = resolved_buf;
  // "/", then "/usr", "/usr/share", ... and the path itself.
  std::string component = "/";
  for (size_t pos = 0;;) {
    struct stat st;
    if (::lstat(component.c_str(), &st) != 0) return Status::Errno(fmt::format("lstat({})", component));
    bool last = component == resolved;
    bool owner_is_root = st.st_uid == 0 || (st.st_uid != uid && UnmappedOwnerMayBeRoot(st.st_uid));
    if (!owner_is_root && st.st_uid != uid)
      return Status::Error(fmt::format("{} is owned by uid {}, not by root or the running user (uid {}): chown it or "
                                       "install nsbox's data where only root can change it",
                                       component, st.st_uid, uid));
    bool shared_sticky = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) && owner_is_root && !last;
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !shared_sticky)
      return Status::Error(fmt::format("{} is writable by {} (mode {:04o}): chmod go-w {}", component,
                                       (st.st_mode & S_IWOTH) ? "others" : "its group", st.st_mode & 07777, component));
    if (last) return resolved;
    size_t next = resolved.find('/', pos + 1);
    component = resolved.substr(0, next);
    pos = next;
    if (next == std::string::npos) component = resolved;
  }
}

Status CheckTrustedEntries(const std::string& data_dir, uid_t uid) {
  // What nsbox reads below its data directory: a profile, the host view or a template anyone else could change is
  // code that runs unconfined, or as root (an image build's customize commands). Each is held to the directory's rule.
  static constexpr const char* kEntries[] = {"seccomp-profiles", "rootfs", "tools/mkrootfs", "docs/openapi.json"};
  std::vector<std::string> pending;
  for (const char* entry : kEntries) {
    const std::string path = data_dir + "/" + entry;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;  // missing: its reader says so
    auto checked = CheckTrustedPath(path, uid);     // the entry and every directory above it, links resolved
    if (!checked.ok()) return checked.status();
    if (S_ISDIR(st.st_mode)) pending.push_back(*checked);
  }
  while (!pending.empty()) {  // what the directories hold, at any depth
    const std::string dir = pending.back();
    pending.pop_back();
    std::error_code error;
    std::vector<std::string> names;
    for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end; it.increment(error))
      names.push_back(it->path().filename());
    if (error) return Status::Error(fmt::format("listing {}: {}", dir, error.message()));
    for (const auto& name : names) {
      const std::string path = dir + "/" + name;
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0) return Status::Errno(fmt::format("lstat({})", path));
      if (S_ISLNK(st.st_mode)) {  // judged by what it points to
        auto target = CheckTrustedPath(path, uid);
        if (!target.ok()) return target.status();
        continue;
      }
      const bool owner_is_root = st.st_uid == 0 || (st.st_uid != uid && UnmappedOwnerMayBeRoot(st.st_uid));
      if (!owner_is_root && st.st_uid != uid)
        return Status::Error(
            fmt::format("{} is owned by uid {}, not by root or the running user (uid {})", path, st.st_uid, uid));
      if (st.st_mode & (S_IWGRP | S_IWOTH))
        return Status::Error(fmt::format("{} is writable by {} (mode {:04o}): chmod go-w {}", path,
                                         (st.st_mode & S_IWOTH) ? "others" : "its group", st.st_mode & 07777, path));
      if (S_ISDIR(st.st_mode)) pending.push_back(path);
    }
  }
  return OkStatus();
}

StatusOr<std::string> ResolveDataDir() {
  std::string dir, role;
  if (const char* env = std::getenv("NSBOX_DATADIR"); env && *env) {
    dir = env;
    role = "$NSBOX_DATADIR";
  } else if (RunningFromBuildTree()) {
    dir = NSBOX_SOURCE_DIR;
    role = "the source tree of this build";
  } else {
    dir = NSBOX_DATADIR;
    role = "the installed data";
  }
  auto checked = CheckTrustedPath(dir, ::geteuid());
  if (!checked.ok()) return checked.status().Wrap(fmt::format("refusing the data directory {} ({})", dir, role));
  if (Status entries = CheckTrustedEntries(*checked, ::geteuid()); !entries.ok())
    return entries.Wrap(fmt::format("refusing the data directory {} ({})", dir, role));
  return checked;
}

std::string DataDirHint() {
  return fmt::format(
      "nsbox reads its data (seccomp-profiles/, rootfs/) from $NSBOX_DATADIR when set, else {}{}; set "
      "NSBOX_DATADIR to a directory that holds them (a source checkout, or /usr/share/nsbox of the "
      "package)",
      NSBOX_DATADIR, RunningFromBuildTree() ? " (this build-tree binary: " NSBOX_SOURCE_DIR ")" : "");
}

namespace {

[[noreturn]] void Refuse(const Status& status) {
  std::fprintf(stderr, "nsbox: %s\n", status.message().c_str());
  std::fflush(stderr);
  ::_exit(125);
}

}  // namespace

const std::string& DataDir() {
  static const std::string dir = [] {
    auto resolved = ResolveDataDir();
    if (!resolved.ok()) Refuse(Status::Error(fmt::format("{}; {}", resolved.status().message(), DataDirHint())));
    return *resolved;
  }();
  return dir;
}

std::string TrustedPathOrExit(const std::string& path, const char* what) {
  auto checked = CheckTrustedPath(path, ::geteuid());
  if (!checked.ok()) Refuse(checked.status().Wrap(fmt::format("refusing the {} {}", what, path)));
  return *checked;
}

}  // namespace nsbox
