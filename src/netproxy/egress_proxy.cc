// The host-side egress proxy behind --network allow=: plain HTTP and CONNECT, only to allowed domains,
// never to special-purpose addresses, with refusals counted per host and traffic counted and capped.
//
// Shape: one accept thread, paced (accept_pace.h), and one thread per client connection up to
// max_connections. A thread per connection (rather than one event loop) because name resolution through
// getaddrinfo blocks; every other wait is a poll() that also watches the stop eventfd, so Stop() ends all
// connections promptly.
// The shared state is proxy_state.h's; waiting, sending and relaying bytes, relay.cc's.
#include "src/netproxy/egress_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/netproxy/accept_pace.h"
#include "src/netproxy/address_class.h"
#include "src/netproxy/allow_list.h"
#include "src/netproxy/http_head.h"
#include "src/netproxy/proxy_state.h"
#include "src/netproxy/relay.h"
#include "src/netproxy/resolve.h"
#include "src/netproxy/tls_hello.h"

namespace nsbox::netproxy {
namespace {

std::string_view StatusText(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Error";
  }
}

// An answer from the proxy itself, as a short text naming the reason, then a lingering close.
void ReplyAndClose(const ProxyState& state, UniqueFd& client, int status, std::string_view why) {
  std::string body = fmt::format("nsbox egress proxy: {}\n", why);
  // The reason phrase carries the reason too: for CONNECT, most clients show only the status line
  // (pip: "Tunnel connection failed: 403 ...").
  std::string phrase(why.substr(0, 200));
  for (char& c : phrase) {
    if (c < 0x20 || c == 0x7f) c = ' ';
  }
  std::string reply = fmt::format(
      "HTTP/1.1 {} {} ({})\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n"
      "Connection: close\r\nProxy-Agent: nsbox\r\n\r\n{}",
      status, StatusText(status), phrase, body.size(), body);
  if (!SendAll(state, client.get(), reply, Clock::now() + std::chrono::seconds(5))) return;
  LingerClose(state, client.get());
}

// The key a refused IP literal is counted under in the denied hosts: as the program spelled it when it is an address,
// else one key for all malformed ones. A bracketed host runs to the first ']' of a 64 KiB request head: a thousand of
// them (the count of distinct keys) held 60 MB of nsbox's memory, outside the sandbox's limits, and in every result.
std::string DeniedLiteralKey(const std::string& host) {
  constexpr size_t kLongestKept = 64;  // "[" an IPv6 address "]" is shorter; inet_aton takes any number of 0s
  if (host.front() != '[') {           // IsIpLiteral parsed it as an address
    if (host.size() <= kLongestKept) return host;
    in_addr v4{};
    char text[INET_ADDRSTRLEN] = {};
    std::string bare = host;
    if (bare.back() == '.') bare.pop_back();
    if (inet_aton(bare.c_str(), &v4) != 0 && inet_ntop(AF_INET, &v4, text, sizeof text) != nullptr)
      return text;  // "0x00...07f000001" is 127.0.0.1
  } else if (host.size() <= kLongestKept && host.back() == ']') {
    in6_addr v6{};
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6) == 1) return host;
  }
  return "(a malformed IP address)";
}

void Deny(ProxyState& state, UniqueFd& client, const std::string& host, std::string_view why) {
  state.CountDenied(host);
  ReplyAndClose(state, client, 403, why);
}

// Reads the request head. Returns false when the connection ends without one (after answering, where an
// answer makes sense). `leftover` gets whatever the client sent after the head (a body, or TLS data).
bool ReadHead(const ProxyState& state, UniqueFd& client, std::string& head, std::string& leftover) {
  Clock::time_point deadline = Clock::now() + state.config.head_timeout;
  std::string buffer;
  char chunk[4096];
  while (true) {
    size_t scan_from = buffer.size() >= 3 ? buffer.size() - 3 : 0;
    ssize_t got = recv(client.get(), chunk, sizeof chunk, 0);
    if (got == 0) return false;
    if (got < 0) {
      if (errno == EINTR) continue;
      if (!WouldBlock(errno)) return false;
      WaitResult waited = WaitFor(state, client.get(), POLLIN, deadline);
      if (waited == WaitResult::kTimeout) {
        ReplyAndClose(state, client, 408, "no complete request head in time");
      }
      if (waited != WaitResult::kReady) return false;
      continue;
    }
    const size_t old_size = buffer.size();
    buffer.append(chunk, static_cast<size_t>(got));
    size_t end = buffer.find("\r\n\r\n", scan_from);
    // A head whose lines end in a bare LF would never reach its CRLF CRLF: said at once, not after the time-out. (What
    // follows the head, a body, may hold any bytes.)
    const size_t head_size = end == std::string::npos ? buffer.size() : end + 4;
    for (size_t lf = buffer.find('\n', old_size); lf < head_size; lf = buffer.find('\n', lf + 1)) {
      if (lf == 0 || buffer[lf - 1] != '\r') {
        ReplyAndClose(state, client, 400, "a line of the request head ends in a bare LF (HTTP lines end in CRLF)");
        return false;
      }
    }
    if (end != std::string::npos && end + 4 <= state.config.max_head_bytes) {
      head = buffer.substr(0, end + 4);
      leftover = buffer.substr(end + 4);
      return true;
    }
    if (buffer.size() > state.config.max_head_bytes) {
      ReplyAndClose(state, client, 431, fmt::format("request head longer than {} bytes", state.config.max_head_bytes));
      return false;
    }
  }
}

// Reads a CONNECT tunnel's first bytes (`bytes` holds what came behind the head) until they hold a whole ClientHello
// or prove not to start with one. The wait is the head's: a client that sends nothing is closed after it.
ClientHelloName ReadClientHello(const ProxyState& state, int client, std::string& bytes) {
  Clock::time_point deadline = Clock::now() + state.config.head_timeout;
  char chunk[4096];
  while (true) {
    ClientHelloName hello = ParseClientHelloName(bytes);
    if (hello.status != ClientHelloName::Status::kNeedMore) return hello;
    ClientHelloName ended;
    ended.status = ClientHelloName::Status::kMalformed;
    ssize_t got = recv(client, chunk, sizeof chunk, 0);
    if (got == 0) {
      ended.why = "the client ended the tunnel before its TLS ClientHello was complete";
      return ended;
    }
    if (got < 0) {
      if (errno == EINTR) continue;
      WaitResult waited = WouldBlock(errno) ? WaitFor(state, client, POLLIN, deadline) : WaitResult::kStopped;
      if (waited == WaitResult::kReady) continue;
      ended.why = "no complete TLS ClientHello in time";
      return ended;
    }
    bytes.append(chunk, static_cast<size_t>(got));
  }
}

// Connects to the first address that answers. Empty fd and `error` set when none does.
UniqueFd ConnectAny(const ProxyState& state, const std::vector<sockaddr_storage>& addresses, std::string& error) {
  for (const sockaddr_storage& address : addresses) {
    socklen_t length = address.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    const auto* target = reinterpret_cast<const sockaddr*>(&address);
    UniqueFd upstream(socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!upstream) {
      error = Status::Errno("socket").message();
      continue;
    }
    int rc = connect(upstream.get(), target, length);
    if (rc != 0 && errno != EINPROGRESS) {
      error = Status::Errno(fmt::format("connect({})", FormatAddress(target))).message();
      continue;
    }
    if (rc != 0) {
      WaitResult waited = WaitFor(state, upstream.get(), POLLOUT, Clock::now() + state.config.connect_timeout);
      if (waited == WaitResult::kStopped) {
        error = "the proxy is stopping";
        return UniqueFd();
      }
      if (waited != WaitResult::kReady) {
        error = fmt::format("connect({}): timed out", FormatAddress(target));
        continue;
      }
      int so_error = 0;
      socklen_t so_length = sizeof so_error;
      getsockopt(upstream.get(), SOL_SOCKET, SO_ERROR, &so_error, &so_length);
      if (so_error != 0) {
        error = Status::Errno(fmt::format("connect({})", FormatAddress(target)), so_error).message();
        continue;
      }
    }
    return upstream;
  }
  return UniqueFd();
}

// A plain request's body length from its Content-Length (none: 0). False with `why` for a chunked body (the proxy
// would have to parse it to find its end) or a Content-Length that is not one plain number.
bool RequestBodyLength(const ProxyRequest& request, uint64_t& length, std::string& why) {
  length = 0;
  bool seen = false;
  for (const HeaderField& field : request.headers) {
    if (strcasecmp(field.name.c_str(), "transfer-encoding") == 0) {
      why = "chunked request bodies (Transfer-Encoding) are not passed on by the proxy: send a Content-Length";
      return false;
    }
    if (strcasecmp(field.name.c_str(), "content-length") != 0) continue;
    const std::string& value = field.value;
    uint64_t parsed = 0;
    bool valid = !value.empty() && value.size() <= 18;
    for (char c : value) valid = valid && c >= '0' && c <= '9';
    if (valid) parsed = std::stoull(value);
    if (!valid || (seen && parsed != length)) {
      why = "the request's Content-Length is not one plain number";
      return false;
    }
    length = parsed;
    seen = true;
  }
  return true;
}

std::string LimitMessage(const ProxyState& state) {
  return fmt::format("the sandbox's network byte limit ({} bytes, --network-limit) is used up",
                     state.config.byte_limit);
}

void ServeConnection(ProxyState& state, UniqueFd client) {
  std::string head;
  std::string leftover;
  if (!ReadHead(state, client, head, leftover)) return;
  ProxyRequest request;
  HeadError error = ParseRequestHead(head, request);
  if (error.status != 0) {
    // A request for one host that names another in its Host header is a try for that other host: counted.
    if (std::string other = NormalizeHostName(error.other_host); !other.empty()) state.CountDenied(other);
    return ReplyAndClose(state, client, error.status, error.reason);
  }

  // Addresses are refused before any policy lookup: the allow list names domains, and numeric forms
  // ("127.1", "[::ffff:10.0.0.1]") are the classic way around address checks.
  if (IsIpLiteral(request.host)) {
    const std::string key = DeniedLiteralKey(request.host);
    return Deny(state, client, key,
                fmt::format("{} is an IP address; only domains in the --network allow list can be reached", key));
  }
  std::string host = NormalizeHostName(request.host);
  if (host.empty()) return ReplyAndClose(state, client, 400, "the request's host is not a valid domain name");
  if (!HostAllowed(state.config.allowed_domains, host)) {
    return Deny(state, client, host,
                fmt::format("{} is not in the --network allow list (allowed: {})", host,
                            fmt::join(state.config.allowed_domains, ", ")));
  }
  if (state.limit_reached) return ReplyAndClose(state, client, 403, LimitMessage(state));
  const auto& ports = state.config.connect_ports;
  if (request.is_connect && std::find(ports.begin(), ports.end(), request.port) == ports.end()) {
    return Deny(state, client, host,
                fmt::format("CONNECT to port {} is refused: tunnels go only to port {} (HTTPS); use http:// URLs for "
                            "plain HTTP, whose requests the proxy checks", request.port, fmt::join(ports, ", ")));
  }
  // A plain request carries its body and nothing more (Content-Length): what follows would be a second request
  // the proxy never checked, for any host the origin serves.
  uint64_t body_bytes = 0;
  if (!request.is_connect) {
    std::string why;
    if (!RequestBodyLength(request, body_bytes, why))
      return ReplyAndClose(state, client, why.starts_with("chunked") ? 501 : 400, why);
  }

  Resolved resolved = Resolve(state.config, host, request.port);
  if (state.stopping) return;
  if (!resolved.error.empty()) {
    return ReplyAndClose(state, client, 502, fmt::format("cannot resolve {}: {}", host, resolved.error));
  }
  if (resolved.usable.empty()) {
    return Deny(state, client, host,
                fmt::format("{} resolves to {}, an address the proxy does not connect to", host,
                            resolved.refused.empty() ? "nothing usable" : resolved.refused));
  }
  std::string connect_error;
  UniqueFd upstream = ConnectAny(state, resolved.usable, connect_error);
  if (!upstream) {
    if (state.stopping) return;
    return ReplyAndClose(state, client, 502, fmt::format("cannot connect to {}: {}", host, connect_error));
  }

  std::string to_upstream;
  if (request.is_connect) {
    if (!SendAll(state, client.get(), "HTTP/1.1 200 Connection established\r\nProxy-Agent: nsbox\r\n\r\n",
                 Clock::now() + std::chrono::seconds(5))) {
      return;
    }
    // The tunnel carries TLS whose ClientHello names the host the CONNECT named: one address often serves many
    // names (a CDN), and the name in the ClientHello, not the CONNECT line, picks which one answers (domain
    // fronting). No byte of the client reaches the origin before the name is checked; a mismatch (the 200 is sent
    // already, as the client speaks TLS only after it) can only be answered by closing.
    to_upstream = std::move(leftover);
    ClientHelloName hello = ReadClientHello(state, client.get(), to_upstream);
    if (state.stopping) return;
    if (hello.status != ClientHelloName::Status::kFound || hello.server_name != host) {
      state.CountDenied(hello.status == ClientHelloName::Status::kFound ? hello.server_name : host);
      return;
    }
  } else {
    if (leftover.size() > body_bytes) leftover.resize(body_bytes);  // a pipelined request behind it is dropped
    body_bytes -= leftover.size();
    to_upstream = BuildOriginHead(request) + leftover;
  }
  Relay(state, client.get(), upstream.get(), std::move(to_upstream), !request.is_connect,
        request.is_connect ? UINT64_MAX : body_bytes);
  if (!state.stopping) LingerClose(state, client.get());
}

void RunConnection(std::shared_ptr<ProxyState> state, UniqueFd client) {
  ServeConnection(*state, std::move(client));
  std::lock_guard lock(state->mutex);
  --state->active_connections;
  state->connections_done.notify_all();
}

void AcceptLoop(std::shared_ptr<ProxyState> state) {
  AcceptPace pace(state->config.max_new_connections_per_second, AcceptPace::Clock::now());
  while (true) {
    if (auto wait = pace.WaitBeforeNext(AcceptPace::Clock::now()); wait.count() > 0) {
      pollfd stop = {state->stop_fd.get(), POLLIN, 0};
      if (poll(&stop, 1, static_cast<int>(wait.count())) > 0) return;
      continue;
    }
    pollfd fds[2] = {{state->listen_fd.get(), POLLIN, 0}, {state->stop_fd.get(), POLLIN, 0}};
    int ready = poll(fds, 2, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || fds[1].revents != 0) return;
    UniqueFd client(accept4(state->listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client) {
      // Out of descriptors: back off instead of spinning on a listening socket that stays readable.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pollfd stop = {state->stop_fd.get(), POLLIN, 0};
        poll(&stop, 1, 100);
      }
      continue;
    }
    pace.Take(AcceptPace::Clock::now());
    {
      std::lock_guard lock(state->mutex);
      if (state->active_connections >= state->config.max_connections) {
        // Answered without a thread: one non-blocking send, which fits in an empty socket buffer.
        static constexpr std::string_view kBusy =
            "HTTP/1.1 503 Service Unavailable (nsbox: too many connections through the proxy)\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n";
        (void)send(client.get(), kBusy.data(), kBusy.size(), MSG_NOSIGNAL);
        continue;
      }
      ++state->active_connections;
    }
    try {
      std::thread(RunConnection, state, std::move(client)).detach();
    } catch (const std::system_error&) {
      std::lock_guard lock(state->mutex);
      --state->active_connections;
    }
  }
}

}  // namespace

struct EgressProxy::Threads {
  std::thread acceptor;
};

EgressProxy::EgressProxy(std::shared_ptr<ProxyState> state) : state_(std::move(state)), threads_(new Threads) {}

EgressProxy::~EgressProxy() { Stop(); }

StatusOr<std::unique_ptr<EgressProxy>> EgressProxy::Start(ProxyConfig config, UniqueFd listen_fd) {
  if (!listen_fd) return Status::Error("EgressProxy::Start: no listening socket");
  int accepting = 0;
  socklen_t length = sizeof accepting;
  if (getsockopt(listen_fd.get(), SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) != 0) {
    return Status::Errno(fmt::format("getsockopt({}, SO_ACCEPTCONN)", listen_fd.get()));
  }
  if (!accepting) return Status::Error("EgressProxy::Start: the socket is not listening");
  // A connection reset between poll() and accept() must not block the accept thread.
  int flags = fcntl(listen_fd.get(), F_GETFL);
  if (flags < 0 || fcntl(listen_fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return Status::Errno("fcntl(listen socket, O_NONBLOCK)");
  }
  // Entries from ParseAllowList are already in this form; hand-built configs get the same treatment.
  for (std::string& domain : config.allowed_domains) {
    std::transform(domain.begin(), domain.end(), domain.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (domain.size() > 1 && domain.back() == '.') domain.pop_back();
  }
  std::map<std::string, std::string> normalized_override;
  for (const auto& [name, address] : config.resolver_override) {
    in6_addr scratch{};
    if (inet_pton(AF_INET, address.c_str(), &scratch) != 1 && inet_pton(AF_INET6, address.c_str(), &scratch) != 1) {
      return Status::Error(fmt::format("resolver override {} -> '{}': not an IP address", name, address));
    }
    std::string key = NormalizeHostName(name);
    if (key.empty()) return Status::Error(fmt::format("resolver override '{}': not a domain name", name));
    normalized_override[key] = address;
  }
  config.resolver_override = std::move(normalized_override);
  if (config.max_connections < 1) config.max_connections = 1;

  auto state = std::make_shared<ProxyState>();
  state->config = std::move(config);
  state->listen_fd = std::move(listen_fd);
  state->stop_fd = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!state->stop_fd) return Status::Errno("eventfd");

  std::unique_ptr<EgressProxy> proxy(new EgressProxy(state));
  try {
    proxy->threads_->acceptor = std::thread(AcceptLoop, state);
  } catch (const std::system_error& e) {
    return Status::Error(fmt::format("starting the proxy's accept thread: {}", e.what()));
  }
  return proxy;
}

void EgressProxy::Stop() {
  if (!threads_->acceptor.joinable()) return;
  state_->stopping = true;
  uint64_t one = 1;
  (void)write(state_->stop_fd.get(), &one, sizeof one);
  threads_->acceptor.join();
  state_->listen_fd.reset();  // from here on, connecting to the port is refused
  std::unique_lock lock(state_->mutex);
  state_->connections_done.wait_for(lock, std::chrono::seconds(5), [&] { return state_->active_connections == 0; });
}

std::map<std::string, uint64_t> EgressProxy::DeniedHosts() const {
  std::lock_guard lock(state_->mutex);
  return state_->denied_hosts;
}

uint64_t EgressProxy::BytesIn() const { return state_->bytes_in; }
uint64_t EgressProxy::BytesOut() const { return state_->bytes_out; }
bool EgressProxy::LimitReached() const { return state_->limit_reached; }

std::map<std::string, std::string> ProxyEnvironment(uint16_t port) {
  std::string url = fmt::format("http://127.0.0.1:{}", port);
  // Traffic to the sandbox's own loopback never goes through the proxy (which would refuse it anyway).
  std::string no_proxy = "localhost,127.0.0.1,::1";
  return {
      {"HTTP_PROXY", url},           {"HTTPS_PROXY", url},          {"http_proxy", url},
      {"https_proxy", url},          {"NO_PROXY", no_proxy},        {"no_proxy", no_proxy},
      {"PIP_PROXY", url},            {"npm_config_proxy", url},     {"npm_config_https_proxy", url},
  };
}

}  // namespace nsbox::netproxy
