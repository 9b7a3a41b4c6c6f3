// The egress proxy's socket waits and byte moving (relay.h).
#include "src/netproxy/relay.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

namespace nsbox::netproxy {
namespace {

constexpr size_t kRelayChunk = 64 * 1024;

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// One direction of a relay: bytes read from `from`, not yet written to `to`.
struct Direction {
  std::string buffer;
  size_t offset = 0;
  // Bytes it may still take from its source: a plain HTTP request's body, and not a byte of what the client sends
  // behind it (a pipelined second request, whose Host the proxy would never check).
  uint64_t remaining = UINT64_MAX;
  bool source_eof = false;
  bool sink_shut = false;
  bool pending() const { return offset < buffer.size(); }
};

enum class IoResult { kOk, kEof, kBlocked, kError };

IoResult Fill(ProxyState& state, int from, Direction& direction, std::atomic<uint64_t>& counter, bool& capped) {
  const size_t chunk = static_cast<size_t>(std::min<uint64_t>(kRelayChunk, direction.remaining));
  direction.buffer.resize(chunk);
  direction.offset = 0;
  ssize_t got = recv(from, direction.buffer.data(), chunk, 0);
  if (got <= 0) {
    direction.buffer.clear();
    if (got == 0) return IoResult::kEof;
    return (errno == EINTR || WouldBlock(errno)) ? IoResult::kBlocked : IoResult::kError;
  }
  uint64_t granted = state.Charge(static_cast<uint64_t>(got));
  if (granted < static_cast<uint64_t>(got)) capped = true;
  direction.buffer.resize(granted);
  counter += granted;
  direction.remaining -= std::min<uint64_t>(direction.remaining, static_cast<uint64_t>(got));
  return IoResult::kOk;
}

IoResult Drain(int to, Direction& direction) {
  ssize_t sent =
      send(to, direction.buffer.data() + direction.offset, direction.buffer.size() - direction.offset, MSG_NOSIGNAL);
  if (sent < 0) return (errno == EINTR || WouldBlock(errno)) ? IoResult::kBlocked : IoResult::kError;
  direction.offset += static_cast<size_t>(sent);
  if (!direction.pending()) {
    direction.buffer.clear();
    direction.offset = 0;
  }
  return IoResult::kOk;
}

}  // namespace

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

WaitResult WaitFor(const ProxyState& state, int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd fds[2] = {{fd, events, 0}, {state.stop_fd.get(), POLLIN, 0}};
    int ready = poll(fds, 2, RemainingMs(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return WaitResult::kError;
    }
    if (fds[1].revents != 0) return WaitResult::kStopped;
    if (ready == 0) return WaitResult::kTimeout;
    return WaitResult::kReady;
  }
}

bool SendAll(const ProxyState& state, int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    ssize_t sent = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      data.remove_prefix(static_cast<size_t>(sent));
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && WouldBlock(errno)) {
      if (WaitFor(state, fd, POLLOUT, deadline) != WaitResult::kReady) return false;
      continue;
    }
    return false;
  }
  return true;
}

void LingerClose(const ProxyState& state, int client) {
  shutdown(client, SHUT_WR);
  Clock::time_point linger_until = Clock::now() + std::chrono::milliseconds(500);
  char discard[4096];
  for (size_t drained = 0; drained < (256u << 10);) {
    ssize_t got = recv(client, discard, sizeof discard, 0);
    if (got > 0) {
      drained += static_cast<size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && WouldBlock(errno) && WaitFor(state, client, POLLIN, linger_until) == WaitResult::kReady) {
      continue;
    }
    break;
  }
}

void Relay(ProxyState& state, int client, int upstream, std::string to_upstream, bool end_with_response,
           uint64_t client_bytes) {
  Direction up;    // client -> upstream
  Direction down;  // upstream -> client
  bool capped = false;
  uint64_t granted = state.Charge(to_upstream.size());
  if (granted < to_upstream.size()) capped = true;
  to_upstream.resize(granted);
  state.bytes_out += granted;
  up.buffer = std::move(to_upstream);
  up.remaining = client_bytes;

  while (true) {
    if (!up.pending() && up.source_eof && !up.sink_shut) {
      shutdown(upstream, SHUT_WR);
      up.sink_shut = true;
    }
    if (!down.pending() && down.source_eof && !down.sink_shut) {
      shutdown(client, SHUT_WR);
      down.sink_shut = true;
    }
    if (up.sink_shut && down.sink_shut) return;
    if (end_with_response && down.sink_shut) return;
    if (capped && !up.pending() && !down.pending()) return;

    short client_events = 0;
    short upstream_events = 0;
    if (!capped && !up.source_eof && !up.pending() && up.remaining > 0) client_events |= POLLIN;
    if (down.pending()) client_events |= POLLOUT;
    if (!capped && !down.source_eof && !down.pending()) upstream_events |= POLLIN;
    if (up.pending()) upstream_events |= POLLOUT;
    // A socket we want nothing from stays out of the poll set: its POLLHUP would otherwise wake us forever.
    pollfd fds[3] = {{client_events ? client : -1, client_events, 0},
                     {upstream_events ? upstream : -1, upstream_events, 0},
                     {state.stop_fd.get(), POLLIN, 0}};
    int timeout_ms = static_cast<int>(std::min<int64_t>(state.config.idle_timeout.count(), 1 << 30));
    int ready = poll(fds, 3, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || fds[2].revents != 0) return;  // error, idle, or stopping

    constexpr short kWake = POLLIN | POLLOUT | POLLHUP | POLLERR;
    if (fds[0].revents & kWake) {
      if (client_events & POLLIN) {
        IoResult r = Fill(state, client, up, state.bytes_out, capped);
        if (r == IoResult::kEof) up.source_eof = true;
        if (r == IoResult::kError) return;
      } else if (client_events & POLLOUT) {
        if (Drain(client, down) == IoResult::kError) return;
      }
      if ((client_events & POLLIN) && (client_events & POLLOUT) && down.pending()) {
        if (Drain(client, down) == IoResult::kError) return;
      }
    }
    if (fds[1].revents & kWake) {
      if (upstream_events & POLLIN) {
        IoResult r = Fill(state, upstream, down, state.bytes_in, capped);
        if (r == IoResult::kEof) down.source_eof = true;
        if (r == IoResult::kError) return;
      } else if (upstream_events & POLLOUT) {
        if (Drain(upstream, up) == IoResult::kError) return;
      }
      if ((upstream_events & POLLIN) && (upstream_events & POLLOUT) && up.pending()) {
        if (Drain(upstream, up) == IoResult::kError) return;
      }
    }
  }
}

}  // namespace nsbox::netproxy
