// Which resolved addresses the proxy may connect to: everything except loopback, private, link-local,
// multicast, unspecified and the other special-purpose ranges, in IPv4 and IPv6 (v4-mapped included).
#pragma once

#include <sys/socket.h>

#include <string>
#include <string_view>

namespace nsbox::netproxy {

// Empty for an ordinary public unicast address; otherwise the name of its special range
// ("loopback", "private", "link-local", ...), which goes into the refusal message.
// Anything that is neither AF_INET nor AF_INET6 is "not an IP address".
std::string_view SpecialAddressRange(const sockaddr* address);

// "127.0.0.1", "::1": for messages.
std::string FormatAddress(const sockaddr* address);

}  // namespace nsbox::netproxy
