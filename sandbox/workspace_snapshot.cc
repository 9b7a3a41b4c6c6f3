// WorkspaceSnapshot: a bounded, link-free walk of a directory tree by descriptor, and the diff of two walks.
#include "sandbox/workspace_snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <memory>

#include <fmt/format.h>

#include "sandbox/base/unique_fd.h"

namespace nsbox {
namespace {

// What the walk holds back from a tree the sandbox's own code built: it runs in the session's supervisor, outside the
// sandbox's memory and CPU limits. Depth and max_bytes bound its memory (a path and a map entry kept per file, a
// prefix and a directory stream per level), the entry count its time.
constexpr size_t kMaxDepth = 64;

struct Walk {
  dev_t device;
  size_t max_entries;
  size_t max_bytes;
  size_t seen = 0;
  const std::string& ignored_prefix;
  WorkspaceSnapshot* out;
};

Status WalkDir(Walk& walk, int dir_fd, const std::string& prefix, size_t depth) {
  // A fresh descriptor of the same directory: fdopendir takes ownership and moves the offset.
  UniqueFd fd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return Status::Errno(fmt::format("openat({})", prefix.empty() ? "." : prefix));
  std::unique_ptr<DIR, int (*)(DIR*)> dir_stream(::fdopendir(fd.get()), ::closedir);
  if (!dir_stream) return Status::Errno("fdopendir");
  (void)fd.release();  // the stream owns it now
  DIR* dir = dir_stream.get();
  std::vector<std::string> subdirs;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    // Counted before it is left out: the sandbox could otherwise make the walk read a million hidden names.
    if (++walk.seen > walk.max_entries) {
      walk.out->truncated = true;
      break;
    }
    if (prefix.empty() && name.starts_with(walk.ignored_prefix)) continue;
    struct stat st;
    if (::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    if (st.st_dev != walk.device) continue;  // another mount: not the workspace's
    if (S_ISDIR(st.st_mode)) {
      subdirs.push_back(name);
    } else if (S_ISREG(st.st_mode)) {
      const size_t cost = prefix.size() + name.size() + kSnapshotEntryBytes;
      if (walk.out->bytes + cost > walk.max_bytes) {
        walk.out->truncated = true;
        break;
      }
      walk.out->bytes += cost;
      walk.out->files[prefix + name] =
          FileStamp{static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
                    st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec, st.st_ino};
    }
  }
  int dfd = ::dirfd(dir);
  if (!subdirs.empty() && depth + 1 > kMaxDepth) {
    walk.out->truncated = true;
    return OkStatus();
  }
  for (const auto& name : subdirs) {
    if (walk.out->truncated) break;
    UniqueFd sub(::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) continue;  // replaced or unreadable meanwhile
    NSBOX_RETURN_IF_ERROR(WalkDir(walk, sub.get(), prefix + name + "/", depth + 1));
  }
  return OkStatus();
}

}  // namespace

StatusOr<WorkspaceSnapshot> SnapshotWorkspace(int dir_fd, size_t max_entries, const std::string& ignored_prefix,
                                              size_t max_bytes) {
  struct stat root;
  if (::fstat(dir_fd, &root) != 0) return Status::Errno("fstat(workspace)");
  WorkspaceSnapshot snapshot;
  Walk walk{root.st_dev, max_entries, max_bytes, 0, ignored_prefix, &snapshot};
  NSBOX_RETURN_IF_ERROR(WalkDir(walk, dir_fd, "", 0));
  return snapshot;
}

std::vector<ChangedFile> ChangedFiles(const WorkspaceSnapshot& before, const WorkspaceSnapshot& after) {
  std::vector<ChangedFile> changed;
  for (const auto& [path, stamp] : after.files) {
    auto it = before.files.find(path);
    if (it == before.files.end() || !(it->second == stamp)) changed.push_back({path, stamp.size});
  }
  return changed;
}

}  // namespace nsbox
