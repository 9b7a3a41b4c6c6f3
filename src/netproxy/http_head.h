// The proxy's view of an HTTP/1.x request head: strict parsing of what a client sends to a forward proxy
// (absolute-form or CONNECT authority-form), the Host check, and the head rewritten for the origin server.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nsbox::netproxy {

struct HeaderField {
  std::string name;
  std::string value;
};

struct ProxyRequest {
  std::string method;
  bool is_connect = false;
  std::string host;  // as the client wrote it, lower-cased; IPv6 literals keep their brackets
  uint16_t port = 0;
  std::string path;  // origin-form ("/simple/?q=1") for plain HTTP; empty for CONNECT
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  std::vector<HeaderField> headers;
};

// A head that cannot be served: the status to answer with and why.
struct HeadError {
  int status = 0;  // 0 = no error
  std::string reason;
  std::string other_host;  // a Host header that names a host other than the request's: that host, as written
};

// `head` is everything up to and including the blank line ("\r\n\r\n"). Never throws; anything that is not
// a well-formed proxy request comes back as a 400 (or 501 for an unsupported scheme) with the reason.
HeadError ParseRequestHead(std::string_view head, ProxyRequest& request);

// The head to send to the origin server: origin-form request line, the Host header set to the target,
// hop-by-hop and proxy headers dropped, and "Connection: close" so every request is a fresh connection
// through the proxy (a follow-up request, e.g. a redirect, is checked on its own).
std::string BuildOriginHead(const ProxyRequest& request);

// "host" or "host:port" for the Host header; the port is left out when it is the scheme's default.
std::string AuthorityFor(const ProxyRequest& request);

}  // namespace nsbox::netproxy
