// Directory trees, for the image store: a directory's entries, a tree removed without following symlinks or crossing
// into other file systems, a tree's disk usage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox::cli {

// Entry names of a directory, without "." and "..", sorted.
StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);
// Deletes a directory tree without following symlinks or crossing into other mounted filesystems.
Status RemoveTree(const std::string& path);
// Disk usage of a tree in bytes (allocated blocks, hard links counted once, same filesystem only).
StatusOr<uint64_t> DiskUsage(const std::string& path);

}  // namespace nsbox::cli
