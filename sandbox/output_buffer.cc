// OutputBuffer: head kept as it came, tail kept in a ring, so a flood costs constant memory.
#include "sandbox/output_buffer.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include <fmt/format.h>

namespace nsbox {

size_t CompleteUtf8Prefix(std::string_view text) {
  size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

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
  // Cut between characters, not inside one: the marker would otherwise stand between halves of a sequence, each
  // half shown as U+FFFD, a character the program never wrote.
  std::string_view head = SettledHead();
  size_t tail_skip = 0;
  while (tail_skip < 3 && tail_skip < tail.size() && (static_cast<unsigned char>(tail[tail_skip]) & 0xC0) == 0x80)
    ++tail_skip;
  uint64_t cut = total_ - head.size() - (tail.size() - tail_skip);
  return std::string(head) + CutMarker(cut) + tail.substr(tail_skip);
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
    // The head is the larger half, less at most 3 bytes of a character cut whole at either side.
    const uint64_t head = kept - kept / 2;
    if (at + 3 >= head && at <= head + 3 && contents.size() == kept + marker.size()) return kept;
    if (!first_marker_kept) first_marker_kept = kept;
  }
  return first_marker_kept.value_or(std::min<uint64_t>(contents.size(), total_bytes));
}

}  // namespace nsbox
