// `nsbox batch`'s line files: JOBS.jsonl read line by line with a cap on a line's size, the keys of the results
// already in --output (a resume), and the count of jobs for the progress line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "sandbox/base/status.h"

namespace nsbox::cli {

constexpr size_t kMaxJobLineBytes = 40 << 20;  // 16 MiB of code and 16 of stdin, escaped

// Lines of a descriptor, each at most max_bytes; a longer one is reported as too long (and skipped, or with
// keep_head, its first max_bytes given).
class LineReader {
 public:
  explicit LineReader(int fd, size_t max_bytes = kMaxJobLineBytes, bool keep_head = false)
      : fd_(fd), max_bytes_(max_bytes), keep_head_(keep_head) {}
  enum Got { kLine, kEnd, kMore };
  // The next line, without its newline; kEnd at the end of input. `too_long` when the line was longer than
  // max_bytes (its text is dropped, or all but its head). Without `read_more`, kMore when no whole line is buffered:
  // Fill() once the descriptor is readable (batch's loop polls it with its signals). An error is a failed read.
  StatusOr<Got> Next(std::string& line, bool& too_long, bool read_more = true);
  // One read(2): what is there (nothing when it would block), or the end of input.
  Status Fill();
  // The last line's length, without its newline, dropped text included.
  uint64_t last_line_bytes() const { return last_line_bytes_; }

 private:
  void Take(size_t end, std::string& line, bool& too_long);

  int fd_;
  size_t max_bytes_;
  bool keep_head_;
  std::string head_;  // with keep_head_: the first max_bytes_ of a line too long
  uint64_t dropped_ = 0, last_line_bytes_ = 0;
  std::string buffer_;  // buffer_[start_, size) is not taken yet; no newline in [start_, scanned_)
  size_t start_ = 0, scanned_ = 0;
  bool too_long_ = false;
  bool eof_ = false;
};

bool Blank(std::string_view line);

// The keys of the results already in FILE. A last line without its newline (a write cut short by a kill) is
// removed; any other line that is not a batch result refuses the resume.
StatusOr<std::set<std::string>> ReadDone(const std::string& path);

// Non-blank lines of a regular file, for the progress line's total; 0 (unknown) for a pipe.
uint64_t CountJobs(const std::string& path);

}  // namespace nsbox::cli
