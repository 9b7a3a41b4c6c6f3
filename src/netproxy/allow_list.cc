// The --network allow= list: parsing, validation of domain names, and matching a requested host against it.
#include "src/netproxy/allow_list.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

#include <fmt/format.h>

namespace nsbox::netproxy {
namespace {

constexpr std::string_view kAllowPrefix = "allow=";

bool IsLabelChar(char c) {
  // Underscores are not valid in host names but do occur in real DNS names (SRV-style, some CDNs).
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

std::string ToLower(std::string_view text) {
  std::string lowered(text);
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c); });
  return lowered;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

std::string AllowEntryProblem(std::string_view raw) {
  std::string lowered = ToLower(raw);
  if (lowered.size() > 1 && lowered.back() == '.') lowered.pop_back();
  const std::string_view entry = lowered;
  if (entry.find("://") != std::string_view::npos) return "give the domain alone, without a scheme";
  if (entry.find('/') != std::string_view::npos) return "give the domain alone, without a path";
  if (IsIpLiteral(entry)) return "IP addresses are not accepted; name the domain (the proxy resolves it itself)";
  if (entry.find(':') != std::string_view::npos) return "give the domain alone, without a port (every port is allowed)";
  if (entry == "*" || entry == "*.") return "a bare wildcard would allow everything; that is the host network";
  std::string_view name = entry.substr(0, 2) == "*." ? entry.substr(2) : entry;
  if (name.find('*') != std::string_view::npos)
    return "a wildcard is only accepted as the whole first label (*.example.com)";
  // *.com is every domain of a top-level one: a whole region of the internet, not a service.
  if (name.size() < entry.size() && name.find('.') == std::string_view::npos)
    return "a wildcard over a whole top-level domain; name the domain (*.example.com)";
  // One trailing dot (an absolute name) was taken off above; what is left must be a name as it stands.
  if (NormalizeHostName(name) != name) return "not a valid domain name";
  return "";
}

std::string NormalizeHostName(std::string_view host) {
  std::string name = ToLower(host);
  if (!name.empty() && name.back() == '.') name.pop_back();
  if (name.empty() || name.size() > 253 || IsIpLiteral(name)) return "";
  size_t label_start = 0;
  while (label_start <= name.size()) {
    size_t dot = name.find('.', label_start);
    size_t label_end = dot == std::string::npos ? name.size() : dot;
    size_t length = label_end - label_start;
    if (length == 0 || length > 63) return "";
    if (name[label_start] == '-' || name[label_end - 1] == '-') return "";
    for (size_t i = label_start; i < label_end; ++i) {
      if (!IsLabelChar(name[i])) return "";
    }
    if (dot == std::string::npos) break;
    label_start = dot + 1;
  }
  return name;
}

bool IsIpLiteral(std::string_view host) {
  if (host.empty()) return false;
  if (host.front() == '[') return true;  // bracketed IPv6, or something pretending to be
  if (host.find(':') != std::string_view::npos) {
    std::string text(host);
    in6_addr v6{};
    return inet_pton(AF_INET6, text.c_str(), &v6) == 1;
  }
  std::string text(host);
  if (!text.empty() && text.back() == '.') text.pop_back();
  // inet_aton is what getaddrinfo falls back to for numeric hosts, so it defines what counts as one:
  // it accepts "127.1", "0177.0.0.1" and "2130706433", all of which reach 127.0.0.1.
  in_addr v4{};
  return inet_aton(text.c_str(), &v4) != 0;
}

StatusOr<std::vector<std::string>> ParseAllowList(const std::string& spec) {
  std::string_view rest = spec;
  if (rest.substr(0, kAllowPrefix.size()) != kAllowPrefix) {
    return Status::Error(fmt::format("--network '{}': expected allow=DOMAIN[,DOMAIN...]", spec));
  }
  rest.remove_prefix(kAllowPrefix.size());
  std::vector<std::string> domains;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view raw = Trim(rest.substr(0, comma));
    std::string entry = ToLower(raw);
    if (entry.size() > 1 && entry.back() == '.') entry.pop_back();
    if (entry.empty()) {
      return Status::Error(fmt::format("--network '{}': empty domain in the allow list", spec));
    }
    std::string problem = AllowEntryProblem(raw);
    if (!problem.empty()) {
      return Status::Error(fmt::format("--network allow: '{}': {}", raw, problem));
    }
    if (std::find(domains.begin(), domains.end(), entry) == domains.end()) domains.push_back(entry);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return domains;
}

bool HostAllowed(const std::vector<std::string>& allowed_domains, std::string_view host) {
  if (host.empty()) return false;
  for (const std::string& allowed : allowed_domains) {
    if (allowed.substr(0, 2) == "*.") {
      std::string_view suffix = std::string_view(allowed).substr(1);  // ".example.com"
      if (host.size() > suffix.size() && host.substr(host.size() - suffix.size()) == suffix) return true;
    } else if (host == allowed) {
      return true;
    }
  }
  return false;
}

}  // namespace nsbox::netproxy
