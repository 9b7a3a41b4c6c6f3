// RouteTypeOf: how the kernel routes to an address, asked over rtnetlink (RTM_GETROUTE), so that the proxy knows an
// address of this host by the kernel's own answer, not by a list of interface addresses.
#pragma once

#include <sys/socket.h>

#include "sandbox/base/status.h"

namespace nsbox::netproxy {

// The route's type for `address` (AF_INET or AF_INET6) in the calling thread's network namespace: RTN_LOCAL for
// every address this host answers for itself (an interface's, any address of a prefix on lo, an "AnyIP" local
// route), RTN_UNICAST for one reached through a gateway or a link, RTN_UNREACHABLE when no route leads there.
StatusOr<int> RouteTypeOf(const sockaddr* address);

}  // namespace nsbox::netproxy
