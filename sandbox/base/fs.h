// Small file helpers: read and write whole files, with errors that name the path.
#pragma once

#include <string>
#include <string_view>

#include "sandbox/base/status.h"

namespace nsbox {

StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes = 64 << 20);
Status WriteFile(const std::string& path, std::string_view content, int flags_extra = 0, int mode = 0644);
// Writes content with a single write(2), as the kernel's control files (uid_map, cgroup files) want.
Status WriteControlFile(const std::string& path, std::string_view content);
bool PathExists(const std::string& path);

}  // namespace nsbox
