// Small file helpers: read and write whole files, with errors that name the path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox {

StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes = 64 << 20);
Status WriteFile(const std::string& path, std::string_view content, int flags_extra = 0, int mode = 0644);
// Writes content with a single write(2), as the kernel's control files (uid_map, cgroup files) want.
Status WriteControlFile(const std::string& path, std::string_view content);
bool PathExists(const std::string& path);
// Writes all of data to fd, retrying short writes and EINTR. 0, or the errno of the write that failed (EIO for a
// write of nothing). Allocation-free and async-signal-safe: a cloned child may use it.
int WriteAll(int fd, std::string_view data);
// The non-empty components of a '/'-separated path ("/a//b/" gives a, b), viewing into path. False when a component
// is "." or "..": callers that compare or confine paths textually refuse those rather than resolve them.
bool SplitPathComponents(std::string_view path, std::vector<std::string_view>* parts);

// The lines of a settings file (--env-file, --token-file) that say something, with their numbers from 1: a line's
// trailing '\r' and leading blanks dropped, empty lines and '#' comments left out.
struct NumberedLine {
  size_t number;
  std::string text;
};
std::vector<NumberedLine> MeaningfulLines(std::string_view text);

}  // namespace nsbox
