// Directory trees (file_tree.h): a directory's entries, a tree removed by descriptor, a tree's disk usage.
#include "src/cli/file_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "sandbox/base/unique_fd.h"

namespace nsbox::cli {
namespace {

// nftw(3) has no user pointer; these hold one walk's state (the CLI is single-threaded).
uint64_t g_walk_bytes = 0;
std::set<std::pair<dev_t, ino_t>> g_walk_seen;

int CountEntry(const char*, const struct stat* st, int type, struct FTW*) {
  if (type == FTW_NS) return 0;
  if (st->st_nlink > 1 && !S_ISDIR(st->st_mode) && !g_walk_seen.insert({st->st_dev, st->st_ino}).second) return 0;
  g_walk_bytes += static_cast<uint64_t>(st->st_blocks) * 512;
  return 0;
}

// One directory of a removal in progress: its name in its parent and the subdirectories still to remove.
struct RemovalLevel {
  std::string name;
  std::vector<std::string> subdirs;
};

// Unlinks the entries of `dir` that are not directories and returns the names of those that are (on `device`; a
// directory of another file system is left, so that its parent's rmdir fails).
StatusOr<std::vector<std::string>> UnlinkFilesIn(int dir, dev_t device, const std::string& shown) {
  int copy = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return Status::Errno("dup");
  DIR* stream = ::fdopendir(copy);
  if (!stream) {
    ::close(copy);
    return Status::Errno(fmt::format("opendir({})", shown));
  }
  std::vector<std::string> names, subdirs;
  while (struct dirent* e = ::readdir(stream))
    if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..") names.emplace_back(e->d_name);
  ::closedir(stream);
  for (const auto& name : names) {
    struct stat st;
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return Status::Errno(fmt::format("stat({}/{})", shown, name));
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev == device) subdirs.push_back(name);
    } else if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) {
      return Status::Errno(fmt::format("unlink({}/{})", shown, name));
    }
  }
  return subdirs;
}

}  // namespace

StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return Status::Errno(fmt::format("opendir({})", path));
  std::vector<std::string> names;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

Status RemoveTree(const std::string& path) {
  struct stat top;
  if (::lstat(path.c_str(), &top) != 0)
    return errno == ENOENT ? OkStatus() : Status::Errno(fmt::format("stat({})", path));
  if (!S_ISDIR(top.st_mode))
    return ::unlink(path.c_str()) == 0 || errno == ENOENT ? OkStatus() : Status::Errno(fmt::format("unlink({})", path));
  // By descriptor, one directory open at a time: an image's tree may be deeper than PATH_MAX allows a path to name,
  // or than the descriptors allow open at once. Going back up through ".." is safe: the tree is root's and held by
  // its remover's lock.
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return Status::Errno(fmt::format("open({})", path));
  auto shown = [&](size_t depth) { return depth == 0 ? path : fmt::format("{}/... ({} levels down)", path, depth); };
  std::vector<RemovalLevel> levels(1);
  auto subdirs = UnlinkFilesIn(dir.get(), top.st_dev, path);
  if (!subdirs.ok()) return subdirs.status();
  levels.back().subdirs = std::move(*subdirs);
  while (true) {
    RemovalLevel& level = levels.back();
    if (!level.subdirs.empty()) {
      std::string name = std::move(level.subdirs.back());
      level.subdirs.pop_back();
      UniqueFd sub(::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) {
        if (errno == ENOENT) continue;
        return Status::Errno(fmt::format("open({}/{})", shown(levels.size() - 1), name));
      }
      subdirs = UnlinkFilesIn(sub.get(), top.st_dev, shown(levels.size()));
      if (!subdirs.ok()) return subdirs.status();
      levels.push_back({std::move(name), std::move(*subdirs)});
      dir = std::move(sub);
      continue;
    }
    if (levels.size() == 1) break;
    UniqueFd parent(::openat(dir.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!parent) return Status::Errno(fmt::format("open({}/..)", shown(levels.size() - 1)));
    if (::unlinkat(parent.get(), level.name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      return Status::Errno(fmt::format("rmdir({}/{})", shown(levels.size() - 2), level.name));
    levels.pop_back();
    dir = std::move(parent);
  }
  dir.reset();
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return Status::Errno(fmt::format("rmdir({})", path));
  return OkStatus();
}

StatusOr<uint64_t> DiskUsage(const std::string& path) {
  g_walk_bytes = 0;
  g_walk_seen.clear();
  if (::nftw(path.c_str(), CountEntry, 64, FTW_PHYS | FTW_MOUNT) != 0)
    return Status::Errno(fmt::format("nftw({})", path));
  g_walk_seen.clear();
  return g_walk_bytes;
}

}  // namespace nsbox::cli
