// The host-side egress proxy behind --network allow=: plain HTTP and CONNECT, only to allowed domains,
// never to special-purpose addresses, with refusals counted per host and traffic counted and capped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox::netproxy {

// The port the proxy listens on inside a sandbox's network namespace. Any port works (the namespace is the
// sandbox's own, so nothing collides); a fixed one lets the environment be computed before the clone.
inline constexpr uint16_t kSandboxProxyPort = 3128;

struct ProxyConfig {
  // As ParseAllowList returns them: "pypi.org", "*.example.com".
  std::vector<std::string> allowed_domains;
  // The user's explicit opt-in to let an allowed domain resolve to loopback, private, link-local or other
  // special-purpose addresses. IP-literal targets stay refused either way: the list names domains.
  bool allow_private_addresses = false;
  // TEST ONLY: host -> IP ("allowed.test" -> "127.0.0.1"). When non-empty it replaces DNS entirely, so a
  // test never leaks a lookup; its answers pass the same address check as DNS answers, so pointing a name
  // at 127.0.0.1 still needs allow_private_addresses.
  std::map<std::string, std::string> resolver_override;
  // CONNECT tunnels go only to these ports (HTTPS): a tunnel to port 80 would carry requests whose Host header the
  // proxy never sees, to any virtual host behind an allowed domain's address.
  std::vector<uint16_t> connect_ports = {443};
  // TEST ONLY: the host's own addresses, instead of its interfaces' (getifaddrs) when non-empty.
  std::vector<std::string> host_addresses_override;
  // --network-limit: bytes relayed in + out over the proxy's lifetime; 0 = unlimited. The cap is exact:
  // the relay stops at the limit, and later requests are refused.
  uint64_t byte_limit = 0;

  // Bounds that keep a hostile sandbox from exhausting the host through the proxy.
  int max_connections = 64;  // concurrent; more are answered 503 and closed
  // New connections a second (and at once after a quiet second); more wait in the kernel's backlog. Each costs
  // nsbox's CPU, not the sandbox's: without a pace a sandbox at --cpus 0.5 kept 1.5 host cores busy.
  int max_new_connections_per_second = 100;
  size_t max_head_bytes = 64 * 1024;  // request line + headers; longer heads are answered 431
  std::chrono::milliseconds head_timeout{30'000};  // to send a complete request head
  std::chrono::milliseconds connect_timeout{10'000};  // to the origin server, per address
  std::chrono::milliseconds idle_timeout{300'000};  // a relay with no traffic either way is closed
};

struct ProxyState;

class EgressProxy {
 public:
  // Serves on `listen_fd` (a listening TCP socket, e.g. from ListenInNetns) on its own threads until Stop().
  static StatusOr<std::unique_ptr<EgressProxy>> Start(ProxyConfig config, UniqueFd listen_fd);
  ~EgressProxy();
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  // Closes the listening socket and every open connection, then returns. Idempotent. A connection whose
  // thread is inside getaddrinfo finishes on its own (it holds its own reference to the shared state).
  void Stop();

  // Refused requests per host: not in the allow list, IP literal, or resolving only to refused addresses.
  std::map<std::string, uint64_t> DeniedHosts() const;
  uint64_t BytesIn() const;  // origin -> sandbox
  uint64_t BytesOut() const;  // sandbox -> origin (request heads as forwarded included)
  bool LimitReached() const;

 private:
  explicit EgressProxy(std::shared_ptr<ProxyState> state);
  std::shared_ptr<ProxyState> state_;
  struct Threads;
  std::unique_ptr<Threads> threads_;
};

// What the sandbox's environment gets so that curl, pip, npm, requests and urllib use the proxy:
// HTTP_PROXY/HTTPS_PROXY/http_proxy/https_proxy, NO_PROXY/no_proxy for the sandbox's own loopback,
// PIP_PROXY, npm_config_proxy/npm_config_https_proxy.
std::map<std::string, std::string> ProxyEnvironment(uint16_t port);

}  // namespace nsbox::netproxy
