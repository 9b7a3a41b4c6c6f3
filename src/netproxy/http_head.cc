// The proxy's view of an HTTP/1.x request head: strict parsing of what a client sends to a forward proxy
// (absolute-form or CONNECT authority-form), the Host check, and the head rewritten for the origin server.
#include "src/netproxy/http_head.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace nsbox::netproxy {
namespace {

constexpr size_t kMaxHeaderFields = 128;

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), IsTokenChar);
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
  }
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) { return a.size() == b.size() && Lower(a) == Lower(b); }

std::string_view TrimOws(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

HeadError Bad(std::string reason) { return HeadError{400, std::move(reason), {}}; }

// Quoted into messages, so a hostile request cannot put control characters or megabytes into them.
std::string Printable(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > 80) out += "...";
  return out;
}

bool ParsePort(std::string_view text, uint16_t& port) {
  if (text.empty() || text.size() > 5) return false;
  unsigned value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value == 0 || value > 65535) return false;
  port = static_cast<uint16_t>(value);
  return true;
}

// "host", "host:port", "[v6]", "[v6]:port"; the port may be omitted only where a default exists.
HeadError ParseAuthority(std::string_view authority, uint16_t default_port, std::string& host, uint16_t& port) {
  if (authority.empty()) return Bad("the request names no host");
  if (authority.find('@') != std::string_view::npos) {
    return Bad(fmt::format("credentials in the URL are not supported ('{}')", Printable(authority)));
  }
  std::string_view host_part;
  std::string_view port_part;
  bool has_port = false;
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return Bad(fmt::format("unterminated IPv6 literal '{}'", Printable(authority)));
    host_part = authority.substr(0, close + 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Bad(fmt::format("malformed host '{}'", Printable(authority)));
      port_part = after.substr(1);
      has_port = true;
    }
  } else {
    size_t colon = authority.find(':');
    host_part = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_part = authority.substr(colon + 1);
      has_port = true;
    }
  }
  if (host_part.empty()) return Bad("the request names no host");
  for (char c : host_part) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '%' || c == '\\') {
      return Bad(fmt::format("malformed host '{}'", Printable(host_part)));
    }
  }
  if (has_port && !(port_part.empty() && default_port != 0)) {
    if (!ParsePort(port_part, port)) return Bad(fmt::format("malformed port in '{}'", Printable(authority)));
  } else if (default_port != 0) {
    port = default_port;
  } else {
    return Bad(fmt::format("CONNECT needs host:port, got '{}'", Printable(authority)));
  }
  host = Lower(host_part);
  return {};
}

// Host names compare without case and without one trailing dot.
std::string HostKey(std::string_view host) {
  std::string key = Lower(host);
  if (!key.empty() && key.back() == '.') key.pop_back();
  return key;
}

HeadError ParseTarget(std::string_view target, ProxyRequest& request) {
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return Bad("control characters in the request target");
  }
  if (request.is_connect) return ParseAuthority(target, 0, request.host, request.port);
  if (!target.empty() && target.front() == '/') {
    return Bad("not a proxy request: the target must be an absolute URL (http://host/path); "
               "set HTTP_PROXY rather than sending requests to the proxy directly");
  }
  size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos) return Bad(fmt::format("malformed request target '{}'", Printable(target)));
  std::string scheme = Lower(target.substr(0, scheme_end));
  if (scheme == "https") {
    return HeadError{501, "https:// URLs go through CONNECT (HTTPS_PROXY), not as plain proxy requests", {}};
  }
  if (scheme != "http") return HeadError{501, fmt::format("unsupported scheme '{}'", Printable(scheme)), {}};
  std::string_view rest = target.substr(scheme_end + 3);
  size_t authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  std::string_view path = authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  if (!path.empty() && path.front() == '#') path = {};
  size_t fragment = path.find('#');  // fragments never go on the wire
  if (fragment != std::string_view::npos) path = path.substr(0, fragment);
  HeadError error = ParseAuthority(authority, 80, request.host, request.port);
  if (error.status != 0) return error;
  request.path.clear();
  if (path.empty() || path.front() == '?') request.path.push_back('/');  // "http://host?q" means "/?q"
  request.path.append(path);
  return {};
}

// A client's Host header must name the same host as its URL; otherwise a name-based virtual host on an
// allowed server's address could be reached under a name that is not allowed.
HeadError CheckHostHeader(const ProxyRequest& request) {
  const HeaderField* host_field = nullptr;
  for (const HeaderField& field : request.headers) {
    if (!EqualsIgnoreCase(field.name, "host")) continue;
    if (host_field != nullptr) return Bad("more than one Host header");
    host_field = &field;
  }
  if (host_field == nullptr) return {};
  std::string host;
  uint16_t port = 0;
  HeadError error = ParseAuthority(host_field->value, request.is_connect ? 443 : 80, host, port);
  if (error.status != 0) return Bad(fmt::format("malformed Host header '{}'", Printable(host_field->value)));
  if (HostKey(host) != HostKey(request.host) || port != request.port) {
    HeadError mismatch = Bad(fmt::format("the Host header names '{}' but the request is for '{}'",
                                         Printable(host_field->value), Printable(AuthorityFor(request))));
    mismatch.other_host = host;
    return mismatch;
  }
  return {};
}

}  // namespace

HeadError ParseRequestHead(std::string_view head, ProxyRequest& request) {
  request = ProxyRequest{};
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") return Bad("incomplete request head");
  head.remove_suffix(2);  // each line, the last included, now ends in exactly one CRLF
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    size_t end = head.find("\r\n");
    std::string_view line = head.substr(0, end);
    if (line.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos) {
      return Bad("bare CR, LF or NUL in the request head");
    }
    lines.push_back(line);
    head.remove_prefix(end + 2);
  }
  if (lines.empty() || lines.front().empty()) return Bad("empty request line");

  std::string_view request_line = lines.front();
  size_t first_space = request_line.find(' ');
  size_t last_space = request_line.rfind(' ');
  if (first_space == std::string_view::npos || first_space == last_space) {
    return Bad(fmt::format("malformed request line '{}'", Printable(request_line)));
  }
  std::string_view method = request_line.substr(0, first_space);
  std::string_view target = request_line.substr(first_space + 1, last_space - first_space - 1);
  std::string_view version = request_line.substr(last_space + 1);
  if (!IsToken(method)) return Bad(fmt::format("malformed method '{}'", Printable(method)));
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Bad(fmt::format("unsupported protocol version '{}'", Printable(version)));
  }
  if (target.empty() || target.find(' ') != std::string_view::npos) {
    return Bad(fmt::format("malformed request line '{}'", Printable(request_line)));
  }
  request.method = std::string(method);
  request.version = std::string(version);
  request.is_connect = method == "CONNECT";

  if (lines.size() - 1 > kMaxHeaderFields) return HeadError{431, "too many header fields", {}};
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (line.empty()) return Bad("empty line inside the request head");
    if (line.front() == ' ' || line.front() == '\t') return Bad("folded header lines are not accepted");
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return Bad(fmt::format("header line without a colon '{}'", Printable(line)));
    std::string_view name = line.substr(0, colon);
    if (!IsToken(name)) return Bad(fmt::format("malformed header name '{}'", Printable(name)));
    request.headers.push_back({std::string(name), std::string(TrimOws(line.substr(colon + 1)))});
  }

  HeadError error = ParseTarget(target, request);
  if (error.status != 0) return error;
  return CheckHostHeader(request);
}

std::string AuthorityFor(const ProxyRequest& request) {
  uint16_t default_port = request.is_connect ? 443 : 80;
  if (request.port == default_port) return request.host;
  return fmt::format("{}:{}", request.host, request.port);
}

std::string BuildOriginHead(const ProxyRequest& request) {
  // Hop-by-hop headers belong to the client-proxy connection, plus any the client's Connection header names.
  std::vector<std::string> dropped = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                                      "proxy-authenticate", "te", "upgrade", "host"};
  for (const HeaderField& field : request.headers) {
    if (!EqualsIgnoreCase(field.name, "connection")) continue;
    std::string_view options = field.value;
    while (!options.empty()) {
      size_t comma = options.find(',');
      std::string option = Lower(TrimOws(options.substr(0, comma)));
      // Framing headers stay whatever the Connection header says, so the origin sees the body as sent.
      if (!option.empty() && option != "content-length" && option != "transfer-encoding") dropped.push_back(option);
      if (comma == std::string_view::npos) break;
      options.remove_prefix(comma + 1);
    }
  }
  std::string head = fmt::format("{} {} {}\r\nHost: {}\r\n", request.method, request.path, request.version,
                                 AuthorityFor(request));
  for (const HeaderField& field : request.headers) {
    if (std::find(dropped.begin(), dropped.end(), Lower(field.name)) != dropped.end()) continue;
    head += fmt::format("{}: {}\r\n", field.name, field.value);
  }
  head += "Connection: close\r\n\r\n";
  return head;
}

}  // namespace nsbox::netproxy
