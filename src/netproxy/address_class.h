// Which resolved addresses the proxy may connect to: everything except loopback, private, link-local,
// multicast, unspecified and the other special-purpose ranges, in IPv4 and IPv6 (and IPv4 inside IPv6).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>

#include <string>
#include <string_view>

namespace nsbox::netproxy {

// Empty for an ordinary public unicast address; otherwise the name of its special range
// ("loopback", "private", "link-local", ...), which goes into the refusal message.
// Anything that is neither AF_INET nor AF_INET6 is "not an IP address".
std::string_view SpecialAddressRange(const sockaddr* address);

// The IPv4 address (host byte order) an IPv6 address carries and delivers to: v4-mapped (::ffff:0:0/96),
// IPv4-translated (::ffff:0:0:0/96), the well-known NAT64 prefix (64:ff9b::/96) and 6to4 (2002::/16).
std::optional<uint32_t> EmbeddedV4(const in6_addr& address);

// "127.0.0.1", "::1": for messages.
std::string FormatAddress(const sockaddr* address);

}  // namespace nsbox::netproxy
