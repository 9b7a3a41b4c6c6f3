// OutputBuffer: keeps the head and the tail of one output stream within a byte budget, counting what was cut.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nsbox {

// The length of `text` without an unfinished multi-byte UTF-8 sequence at its end (of at most 3 bytes).
size_t CompleteUtf8Prefix(std::string_view text);

class OutputBuffer {
 public:
  // limit: bytes kept in all (half head, half tail). 0 keeps nothing but still counts.
  explicit OutputBuffer(uint64_t limit);
  void Append(std::string_view data);
  uint64_t total_bytes() const { return total_; }
  bool truncated() const { return total_ > limit_; }
  // The kept bytes; when cut, head + "\n[nsbox: N bytes cut]\n" + tail, where the cut falls between characters: a
  // multi-byte UTF-8 sequence the head ends in, or the tail starts in, is cut whole (and counted as cut).
  std::string Contents() const;
  // The head up to its last complete UTF-8 sequence. Contents() starts with these bytes, whatever comes after them,
  // so they may be passed on at once.
  std::string_view SettledHead() const { return std::string_view(head_).substr(0, CompleteUtf8Prefix(head_)); }
  // How many of a stream's total_bytes its Contents() kept: the contents less the cut marker, never more than the
  // total. For front ends that get the contents from elsewhere (a result's JSON) and report what was kept.
  static uint64_t KeptBytes(std::string_view contents, uint64_t total_bytes);

 private:
  uint64_t limit_;
  uint64_t head_limit_;
  uint64_t tail_limit_;
  uint64_t total_ = 0;
  std::string head_;
  std::string tail_;        // ring buffer of the last tail_limit_ bytes once full
  size_t tail_start_ = 0;   // index of the oldest byte in tail_ when it is full
};

}  // namespace nsbox
