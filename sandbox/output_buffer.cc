// OutputBuffer: head kept as it came, tail kept in a ring, so a flood costs constant memory.
#include "sandbox/output_buffer.h"

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

std::string OutputBuffer::Contents() const {
  std::string tail = tail_.size() < tail_limit_ ? tail_ : tail_.substr(tail_start_) + tail_.substr(0, tail_start_);
  if (!truncated()) return head_ + tail;
  uint64_t cut = total_ - head_.size() - tail.size();
  return head_ + fmt::format("\n[nsbox: {} bytes cut]\n", cut) + tail;
}

}  // namespace nsbox
