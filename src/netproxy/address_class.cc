// Which resolved addresses the proxy may connect to: everything except loopback, private, link-local,
// multicast, unspecified and the other special-purpose ranges, in IPv4 and IPv6 (and IPv4 inside IPv6).
#include "src/netproxy/address_class.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstring>
#include <optional>

namespace nsbox::netproxy {
namespace {

struct V4Range {
  uint32_t network;
  int prefix_length;
  std::string_view name;
};

// IANA's special-purpose registry, the parts that must never be reachable from a sandbox:
// a DNS answer pointing at them is how an allowed name would be turned against the host or its LAN.
constexpr V4Range kV4Ranges[] = {
    {0x00000000, 8, "unspecified (0.0.0.0/8)"},
    {0x0A000000, 8, "private"},
    {0x64400000, 10, "shared address space (100.64.0.0/10)"},
    {0x7F000000, 8, "loopback"},
    {0xA9FE0000, 16, "link-local"},
    {0xAC100000, 12, "private"},
    {0xC0000000, 24, "IETF protocol assignments"},
    {0xC0000200, 24, "documentation"},
    {0xC0A80000, 16, "private"},
    {0xC6120000, 15, "benchmarking"},
    {0xC6336400, 24, "documentation"},
    {0xCB007100, 24, "documentation"},
    {0xE0000000, 4, "multicast"},
    {0xF0000000, 4, "reserved (240.0.0.0/4)"},
};

std::string_view V4Range(uint32_t host_order) {
  for (const auto& range : kV4Ranges) {
    uint32_t mask = range.prefix_length == 0 ? 0 : ~uint32_t{0} << (32 - range.prefix_length);
    if ((host_order & mask) == range.network) return range.name;
  }
  return "";
}

uint32_t V4At(const uint8_t* bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | bytes[3];
}

std::string_view V6Range(const in6_addr& address) {
  const uint8_t* b = address.s6_addr;
  static const uint8_t kZero[16] = {};
  if (std::memcmp(b, kZero, 16) == 0) return "unspecified";
  if (IN6_IS_ADDR_LOOPBACK(&address)) return "loopback";
  // Addresses that carry an IPv4 address inside are judged by that address: the packets end up there.
  if (auto inner = EmbeddedV4(address)) return V4Range(*inner);
  if (std::memcmp(b, kZero, 12) == 0) return "IPv4-compatible (deprecated)";
  // The local-use NAT64 prefix (RFC 8215) is for translating to private IPv4 networks, at any of RFC 6052's
  // offsets: refused whole.
  if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0x00 && b[5] == 0x01)
    return "local-use NAT64 (64:ff9b:1::/48)";
  if (b[0] == 0xff) return "multicast";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "link-local";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "site-local";
  if ((b[0] & 0xfe) == 0xfc) return "private (unique local)";
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) return "documentation";
  if (b[0] == 0x01 && b[1] == 0x00 && std::memcmp(b + 2, kZero, 6) == 0) return "discard-only";
  return "";
}

}  // namespace

std::optional<uint32_t> EmbeddedV4(const in6_addr& address) {
  const uint8_t* b = address.s6_addr;
  static const uint8_t kZero[8] = {};
  if (IN6_IS_ADDR_V4MAPPED(&address)) return V4At(b + 12);  // ::ffff:a.b.c.d
  // SIIT's IPv4-translated form, ::ffff:0:a.b.c.d (RFC 2765).
  if (std::memcmp(b, kZero, 8) == 0 && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0) return V4At(b + 12);
  static const uint8_t kNat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(b, kNat64, 12) == 0) return V4At(b + 12);  // the well-known NAT64 prefix, 64:ff9b::/96
  if (b[0] == 0x20 && b[1] == 0x02) return V4At(b + 2);      // 6to4, 2002:AABB:CCDD::/48
  return std::nullopt;
}

std::string_view SpecialAddressRange(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return V4Range(ntohl(v4->sin_addr.s_addr));
  }
  if (address->sa_family == AF_INET6) {
    return V6Range(reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  }
  return "not an IP address";
}

std::string FormatAddress(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text, sizeof text);
  }
  return text;
}

}  // namespace nsbox::netproxy
