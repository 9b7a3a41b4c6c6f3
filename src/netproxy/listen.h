// Listening sockets for the proxy: on 127.0.0.1 inside a sandbox's network namespace, or on the host's.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox::netproxy {

// A TCP socket listening on 127.0.0.1:port inside the network namespace of `pid`. A socket stays in the
// namespace it was created in, so the sandbox reaches it over its own loopback while the proxy, serving it
// from the host, connects out from the host's namespace. The switch happens on a short-lived thread
// (setns affects only the calling thread), which also brings the namespace's "lo" up if it is down.
// port 0 lets the kernel choose; LocalPort() tells which.
StatusOr<UniqueFd> ListenInNetns(pid_t pid, uint16_t port);
// The same for a namespace given as an open /proc/PID/ns/net (or bind-mounted nsfs) descriptor.
StatusOr<UniqueFd> ListenInNetnsFd(int netns_fd, uint16_t port);

// A TCP socket listening on 127.0.0.1:port in the caller's own network namespace.
StatusOr<UniqueFd> ListenOnLoopback(uint16_t port);

StatusOr<uint16_t> LocalPort(int socket_fd);

}  // namespace nsbox::netproxy
