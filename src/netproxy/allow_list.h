// The --network allow= list: parsing, validation of domain names, and matching a requested host against it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox::netproxy {

// "allow=pypi.org,*.example.com" -> {"pypi.org", "*.example.com"}: lower-cased, one trailing dot dropped,
// duplicates removed. Refuses IP addresses, ports, schemes, paths, a bare "*" and anything that is not a
// DNS name, each with a message that says what to write instead.
StatusOr<std::vector<std::string>> ParseAllowList(const std::string& spec);

// Why one allow-list entry is unusable (judged lower-cased, one trailing dot dropped), or empty when it is fine.
std::string AllowEntryProblem(std::string_view entry);

// A host as it appears in a request, normalised for matching: lower-cased, one trailing dot dropped.
// Empty when it is not a syntactically valid DNS name (an IP literal is not a DNS name).
std::string NormalizeHostName(std::string_view host);

// True for anything the resolver would take as an address rather than a name: dotted quads, the
// shorthand forms inet_aton accepts ("127.1", "0x7f000001", "2130706433") and IPv6, bracketed or not.
bool IsIpLiteral(std::string_view host);

// "pypi.org" matches only pypi.org; "*.example.com" matches every name below example.com (any depth)
// but not example.com itself, so both are listed when both are wanted. `host` must be normalised.
bool HostAllowed(const std::vector<std::string>& allowed_domains, std::string_view host);

}  // namespace nsbox::netproxy
