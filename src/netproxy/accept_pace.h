// AcceptPace: a token bucket on the proxy's new connections, so that a sandbox cannot make nsbox spend host CPU
// (outside the sandbox's cgroup) on an endless stream of short connections.
#pragma once

#include <algorithm>
#include <chrono>

namespace nsbox::netproxy {

// Up to `per_second` connections at once after a quiet second, then `per_second` a second. A connection over the
// pace is not refused: the accept waits, and the kernel's backlog holds it meanwhile.
class AcceptPace {
 public:
  using Clock = std::chrono::steady_clock;

  AcceptPace(int per_second, Clock::time_point now)
      : per_second_(std::max(per_second, 1)), tokens_(per_second_), last_(now) {}

  // How long to wait before the next accept: zero when one may be taken now.
  std::chrono::milliseconds WaitBeforeNext(Clock::time_point now) {
    Refill(now);
    if (tokens_ >= 1) return std::chrono::milliseconds(0);
    double seconds = (1 - tokens_) / per_second_;
    return std::chrono::milliseconds(static_cast<long>(seconds * 1000) + 1);
  }

  // One connection accepted.
  void Take(Clock::time_point now) {
    Refill(now);
    tokens_ = std::max(tokens_ - 1, 0.0);
  }

 private:
  void Refill(Clock::time_point now) {
    if (now <= last_) return;
    double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min<double>(per_second_, tokens_ + elapsed * per_second_);
    last_ = now;
  }

  double per_second_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace nsbox::netproxy
