// Small file helpers: read and write whole files, with errors that name the path.
#include "sandbox/base/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "sandbox/base/unique_fd.h"

namespace nsbox {

StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: a FIFO put where a file is expected would block open() with no writer; it is refused below, and the
  // flag cleared for anything else.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) return Status::Errno(fmt::format("open({})", path));
  // Read straight into the string, sized by fstat where the file says its size (one byte more, so that the end of
  // file comes in the same buffer); a /proc file or a pipe says 0 and gets 4 KiB, grown as it comes. No bounce
  // through a stack buffer, whose fresh pages would each cost a page fault.
  struct stat st {};
  const bool stated = ::fstat(fd.get(), &st) == 0;
  if (stated && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
    return Status::Error(fmt::format("{}: a FIFO or socket, not a file", path));
  (void)::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);  // a terminal, say, is waited for
  size_t expected = stated && S_ISREG(st.st_mode) && st.st_size > 0
                        ? static_cast<size_t>(st.st_size) + 1 : 4096;
  std::string out;
  out.resize(std::min(max_bytes + 1, expected));
  size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      if (got > max_bytes) return Status::Error(fmt::format("{}: larger than {} bytes", path, max_bytes));
      out.resize(std::max<size_t>(4096, got * 2));
    }
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Errno(fmt::format("read({})", path));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) return Status::Error(fmt::format("{}: larger than {} bytes", path, max_bytes));
  out.resize(got);
  return out;
}

int WriteAll(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

Status WriteFile(const std::string& path, std::string_view content, int flags_extra, int mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | flags_extra, mode));
  if (!fd) return Status::Errno(fmt::format("open({})", path));
  if (int err = WriteAll(fd.get(), content); err != 0) return Status::Errno(fmt::format("write({})", path), err);
  return OkStatus();
}

Status WriteControlFile(const std::string& path, std::string_view content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return Status::Errno(fmt::format("open({})", path));
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    return Status::Errno(fmt::format("write({}, \"{}\")", path, content));
  return OkStatus();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::vector<NumberedLine> MeaningfulLines(std::string_view text) {
  std::vector<NumberedLine> lines;
  size_t number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    lines.push_back({number, std::string(line.substr(first))});
  }
  return lines;
}

bool SplitPathComponents(std::string_view path, std::vector<std::string_view>* parts) {
  parts->clear();
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part == "." || part == "..") return false;
    if (!part.empty()) parts->push_back(part);
    start = end + 1;
  }
  return true;
}

}  // namespace nsbox
