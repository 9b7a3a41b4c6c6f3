// The egress proxy's socket waits and byte moving: waits that also end on Stop(), whole sends, a lingering close,
// and the two-way relay that counts and caps what it moves.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/netproxy/proxy_state.h"

namespace nsbox::netproxy {

using Clock = std::chrono::steady_clock;

bool WouldBlock(int err);

enum class WaitResult { kReady, kTimeout, kStopped, kError };

// Waits for `events` on fd, the stop eventfd, or the deadline.
WaitResult WaitFor(const ProxyState& state, int fd, short events, Clock::time_point deadline);

// Writes all of `data` to a non-blocking socket, giving up at the deadline or on Stop().
bool SendAll(const ProxyState& state, int fd, std::string_view data, Clock::time_point deadline);

// Ends a client connection gracefully: stop writing, then read (and drop) what the client still sends for a
// moment. Closing with unread data would reset the connection and could destroy an answer or the tail of a
// response that the client has not read yet.
void LingerClose(const ProxyState& state, int client);

// Moves bytes both ways until both sides have finished, either side fails, the byte limit is reached,
// the connection idles out, or the proxy stops. Half-closes are passed on, as CONNECT tunnels need; a
// plain HTTP exchange ends once the origin's response has been delivered (the origin was asked to close).
// client_bytes: how many more bytes the client may send the origin after to_upstream (UINT64_MAX: any).
void Relay(ProxyState& state, int client, int upstream, std::string to_upstream, bool end_with_response,
           uint64_t client_bytes);

}  // namespace nsbox::netproxy
