// Name resolution for the egress proxy: an allowed domain's addresses, never a special-purpose one or the host's own.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "src/netproxy/egress_proxy.h"

namespace nsbox::netproxy {

struct Resolved {
  std::vector<sockaddr_storage> usable;
  std::string refused;  // "127.0.0.1 (loopback)", when every answer was refused
  std::string error;    // the lookup itself failed
};

// The addresses `host` resolves to that the proxy may connect to: through the host's resolver as an absolute name
// (the host's /etc/hosts for the exact name when that fails), or config.resolver_override in tests. Unless
// config.allow_private_addresses, a special-purpose address (address_class.h) or one of this host's own (an
// interface's, or one the kernel routes locally) is refused, and the first such is named in `refused`.
Resolved Resolve(const ProxyConfig& config, const std::string& host, uint16_t port);

}  // namespace nsbox::netproxy
