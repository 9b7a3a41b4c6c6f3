// WorkspaceSnapshot: the regular files under a directory (size, times, inode), and what changed between two snapshots.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox {

struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  bool operator==(const FileStamp&) const = default;
};

// The memory a snapshot may hold by default: its paths, and kSnapshotEntryBytes for each file's map entry.
inline constexpr size_t kMaxSnapshotBytes = 16 << 20;
inline constexpr size_t kSnapshotEntryBytes = 96;

struct WorkspaceSnapshot {
  std::map<std::string, FileStamp> files;  // path relative to the root, e.g. "out/result.csv"
  size_t bytes = 0;                        // what it holds, counted as max_bytes counts it
  // More than max_entries entries, directories deeper than 64 levels or max_bytes: the rest was not looked at.
  bool truncated = false;
};

struct ChangedFile {
  std::string path;  // relative to the root
  uint64_t size = 0;
};

// Walks the tree under `dir_fd` without following links or leaving its mount. Names at its top starting with
// `ignored_prefix` (nsbox's own temporary files) are left out. Two walks with the same bounds over the same tree stop
// at the same place.
StatusOr<WorkspaceSnapshot> SnapshotWorkspace(int dir_fd, size_t max_entries = 20000,
                                              const std::string& ignored_prefix = ".nsbox-",
                                              size_t max_bytes = kMaxSnapshotBytes);
// Files that are new in `after` or differ from `before`, sorted by path.
std::vector<ChangedFile> ChangedFiles(const WorkspaceSnapshot& before, const WorkspaceSnapshot& after);

}  // namespace nsbox
