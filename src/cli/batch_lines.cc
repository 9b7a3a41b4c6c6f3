// `nsbox batch`'s line files (batch_lines.h).
#include "src/cli/batch_lines.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "sandbox/base/unique_fd.h"
#include "src/cli/batch_job.h"

namespace nsbox::cli {

StatusOr<LineReader::Got> LineReader::Next(std::string& line, bool& too_long, bool read_more) {
  for (;;) {
    const size_t newline = buffer_.find('\n', scanned_);
    if (newline != std::string::npos) {
      Take(newline, line, too_long);
      return kLine;
    }
    scanned_ = buffer_.size();
    if (buffer_.size() - start_ > max_bytes_) {  // drop the text, keep looking for the line's end
      if (keep_head_ && !too_long_) head_ = buffer_.substr(start_, max_bytes_);
      dropped_ += buffer_.size() - start_;
      too_long_ = true;
      buffer_.clear();
      start_ = scanned_ = 0;
    }
    if (eof_) {
      if (buffer_.size() == start_ && !too_long_) return kEnd;
      Take(buffer_.size(), line, too_long);  // a last line without its newline
      return kLine;
    }
    if (!read_more) return kMore;
    NSBOX_RETURN_IF_ERROR(Fill());
  }
}

Status LineReader::Fill() {
  if (start_ > 0) {
    buffer_.erase(0, start_);
    scanned_ -= start_;
    start_ = 0;
  }
  char chunk[1 << 16];
  const ssize_t n = ::read(fd_, chunk, sizeof chunk);
  if (n < 0) return errno == EINTR || errno == EAGAIN ? OkStatus() : Status::Errno("read(JOBS)");
  if (n == 0) eof_ = true;
  buffer_.append(chunk, static_cast<size_t>(n));
  return OkStatus();
}

void LineReader::Take(size_t end, std::string& line, bool& too_long) {
  too_long = too_long_;
  last_line_bytes_ = dropped_ + (end - start_);
  dropped_ = 0;
  if (too_long_)
    line = keep_head_ ? std::move(head_) : std::string();
  else
    line.assign(buffer_.substr(start_, end - start_));
  head_.clear();
  start_ = scanned_ = std::min(end + 1, buffer_.size());
  too_long_ = false;
}

bool Blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

StatusOr<std::set<std::string>> ReadDone(const std::string& path) {
  std::set<std::string> done;
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return done;
    return Status::Errno(fmt::format("--output: open({})", path));
  }
  struct stat before {};
  if (::fstat(fd.get(), &before) != 0) return Status::Errno(fmt::format("--output: fstat({})", path));
  if (!S_ISREG(before.st_mode))  // a device or FIFO can be neither resumed from nor appended to safely
    return Status::Error(fmt::format("--output {}: not a regular file", path));
  // A result line may be hundreds of megabytes (output kept, escaped); its key comes first, within a job line's size.
  LineReader reader(fd.get(), kMaxJobLineBytes, true);
  std::string line;
  bool too_long = false;
  uint64_t number = 0, complete_bytes = 0, total_bytes = 0;
  for (;;) {
    auto more = reader.Next(line, too_long);
    if (!more.ok()) return more.status().Wrap("--output");
    if (*more == LineReader::kEnd) break;
    ++number;
    total_bytes += reader.last_line_bytes() + 1;
    // The last line without its newline was cut short, even when what was written parses: its job runs again.
    if (total_bytes > static_cast<uint64_t>(before.st_size)) break;
    auto key = ResultLineKey(line);
    if (!key.ok()) return key.status().Wrap(fmt::format("--output {}: line {}", path, number));
    done.insert(*key);
    complete_bytes = total_bytes;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && static_cast<uint64_t>(st.st_size) > complete_bytes &&
      ::ftruncate(fd.get(), static_cast<off_t>(complete_bytes)) != 0)
    return Status::Errno(fmt::format("--output: ftruncate({}) of a cut last line", path));
  return done;
}

uint64_t CountJobs(const std::string& path) {
  struct stat st {};
  if (path == "-" || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return 0;
  LineReader reader(fd.get());
  std::string line;
  bool too_long = false;
  uint64_t count = 0;
  for (;;) {
    auto more = reader.Next(line, too_long);
    if (!more.ok() || *more == LineReader::kEnd) return count;
    if (too_long || !Blank(line)) ++count;
  }
}

}  // namespace nsbox::cli
