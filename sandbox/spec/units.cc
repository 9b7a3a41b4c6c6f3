// Parsing and printing of sizes and durations, strict about what it accepts.
#include "sandbox/spec/units.h"

#include <cctype>
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace nsbox {
namespace {

// Splits "12.5ms" into 12.5 and "ms"; false when the number part is missing or malformed.
bool SplitNumber(std::string_view text, double& number, std::string& unit) {
  size_t i = 0;
  bool digits = false, dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || (text[i] == '.' && !dot))) {
    if (text[i] == '.') dot = true; else digits = true;
    ++i;
  }
  if (!digits || i > 32) return false;
  number = std::stod(std::string(text.substr(0, i)));
  unit.clear();
  for (char c : text.substr(i)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return true;
}

// The unit as the user wrote it: SplitNumber lower-cases it, and it is always the text's end.
std::string_view AsGiven(std::string_view text, const std::string& unit) {
  return text.substr(text.size() - std::min(unit.size(), text.size()));
}

}  // namespace

StatusOr<uint64_t> ParseSize(std::string_view text) {
  double number;
  std::string unit;
  if (!SplitNumber(text, number, unit))
    return Status::Error(
        fmt::format("invalid size '{}': expected a number with an optional unit K, M, G (e.g. 64K, 1M)", text));
  double multiplier;
  if (unit.empty() || unit == "b") multiplier = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") multiplier = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") multiplier = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") multiplier = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") multiplier = 1024.0 * 1024 * 1024 * 1024;
  else return Status::Error(fmt::format("invalid size '{}': unknown unit '{}' (use K, M, G or T)", text,
                                        AsGiven(text, unit)));
  double bytes = std::floor(number * multiplier);
  if (bytes >= 9.0e18) return Status::Error(fmt::format("invalid size '{}': too large", text));
  return static_cast<uint64_t>(bytes);
}

StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  double number;
  std::string unit;
  if (!SplitNumber(text, number, unit))
    return Status::Error(fmt::format(
        "invalid duration '{}': expected a number with a unit ms, s (the default), m or h (e.g. 500ms, 10s, 2m)",
        text));
  double ms;
  if (unit == "ms") ms = number;
  else if (unit.empty() || unit == "s") ms = number * 1000;
  else if (unit == "m" || unit == "min") ms = number * 60'000;
  else if (unit == "h") ms = number * 3'600'000;
  else return Status::Error(fmt::format("invalid duration '{}': unknown unit '{}' (use ms, s, m or h)", text,
                                        AsGiven(text, unit)));
  if (ms > 1.0e12) return Status::Error(fmt::format("invalid duration '{}': too long", text));
  if (ms < 1) return Status::Error(fmt::format("invalid duration '{}': must be at least 1ms", text));
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

std::string FormatSize(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "K", "M", "G", "T"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit < 4 && std::fmod(value, 1024) == 0) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{}{}", static_cast<uint64_t>(value), unit == 0 ? "" : kUnits[unit]);
}

}  // namespace nsbox
