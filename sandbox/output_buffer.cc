// OutputBuffer: head kept as it came, tail kept in a ring, so a flood costs constant memory.
#include "sandbox/output_buffer.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include <fmt/format.h>

namespace nsbox {

OutputBuffer::OutputBuffer(uint64_t limit)
    : limit_(limit), head_limit_(limit - limit / 2), tail_limit_(limit / 2) {}

void OutputBuffer::Append(std::string_view data) {
  total_ += data.size();
  if (head_.size() < head_limit_) {
    size_t take = std::min<size_t>(data.size(), head_limit_ - head_.size());
    head_.append(data.substr(0, take));
    data.remove_prefix(take);
  }
  if (tail_limit_ == 0 || data.empty()) return;
  if (data.size() >= tail_limit_) {
    tail_.assign(data.substr(data.size() - tail_limit_));
    tail_start_ = 0;
    return;
  }
  if (tail_.size() < tail_limit_) {
    size_t take = std::min<size_t>(data.size(), tail_limit_ - tail_.size());
    tail_.append(data.substr(0, take));
    data.remove_prefix(take);
  }
  // Ring full: overwrite the oldest bytes.
  while (!data.empty()) {
    size_t take = std::min<size_t>(data.size(), tail_limit_ - tail_start_);
    tail_.replace(tail_start_, take, data.substr(0, take));
    tail_start_ = (tail_start_ + take) % tail_limit_;
    data.remove_prefix(take);
  }
}

namespace {

std::string CutMarker(uint64_t cut) { return fmt::format("\n[nsbox: {} bytes cut]\n", cut); }

}  // namespace

std::string OutputBuffer::Contents() const {
  std::string tail = tail_.size() < tail_limit_ ? tail_ : tail_.substr(tail_start_) + tail_.substr(0, tail_start_);
  if (!truncated()) return head_ + tail;
  uint64_t cut = total_ - head_.size() - tail.size();
  return head_ + CutMarker(cut) + tail;
}

uint64_t OutputBuffer::KeptBytes(std::string_view contents, uint64_t total_bytes) {
  // The marker of a cut stream sits after the head, which is the larger half of what was kept; the program's own
  // output may hold text that looks like a marker, but not at that place with that count. Contents whose invalid
  // UTF-8 was replaced on the way (a result's JSON) have moved: then the first well-formed marker counts.
  constexpr std::string_view kOpen = "\n[nsbox: ";
  std::optional<uint64_t> first_marker_kept;
  for (size_t at = contents.find(kOpen); at != std::string_view::npos; at = contents.find(kOpen, at + 1)) {
    std::string_view digits = contents.substr(at + kOpen.size());
    uint64_t cut = 0;
    if (std::from_chars(digits.data(), digits.data() + digits.size(), cut).ec != std::errc() || cut > total_bytes)
      continue;
    std::string marker = CutMarker(cut);
    if (contents.substr(at, marker.size()) != marker) continue;
    uint64_t kept = total_bytes - cut;
    if (at == kept - kept / 2 && contents.size() == kept + marker.size()) return kept;
    if (!first_marker_kept) first_marker_kept = kept;
  }
  return first_marker_kept.value_or(std::min<uint64_t>(contents.size(), total_bytes));
}

}  // namespace nsbox
