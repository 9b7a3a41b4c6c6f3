// ProxyState: what the egress proxy, its accept thread and its connection threads share: the configuration, the
// stop eventfd, the byte counters and budget, and the refusals counted per host.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "sandbox/base/unique_fd.h"
#include "src/netproxy/egress_proxy.h"

namespace nsbox::netproxy {

// Shared by the proxy object, its accept thread and every connection thread, so that a connection that
// outlives Stop() (stuck in getaddrinfo) never touches freed memory.
struct ProxyState {
  ProxyConfig config;
  UniqueFd listen_fd;
  UniqueFd stop_fd;  // an eventfd: written once by Stop(), then readable for everyone, for good
  std::atomic<bool> stopping{false};

  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> bytes_charged{0};  // in + out, against byte_limit
  std::atomic<bool> limit_reached{false};

  mutable std::mutex mutex;
  std::condition_variable connections_done;
  int active_connections = 0;
  std::map<std::string, uint64_t> denied_hosts;

  // Takes up to `wanted` bytes from the budget; fewer (possibly 0) once the limit is near.
  uint64_t Charge(uint64_t wanted) {
    if (config.byte_limit == 0) return wanted;
    uint64_t used = bytes_charged.load();
    while (true) {
      uint64_t granted = used >= config.byte_limit ? 0 : std::min(wanted, config.byte_limit - used);
      if (bytes_charged.compare_exchange_weak(used, used + granted)) {
        if (granted < wanted) limit_reached = true;
        return granted;
      }
    }
  }

  void CountDenied(const std::string& host) {
    // A sandbox inventing host names must not grow this map without bound.
    constexpr size_t kMaxDistinctHosts = 1000;
    std::lock_guard lock(mutex);
    auto it = denied_hosts.find(host);
    if (it != denied_hosts.end()) {
      ++it->second;
    } else if (denied_hosts.size() < kMaxDistinctHosts) {
      denied_hosts[host] = 1;
    } else {
      ++denied_hosts["(other hosts)"];
    }
  }
};

}  // namespace nsbox::netproxy
