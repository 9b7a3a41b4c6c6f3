// Parsing and printing of sizes ("64K", "1M", "512M") and durations ("500ms", "10s", "2m").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "sandbox/base/status.h"

namespace nsbox {

// Binary multiples: K = 1024. A bare number is bytes. Rejects overflow, negatives and junk.
StatusOr<uint64_t> ParseSize(std::string_view text);
// Units ms, s, m, h; a bare number is seconds. Fractions allowed ("1.5s"). Zero is rejected.
StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);
std::string FormatSize(uint64_t bytes);

}  // namespace nsbox
