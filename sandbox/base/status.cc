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

std::string Status::OneLine(std::string message) {
  constexpr size_t kMaxBytes = 4096;
  bool clean = message.size() <= kMaxBytes;
  for (char c : message) clean = clean && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
  if (clean) return message;
  std::string out;
  for (char c : message) {
    auto u = static_cast<unsigned char>(c);
    if (u == '\n') out += "\\n";
    else if (u == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
    if (out.size() > kMaxBytes) {
      out.resize(kMaxBytes);
      out += "...";
      break;
    }
  }
  return out;
}

std::string PrintableLine(std::string text) { return Status::Error(std::move(text)).message(); }

Status Status::Errno(std::string_view call, int err) {
  ErrorKind kind = ErrorKind::kOther;
  switch (err) {
    case ENOENT:
      kind = ErrorKind::kNotFound;
      break;
    case ENOSPC:
    case EFBIG:
    case EDQUOT:
      kind = ErrorKind::kTooLarge;
      break;
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case EXDEV:
    case EACCES:  // a file's own modes (EPERM stays kOther: nsbox's own operations fail with it)
      kind = ErrorKind::kRefused;
      break;
    case ENOTEMPTY:
    case EBUSY:
      kind = ErrorKind::kConflict;
      break;
    default:
      break;
  }
  return Status(fmt::format("{}: {} ({})", call, std::strerror(err), ErrnoName(err)), kind);
}

Status Status::Wrap(std::string_view context) const {
  if (ok()) return *this;
  return Status(fmt::format("{}: {}", context, message_), kind_);
}

}  // namespace nsbox
