// Status and StatusOr: the error messages, errno names included.
#include "sandbox/base/status.h"

#include <cstring>

#include <fmt/format.h>

namespace nsbox {

std::string_view ErrnoName(int err) {
  // strerrorname_np is glibc >= 2.32; Debian 12 has 2.36.
  const char* name = strerrorname_np(err);
  return name ? name : "E?";
}

Status Status::Errno(std::string_view call, int err) {
  return Status(fmt::format("{}: {} ({})", call, std::strerror(err), ErrnoName(err)));
}

Status Status::Wrap(std::string_view context) const {
  if (ok()) return *this;
  return Status(fmt::format("{}: {}", context, message_));
}

}  // namespace nsbox
