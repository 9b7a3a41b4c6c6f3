// Name resolution for the egress proxy: an allowed domain's addresses, never a special-purpose one or the host's own.
#include "src/netproxy/resolve.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/rtnetlink.h>
#include <netdb.h>
#include <netinet/in.h>
#include <strings.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "src/netproxy/address_class.h"
#include "src/netproxy/local_route.h"

namespace nsbox::netproxy {
namespace {

// The host's own addresses (every interface's, as getifaddrs lists them now), numeric: an allowed domain that
// resolves to one of them would reach the host's own services, which is what the sandbox's namespace keeps away.
// Numeric, an IPv4-mapped IPv6 address as the IPv4 one it carries.
std::string CanonicalAddress(const sockaddr* address) {
  if (address->sa_family == AF_INET6) {
    // One that carries an IPv4 address (v4-mapped, NAT64, ...) reaches that address: compared as it.
    if (auto inner = EmbeddedV4(reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr)) {
      sockaddr_in v4{};
      v4.sin_family = AF_INET;
      v4.sin_addr.s_addr = htonl(*inner);
      return FormatAddress(reinterpret_cast<const sockaddr*>(&v4));
    }
  }
  return FormatAddress(address);
}

std::vector<std::string> HostAddresses(const ProxyConfig& config) {
  if (!config.host_addresses_override.empty()) return config.host_addresses_override;
  std::vector<std::string> addresses;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return addresses;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next)
    if (entry->ifa_addr && (entry->ifa_addr->sa_family == AF_INET || entry->ifa_addr->sa_family == AF_INET6))
      addresses.push_back(CanonicalAddress(entry->ifa_addr));
  freeifaddrs(list);
  return addresses;
}

// host_addresses: HostAddresses(config), listed once per resolution.
void AddCandidate(const ProxyConfig& config, const std::vector<std::string>& host_addresses, const sockaddr* address,
                  socklen_t length, Resolved& resolved) {
  std::string_view range = SpecialAddressRange(address);
  if (!range.empty() && !config.allow_private_addresses) {
    if (resolved.refused.empty()) resolved.refused = fmt::format("{} ({})", FormatAddress(address), range);
    return;
  }
  if (!config.allow_private_addresses) {
    if (std::find(host_addresses.begin(), host_addresses.end(), CanonicalAddress(address)) != host_addresses.end()) {
      if (resolved.refused.empty())
        resolved.refused = fmt::format("{} (an address of this host)", FormatAddress(address));
      return;
    }
    // The kernel's own answer as well: every address of a prefix on lo, or of an "AnyIP" local route, is this host's
    // though no interface lists it. Not knowing is a refusal.
    sockaddr_in v4{};
    const sockaddr* asked = address;
    if (const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
        address->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      v4.sin_family = AF_INET;
      std::memcpy(&v4.sin_addr, v6->sin6_addr.s6_addr + 12, 4);
      asked = reinterpret_cast<const sockaddr*>(&v4);
    }
    auto route = RouteTypeOf(asked);
    if (!route.ok() || *route == RTN_LOCAL || *route == RTN_BROADCAST || *route == RTN_MULTICAST) {
      if (resolved.refused.empty())
        resolved.refused = route.ok() ? fmt::format("{} (an address of this host)", FormatAddress(address))
                                      : fmt::format("{} (whether it is an address of this host is not known: {})",
                                                    FormatAddress(address), route.status().message());
      return;
    }
  }
  sockaddr_storage copy{};
  std::memcpy(&copy, address, std::min<size_t>(length, sizeof copy));
  resolved.usable.push_back(copy);
}

// The host's hosts database (/etc/hosts; its IPv4 entries, as gethostent reads them) for an entry or alias named
// exactly `host`: true when there is one, its addresses added as candidates.
bool HostsFileCandidates(const ProxyConfig& config, const std::vector<std::string>& host_addresses,
                         const std::string& host, uint16_t port, Resolved& resolved) {
  static std::mutex hosts_database;  // gethostent_r's position in the file is process-wide
  std::lock_guard<std::mutex> lock(hosts_database);
  bool found = false;
  ::sethostent(0);
  hostent entry{};
  hostent* result = nullptr;
  std::vector<char> buffer(64 * 1024);
  int error = 0;
  while (::gethostent_r(&entry, buffer.data(), buffer.size(), &result, &error) == 0 && result != nullptr) {
    bool named = ::strcasecmp(entry.h_name, host.c_str()) == 0;
    for (char** alias = entry.h_aliases; !named && alias != nullptr && *alias != nullptr; ++alias)
      named = ::strcasecmp(*alias, host.c_str()) == 0;
    if (!named || entry.h_addrtype != AF_INET || entry.h_length != 4) continue;
    for (char** address = entry.h_addr_list; *address != nullptr; ++address) {
      sockaddr_in v4{};
      v4.sin_family = AF_INET;
      v4.sin_port = htons(port);
      std::memcpy(&v4.sin_addr, *address, 4);
      AddCandidate(config, host_addresses, reinterpret_cast<sockaddr*>(&v4), sizeof v4, resolved);
      found = true;
    }
  }
  ::endhostent();
  return found;
}

}  // namespace

Resolved Resolve(const ProxyConfig& config, const std::string& host, uint16_t port) {
  Resolved resolved;
  const std::vector<std::string> host_addresses =
      config.allow_private_addresses ? std::vector<std::string>{} : HostAddresses(config);
  const auto& override_map = config.resolver_override;
  if (!override_map.empty()) {
    auto it = override_map.find(host);
    if (it == override_map.end()) {
      resolved.error = "not in the test resolver override";
      return resolved;
    }
    sockaddr_in v4{};
    sockaddr_in6 v6{};
    if (inet_pton(AF_INET, it->second.c_str(), &v4.sin_addr) == 1) {
      v4.sin_family = AF_INET;
      v4.sin_port = htons(port);
      AddCandidate(config, host_addresses, reinterpret_cast<sockaddr*>(&v4), sizeof v4, resolved);
    } else if (inet_pton(AF_INET6, it->second.c_str(), &v6.sin6_addr) == 1) {
      v6.sin6_family = AF_INET6;
      v6.sin6_port = htons(port);
      AddCandidate(config, host_addresses, reinterpret_cast<sockaddr*>(&v6), sizeof v6, resolved);
    } else {
      resolved.error = "the test resolver override holds no IP address for it";
    }
    return resolved;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* answers = nullptr;
  std::string service = std::to_string(port);
  // The name as an absolute one (a trailing dot): without it the resolver also tries NAME.<search domain> from the
  // host's resolv.conf (first, with Kubernetes' ndots:5), a name the allow list does not hold.
  const std::string absolute = host + ".";
  int rc = getaddrinfo(absolute.c_str(), service.c_str(), &hints, &answers);
  if (rc != 0) {
    // glibc's files database does not match an absolute name: the host's /etc/hosts is read for the exact name.
    if (HostsFileCandidates(config, host_addresses, host, port, resolved)) return resolved;
    resolved.error = rc == EAI_SYSTEM ? Status::Errno("getaddrinfo").message() : gai_strerror(rc);
    return resolved;
  }
  for (addrinfo* answer = answers; answer != nullptr; answer = answer->ai_next) {
    AddCandidate(config, host_addresses, answer->ai_addr, answer->ai_addrlen, resolved);
  }
  freeaddrinfo(answers);
  return resolved;
}

}  // namespace nsbox::netproxy
