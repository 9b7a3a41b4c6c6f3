// Status and StatusOr: errors that carry the failing call, its arguments and errno, with context added on the way up.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace nsbox {

// What kind of failure a Status is, for a caller that must act on it (an HTTP status, a retry) without reading the
// message. kOther unless the one who made the error said otherwise; Errno() derives it from errno.
enum class ErrorKind {
  kOther,
  kNotFound,  // the named thing does not exist (ENOENT)
  kRefused,   // the request is not allowed: a path out of bounds, a link, the wrong file type, a bad name
  kTooLarge,  // over a size limit, or out of space (ENOSPC, EFBIG, EDQUOT)
  kConflict,  // the thing is in a state that does not allow it now (ENOTEMPTY, EBUSY: it changed meanwhile)
};

class Status {
 public:
  Status() = default;
  static Status Error(std::string message) { return Status(std::move(message)); }
  static Status Error(ErrorKind kind, std::string message) { return Status(std::move(message), kind); }
  // "call(args): strerror (ENAME)" for a failed system call.
  static Status Errno(std::string_view call, int err = errno);

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }
  ErrorKind kind() const { return kind_; }
  // Prepends context: "setting up /proc: mount(proc): Operation not permitted (EPERM)". The kind stays.
  Status Wrap(std::string_view context) const;

 private:
  // Every message is one printable line: control characters are escaped and echoes of huge inputs are cut.
  explicit Status(std::string message, ErrorKind kind = ErrorKind::kOther)
      : failed_(true), kind_(kind), message_(OneLine(std::move(message))) {}
  static std::string OneLine(std::string message);
  bool failed_ = false;
  ErrorKind kind_ = ErrorKind::kOther;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

template <typename T>
class StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : value_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(value_); }
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  Status status() const { return ok() ? Status() : std::get<Status>(value_); }

 private:
  std::variant<T, Status> value_;
};

// `text` as one printable line, as every Status message is: control characters escaped (\n, \t, \xNN), cut after
// 4 KiB. For words from outside (argv, a file, a library's message) printed to a terminal or a log.
std::string PrintableLine(std::string text);

// Name of an errno value ("ENOENT"), for messages that a user can search for.
std::string_view ErrnoName(int err);

}  // namespace nsbox

#define NSBOX_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::nsbox::Status nsbox_status_ = (expr); \
    if (!nsbox_status_.ok()) return nsbox_status_; \
  } while (0)
