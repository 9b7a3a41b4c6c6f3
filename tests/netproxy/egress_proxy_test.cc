// Integration tests for the egress proxy on the host's loopback: local servers stand in for allowed and
// refused domains through the test-only resolver override; raw sockets and libcurl play the sandbox.
#include "src/netproxy/egress_proxy.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <cctype>
#include <map>
#include <vector>

#include "src/netproxy/accept_pace.h"
#include "src/netproxy/local_route.h"
#include "tests/netproxy/test_servers.h"
#include "tests/netproxy/tls_hello.h"

using namespace nsbox;
using namespace nsbox::netproxy;
using namespace nsbox::netproxy::testing;
using Clock = std::chrono::steady_clock;

namespace {

struct RunningProxy {
  std::unique_ptr<EgressProxy> proxy;
  uint16_t port = 0;
  EgressProxy* operator->() { return proxy.get(); }
};

RunningProxy StartProxy(ProxyConfig config) {
  UniqueFd listener = MustListen();
  RunningProxy running;
  running.port = LocalPort(listener.get()).value();
  auto proxy = EgressProxy::Start(std::move(config), std::move(listener));
  INFO(proxy.status().message());
  REQUIRE(proxy.ok());
  running.proxy = std::move(proxy).value();
  return running;
}

// The usual test set-up: "allowed.test" and "refused.test" both resolve to 127.0.0.1, only the first is
// in the allow list, and loopback targets are opted in (the test servers live there). CONNECT goes to 443 and to
// the given ports (the test servers' own).
ProxyConfig LocalConfig(std::vector<uint16_t> connect_ports = {}) {
  ProxyConfig config;
  config.connect_ports.insert(config.connect_ports.end(), connect_ports.begin(), connect_ports.end());
  config.allowed_domains = {"allowed.test", "tunnel.allowed.test", "*.wild.test"};
  config.allow_private_addresses = true;
  config.resolver_override = {{"allowed.test", "127.0.0.1"},
                              {"refused.test", "127.0.0.1"},
                              {"a.wild.test", "127.0.0.1"},
                              {"tunnel.allowed.test", "127.0.0.1"}};
  return config;
}

std::string Get(const std::string& host, uint16_t port, const std::string& path = "/") {
  std::string authority = host + ":" + std::to_string(port);
  return "GET http://" + authority + path + " HTTP/1.1\r\nHost: " + authority +
         "\r\nProxy-Connection: keep-alive\r\nUser-Agent: test\r\n\r\n";
}

int64_t MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

struct CurlResult {
  CURLcode rc = CURLE_OK;
  long status = 0;
  std::string body;
  std::string error;
};

size_t AppendBody(char* data, size_t size, size_t count, void* target) {
  static_cast<std::string*>(target)->append(data, size * count);
  return size * count;
}

// A real HTTP client (libcurl, as pip's urllib3 or curl would behave) using the proxy.
CurlResult CurlFetch(uint16_t proxy_port, const std::string& url, bool follow_redirects,
                     const std::string& ca_file = "") {
  static const bool initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  REQUIRE(initialised);
  CurlResult result;
  CURL* curl = curl_easy_init();
  REQUIRE(curl != nullptr);
  char error[CURL_ERROR_SIZE] = "";
  std::string proxy = "http://127.0.0.1:" + std::to_string(proxy_port);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROXY, proxy.c_str());
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, follow_redirects ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &result.body);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  if (!ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, ca_file.c_str());
  result.rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
  if (result.status == 0) curl_easy_getinfo(curl, CURLINFO_HTTP_CONNECTCODE, &result.status);
  result.error = error;
  curl_easy_cleanup(curl);
  return result;
}

}  // namespace

TEST_CASE("an allowed domain is fetched through the proxy, with the request rewritten for the origin") {
  TestHttpServer origin([](const std::string&) { return HttpResponse(200, "hello from allowed.test\n"); });
  RunningProxy proxy = StartProxy(LocalConfig());

  std::string response = Exchange(proxy.port, Get("allowed.test", origin.port(), "/simple/pkg/?x=1"));
  CHECK(StatusLine(response) == "HTTP/1.1 200 X");
  CHECK(Body(response) == "hello from allowed.test\n");

  REQUIRE(origin.heads().size() == 1);
  std::string seen = origin.heads()[0];
  std::string authority = "allowed.test:" + std::to_string(origin.port());
  CHECK(seen.rfind("GET /simple/pkg/?x=1 HTTP/1.1\r\nHost: " + authority + "\r\n", 0) == 0);
  CHECK_THAT(seen, Catch::Contains("Connection: close\r\n") && Catch::Contains("User-Agent: test\r\n"));
  CHECK_THAT(seen, !Catch::Contains("Proxy-Connection"));
  CHECK(proxy->BytesOut() == seen.size());
  CHECK(proxy->BytesIn() == response.size());
  CHECK(proxy->DeniedHosts().empty());

  // The same through a real client, and through a wildcard entry.
  CurlResult fetched = CurlFetch(proxy.port, "http://a.wild.test:" + std::to_string(origin.port()) + "/", false);
  INFO(fetched.error);
  CHECK(fetched.rc == CURLE_OK);
  CHECK(fetched.status == 200);
  CHECK(fetched.body == "hello from allowed.test\n");
}

TEST_CASE("a domain outside the allow list is refused with a 403 naming it, never reached, and counted") {
  TestHttpServer refused_origin([](const std::string&) { return HttpResponse(200, "secret\n"); });
  RunningProxy proxy = StartProxy(LocalConfig());

  std::string response = Exchange(proxy.port, Get("refused.test", refused_origin.port()));
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 403 Forbidden"));
  CHECK_THAT(Body(response), Catch::Contains("refused.test is not in the --network allow list"));

  // HTTPS goes through CONNECT: refused the same way, and the status line itself says why.
  response = Exchange(proxy.port, "CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n");
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 403 Forbidden") &&
                                       Catch::Contains("refused.test is not in the --network allow list"));
  // A subdomain of an exact entry and the parent of a wildcard entry are other hosts.
  Exchange(proxy.port, Get("sub.allowed.test", refused_origin.port()));
  Exchange(proxy.port, Get("wild.test", refused_origin.port()));
  // An allowed URL with another host in its Host header is a 400, counted under the Host header's host.
  response = Exchange(proxy.port, "GET http://allowed.test/ HTTP/1.1\r\nHost: Other.Test.\r\n\r\n");
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 400"));

  CHECK(refused_origin.connections() == 0);
  CHECK(proxy->DeniedHosts() == std::map<std::string, uint64_t>{
                                    {"other.test", 1}, {"refused.test", 2}, {"sub.allowed.test", 1}, {"wild.test", 1}});
  CHECK(proxy->BytesIn() == 0);
  CHECK(proxy->BytesOut() == 0);
}

TEST_CASE("IP-literal targets are refused even with private addresses allowed") {
  TestHttpServer origin([](const std::string&) { return HttpResponse(200, "reached\n"); });
  RunningProxy proxy = StartProxy(LocalConfig());
  std::string port = std::to_string(origin.port());
  for (std::string host : {"127.0.0.1", "127.1", "2130706433", "0x7f000001", "[::1]", "[::ffff:127.0.0.1]"}) {
    INFO(host);
    std::string response = Exchange(
        proxy.port, "GET http://" + host + ":" + port + "/ HTTP/1.1\r\nHost: " + host + ":" + port + "\r\n\r\n");
    CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 403"));
    CHECK_THAT(Body(response), Catch::Contains("is an IP address"));
  }
  std::string response = Exchange(proxy.port, "CONNECT 127.0.0.1:" + port + " HTTP/1.1\r\n\r\n");
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 403"));
  CHECK(origin.connections() == 0);
  CHECK(proxy->DeniedHosts().at("127.0.0.1") == 2);
  CHECK(proxy->DeniedHosts().at("[::1]") == 1);
  // A bracketed "address" as long as the head allows is one short key, not up to 64 KB of nsbox's memory a host.
  for (char c : std::string("abc")) {
    const std::string junk = "[" + std::string(30000, c) + "]";
    response = Exchange(proxy.port, "GET http://" + junk + "/ HTTP/1.1\r\nHost: " + junk + "\r\n\r\n");
    CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 403"));
    CHECK(Body(response).size() < 200);
  }
  CHECK(proxy->DeniedHosts().at("(a malformed IP address)") == 3);
  // inet_aton takes any number of leading zeros: a long literal that is an address is counted as the address.
  const std::string zeros = "0x" + std::string(200, '0') + "7f000001";
  response = Exchange(proxy.port, "GET http://" + zeros + "/ HTTP/1.1\r\nHost: " + zeros + "\r\n\r\n");
  CHECK_THAT(Body(response), Catch::Contains(": 127.0.0.1 is an IP address"));
  CHECK(proxy->DeniedHosts().at("127.0.0.1") == 3);
  for (const auto& [host, count] : proxy->DeniedHosts()) CHECK(host.size() <= 64);
}

TEST_CASE("an allowed domain resolving to loopback, private or link-local is refused without the opt-in") {
  TestHttpServer origin([](const std::string&) { return HttpResponse(200, "reached\n"); });
  ProxyConfig config = LocalConfig();
  config.allow_private_addresses = false;
  config.resolver_override["metadata.allowed.test"] = "169.254.169.254";
  config.resolver_override["mapped.allowed.test"] = "::ffff:10.0.0.1";
  config.allowed_domains.push_back("*.allowed.test");
  RunningProxy proxy = StartProxy(config);

  std::string response = Exchange(proxy.port, Get("allowed.test", origin.port()));
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 403"));
  CHECK_THAT(Body(response), Catch::Contains("allowed.test resolves to 127.0.0.1 (loopback)"));
  response = Exchange(proxy.port, Get("metadata.allowed.test", 80));
  CHECK_THAT(Body(response), Catch::Contains("169.254.169.254 (link-local)"));
  response = Exchange(proxy.port, "CONNECT mapped.allowed.test:443 HTTP/1.1\r\n\r\n");
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 403") && Catch::Contains("(private)"));
  CHECK(origin.connections() == 0);
  CHECK(proxy->DeniedHosts() == std::map<std::string, uint64_t>{
                                    {"allowed.test", 1}, {"metadata.allowed.test", 1}, {"mapped.allowed.test", 1}});
}

TEST_CASE("the test resolver override replaces DNS: an allowed name missing from it fails with 502") {
  ProxyConfig config = LocalConfig();
  config.allowed_domains.push_back("pypi.org");
  RunningProxy proxy = StartProxy(config);
  std::string response = Exchange(proxy.port, Get("pypi.org", 80));
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 502"));
  CHECK_THAT(Body(response), Catch::Contains("cannot resolve pypi.org: not in the test resolver override"));
  CHECK(proxy->DeniedHosts().empty());
}

TEST_CASE("an allowed origin that is down is answered 502, not counted as refused") {
  uint16_t closed_port = LocalPort(MustListen().get()).value();  // listened on, then closed again
  RunningProxy proxy = StartProxy(LocalConfig());
  std::string response = Exchange(proxy.port, Get("allowed.test", closed_port));
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 502"));
  CHECK_THAT(Body(response), Catch::Contains("cannot connect to allowed.test") && Catch::Contains("ECONNREFUSED"));
  CHECK(proxy->DeniedHosts().empty());
}

TEST_CASE("a redirect to a refused host is refused when the client follows it") {
  TestHttpServer refused_origin([](const std::string&) { return HttpResponse(200, "secret\n"); });
  std::string target = "http://refused.test:" + std::to_string(refused_origin.port()) + "/secret";
  TestHttpServer allowed_origin(
      [&](const std::string&) { return HttpResponse(302, "moved\n", "Location: " + target + "\r\n"); });
  RunningProxy proxy = StartProxy(LocalConfig());

  CurlResult fetched =
      CurlFetch(proxy.port, "http://allowed.test:" + std::to_string(allowed_origin.port()) + "/start", true);
  CHECK(fetched.status == 403);
  CHECK_THAT(fetched.body, Catch::Contains("refused.test is not in the --network allow list"));
  CHECK(allowed_origin.connections() == 1);
  CHECK(refused_origin.connections() == 0);
  CHECK(proxy->DeniedHosts() == std::map<std::string, uint64_t>{{"refused.test", 1}});
}

TEST_CASE("a request body is forwarded behind the rewritten head, whether it came with the head or later") {
  // The origin reads the head, then exactly Content-Length bytes, and answers with what it got.
  TestServer origin([](int fd) {
    std::string head = ReadHeadBlocking(fd);
    size_t length = std::stoul(head.substr(head.find("Content-Length: ") + 16));
    std::string body(length, '\0');
    size_t got = 0;
    while (got < length) {
      ssize_t n = recv(fd, body.data() + got, length - got, 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    SendAllBlocking(fd, HttpResponse(200, "got " + body.substr(0, got)));
  });
  RunningProxy proxy = StartProxy(LocalConfig());
  std::string authority = "allowed.test:" + std::to_string(origin.port());
  UniqueFd client = ConnectLoopback(proxy.port);
  SendAllBlocking(client.get(), "POST http://" + authority + "/upload HTTP/1.1\r\nHost: " + authority +
                                    "\r\nContent-Length: 11\r\n\r\nhello");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  SendAllBlocking(client.get(), " world");
  CHECK(Body(ReadToEof(client.get())) == "got hello world");
}

TEST_CASE("CONNECT opens a tunnel that carries bytes both ways and passes on the half-close") {
  EchoServer echo;
  RunningProxy proxy = StartProxy(LocalConfig({echo.port()}));
  UniqueFd client = ConnectLoopback(proxy.port);
  REQUIRE(client);
  std::string authority = "tunnel.allowed.test:" + std::to_string(echo.port());
  // Bytes sent right behind the head (as a TLS client might: part of its ClientHello) must reach the server too.
  const std::string hello = ClientHelloFor("tunnel.allowed.test");
  SendAllBlocking(client.get(),
                  "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n" + hello.substr(0, 9));
  std::string established = ReadHeadBlocking(client.get());
  CHECK_THAT(established, Catch::StartsWith("HTTP/1.1 200 Connection established\r\n"));
  SendAllBlocking(client.get(), hello.substr(9) + "ping\n");
  shutdown(client.get(), SHUT_WR);
  CHECK(ReadToEof(client.get()) == hello + "ping\n");
  CHECK(proxy->BytesOut() == hello.size() + 5);
  CHECK(proxy->BytesIn() == hello.size() + 5);
}

TEST_CASE("a CONNECT tunnel whose TLS ClientHello names another host, or none, is closed before the origin sees it") {
  // Domain fronting: one address serves many names, and the ClientHello's server name picks the one that answers.
  EchoServer echo;
  RunningProxy proxy = StartProxy(LocalConfig({echo.port()}));
  const std::string authority = "tunnel.allowed.test:" + std::to_string(echo.port());
  struct Attempt {
    const char* what;
    std::string first_bytes;
    const char* counted_as;
  };
  const std::vector<Attempt> attempts = {
      {"another host's name", ClientHelloFor("internal.evil"), "internal.evil"},
      {"an allowed domain's other name", ClientHelloFor("allowed.test"), "allowed.test"},
      {"no server name", Records(ClientHelloMessage(Be(43, 2) + Vec(Vec(Be(0x0304, 2), 1), 2))),
       "tunnel.allowed.test"},
      {"two names", Records(ClientHelloMessage(ServerNameExtension({"tunnel.allowed.test", "internal.evil"}))),
       "tunnel.allowed.test"},
      {"plain HTTP instead of TLS", "GET / HTTP/1.1\r\nHost: internal.evil\r\n\r\n", "tunnel.allowed.test"},
  };
  for (const Attempt& attempt : attempts) {
    INFO(attempt.what);
    uint64_t denied_before = 0;
    if (auto denied = proxy->DeniedHosts(); denied.count(attempt.counted_as))
      denied_before = denied[attempt.counted_as];
    UniqueFd client = ConnectLoopback(proxy.port);
    REQUIRE(client);
    SendAllBlocking(client.get(), "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n");
    CHECK_THAT(ReadHeadBlocking(client.get()), Catch::StartsWith("HTTP/1.1 200"));
    SendAllBlocking(client.get(), attempt.first_bytes);
    CHECK(ReadToEof(client.get()).empty());
    CHECK(proxy->DeniedHosts()[attempt.counted_as] == denied_before + 1);
  }
  CHECK(proxy->BytesOut() == 0);
}

TEST_CASE("the byte limit caps traffic exactly and refuses later requests") {
  std::string big(200'000, 'x');
  TestHttpServer origin([&](const std::string&) { return HttpResponse(200, big); });
  ProxyConfig config = LocalConfig();
  config.byte_limit = 10'000;
  RunningProxy proxy = StartProxy(config);

  std::string response = Exchange(proxy.port, Get("allowed.test", origin.port()));
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 200"));
  CHECK(response.size() < 10'000);
  CHECK(proxy->BytesIn() + proxy->BytesOut() == 10'000);
  CHECK(proxy->BytesIn() == response.size());
  CHECK(proxy->LimitReached());

  response = Exchange(proxy.port, Get("allowed.test", origin.port()));
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 403"));
  CHECK_THAT(Body(response), Catch::Contains("byte limit (10000 bytes, --network-limit) is used up"));
  CHECK(origin.connections() == 1);
  CHECK(proxy->BytesIn() + proxy->BytesOut() == 10'000);
}

TEST_CASE("malformed and hostile input gets an answer or a close, never a crash, and the proxy keeps serving") {
  TestHttpServer origin([](const std::string&) { return HttpResponse(200, "still here\n"); });
  ProxyConfig config = LocalConfig();
  config.max_head_bytes = 8192;
  config.head_timeout = std::chrono::milliseconds(2000);
  RunningProxy proxy = StartProxy(config);

  CHECK_THAT(StatusLine(Exchange(proxy.port, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")),
             Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(StatusLine(Exchange(proxy.port, "hello\r\n\r\n")), Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(StatusLine(Exchange(proxy.port, std::string("GET http://a\0b/ HTTP/1.1\r\n\r\n", 28))),
             Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(StatusLine(Exchange(proxy.port, "GET http://allowed.test/ HTTP/1.1\r\nX-Big: " + std::string(20000, 'a'))),
             Catch::StartsWith("HTTP/1.1 431"));
  CHECK_THAT(StatusLine(Exchange(proxy.port, "GET http://bad..name/ HTTP/1.1\r\n\r\n")),
             Catch::StartsWith("HTTP/1.1 400"));
  CHECK(Exchange(proxy.port, "GET http://allowed.test/ HTT").empty());  // closed half-way: no answer owed

  std::mt19937 random(12345);
  for (int i = 0; i < 300; ++i) {
    std::string junk(random() % 600, '\0');
    for (char& c : junk) c = static_cast<char>(random());
    if (i % 3 == 0) junk += "\r\n\r\n";
    if (i % 3 == 1) junk = "CONNECT " + junk + "\r\n\r\n";
    Exchange(proxy.port, junk);
  }

  std::string response = Exchange(proxy.port, Get("allowed.test", origin.port()));
  CHECK(Body(response) == "still here\n");
  CHECK(origin.connections() == 1);
}

TEST_CASE("a client that never completes its request head is answered 408 after the head timeout") {
  ProxyConfig config = LocalConfig();
  config.head_timeout = std::chrono::milliseconds(300);
  RunningProxy proxy = StartProxy(config);
  UniqueFd client = ConnectLoopback(proxy.port);
  SendAllBlocking(client.get(), "GET http://allowed.test/ HTTP/1.1\r\n");
  Clock::time_point start = Clock::now();
  CHECK_THAT(StatusLine(ReadToEof(client.get())), Catch::StartsWith("HTTP/1.1 408"));
  CHECK(MillisecondsSince(start) < 15000);  // the configured 300 ms, not the default head timeout of 30 s
}

TEST_CASE("a request head with bare LF line ends is answered 400 at once, not 408 after the head timeout") {
  ProxyConfig config = LocalConfig();
  config.head_timeout = std::chrono::seconds(30);
  RunningProxy proxy = StartProxy(config);
  UniqueFd client = ConnectLoopback(proxy.port);
  SendAllBlocking(client.get(), "GET http://allowed.test/ HTTP/1.1\nHost: allowed.test\n\n");
  std::string response = ReadToEof(client.get());
  CHECK_THAT(StatusLine(response), Catch::StartsWith("HTTP/1.1 400"));  // not the 408 of the 30 s head timeout
  CHECK_THAT(response, Catch::Contains("bare LF"));
}

TEST_CASE("connections beyond the limit are answered 503 and the slots come back") {
  TestHttpServer origin([](const std::string&) { return HttpResponse(200, "ok\n"); });
  ProxyConfig config = LocalConfig();
  config.max_connections = 2;
  RunningProxy proxy = StartProxy(config);
  {
    UniqueFd first = ConnectLoopback(proxy.port);
    UniqueFd second = ConnectLoopback(proxy.port);
    SendAllBlocking(first.get(), "GET http://allowed.test/ HTTP/1.1\r\n");  // both sit in ReadHead
    SendAllBlocking(second.get(), "GET http://allowed.test/ HTTP/1.1\r\n");
    // Until the proxy has taken both, a third still gets a slot (and gives it back): ask again for up to 10 s.
    std::string third;
    for (int i = 0; i < 50 && !third.starts_with("HTTP/1.1 503"); ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      third = StatusLine(Exchange(proxy.port, Get("allowed.test", origin.port())));
    }
    CHECK_THAT(third, Catch::StartsWith("HTTP/1.1 503"));
  }
  // The two threads see EOF and leave: their slots come back (within 10 s).
  std::string body;
  for (int i = 0; i < 50 && body != "ok\n"; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    body = Body(Exchange(proxy.port, Get("allowed.test", origin.port())));
  }
  CHECK(body == "ok\n");
}

TEST_CASE("the accept pace lets a second's worth through at once, then one per 1/rate") {
  AcceptPace::Clock::time_point t0{};
  AcceptPace pace(4, t0);
  for (int i = 0; i < 4; ++i) {
    CHECK(pace.WaitBeforeNext(t0).count() == 0);
    pace.Take(t0);
  }
  auto wait = pace.WaitBeforeNext(t0);
  CHECK(wait >= std::chrono::milliseconds(250));
  CHECK(wait <= std::chrono::milliseconds(251));
  CHECK(pace.WaitBeforeNext(t0 + std::chrono::milliseconds(250)).count() == 0);
  pace.Take(t0 + std::chrono::milliseconds(250));
  CHECK(pace.WaitBeforeNext(t0 + std::chrono::milliseconds(250)).count() > 0);
  // A long quiet spell refills no more than one second's worth.
  auto later = t0 + std::chrono::hours(1);
  for (int i = 0; i < 4; ++i) {
    CHECK(pace.WaitBeforeNext(later).count() == 0);
    pace.Take(later);
  }
  CHECK(pace.WaitBeforeNext(later).count() > 0);
}

TEST_CASE("connections over the pace wait in the backlog and are all answered") {
  ProxyConfig config = LocalConfig();
  config.max_new_connections_per_second = 5;
  RunningProxy proxy = StartProxy(config);
  Clock::time_point start = Clock::now();
  for (int i = 0; i < 15; ++i) {
    INFO(i);
    CHECK_THAT(StatusLine(Exchange(proxy.port, Get("refused.test", 80))), Catch::StartsWith("HTTP/1.1 403"));
  }
  // Five at once, then ten more at five a second: a sandbox's loop of connections cannot go faster.
  CHECK(MillisecondsSince(start) >= 1900);
  CHECK(proxy->DeniedHosts().at("refused.test") == 15);
}

TEST_CASE("Stop ends open tunnels and closes the port promptly, and the counts stay readable") {
  EchoServer echo;
  RunningProxy proxy = StartProxy(LocalConfig({echo.port()}));
  UniqueFd client = ConnectLoopback(proxy.port);
  std::string authority = "tunnel.allowed.test:" + std::to_string(echo.port());
  SendAllBlocking(client.get(), "CONNECT " + authority + " HTTP/1.1\r\n\r\n");
  CHECK_THAT(ReadHeadBlocking(client.get()), Catch::StartsWith("HTTP/1.1 200"));
  Exchange(proxy.port, Get("refused.test", 80));

  Clock::time_point start = Clock::now();
  proxy->Stop();
  CHECK(MillisecondsSince(start) < 20000);  // a hang watchdog: an open tunnel once held Stop until it ended
  CHECK(ReadToEof(client.get()).empty());
  CHECK_FALSE(ConnectLoopback(proxy.port));
  CHECK(proxy->DeniedHosts().at("refused.test") == 1);
  proxy->Stop();  // idempotent
}

TEST_CASE("HTTPS through CONNECT reaches a real TLS server that is allowed") {
  REQUIRE(access("/usr/bin/openssl", X_OK) == 0);  // tools/setup installs it
  char dir_template[] = "/tmp/nsbox-netproxy-tls-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  std::filesystem::path dir = dir_template;
  struct RemoveDir {
    std::filesystem::path path;
    ~RemoveDir() { std::filesystem::remove_all(path); }
  } remove_dir{dir};
  std::string key = (dir / "key.pem").string();
  std::string cert = (dir / "cert.pem").string();
  std::string make_cert = "/usr/bin/openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=secure.test "
                          "-addext subjectAltName=DNS:secure.test -keyout " + key + " -out " + cert + " 2>/dev/null";
  REQUIRE(std::system(make_cert.c_str()) == 0);

  uint16_t tls_port = LocalPort(MustListen().get()).value();
  std::string accept = "127.0.0.1:" + std::to_string(tls_port);
  pid_t server = fork();
  REQUIRE(server >= 0);
  if (server == 0) {
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl("/usr/bin/openssl", "openssl", "s_server", "-accept", accept.c_str(), "-cert", cert.c_str(), "-key",
          key.c_str(), "-www", "-quiet", static_cast<char*>(nullptr));
    _exit(127);
  }
  struct KillServer {
    pid_t pid;
    ~KillServer() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } kill_server{server};
  bool listening = false;
  for (int i = 0; i < 100 && !listening; ++i) {
    listening = static_cast<bool>(ConnectLoopback(tls_port));
    if (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(listening);

  ProxyConfig config = LocalConfig({static_cast<uint16_t>(tls_port)});
  config.allowed_domains.push_back("secure.test");
  config.resolver_override["secure.test"] = "127.0.0.1";
  RunningProxy proxy = StartProxy(config);
  CurlResult fetched = CurlFetch(proxy.port, "https://secure.test:" + std::to_string(tls_port) + "/", false, cert);
  INFO(fetched.error);
  CHECK(fetched.rc == CURLE_OK);
  CHECK(fetched.status == 200);
  CHECK_THAT(fetched.body, Catch::Contains("s_server"));
  CHECK(proxy->BytesIn() > 1000);  // the certificate and the page, encrypted
  CHECK(proxy->DeniedHosts().empty());
}

namespace {

// Runs argv with `environment` added, output to `log`; returns the exit status (or -1).
int RunWithEnvironment(const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment,
                       const std::string& log) {
  std::vector<std::string> env_strings;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string text = *entry;
    std::string name = text.substr(0, text.find('='));
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // The caller's own proxy settings must not leak into what is under test.
    if (lower.find("proxy") != std::string::npos || name.rfind("PIP_", 0) == 0) continue;
    env_strings.push_back(text);
  }
  for (const auto& [name, value] : environment) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& text : env_strings) envp.push_back(text.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& arg : args) argp.push_back(arg.data());
  argp.push_back(nullptr);
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    dup2(out, 1);
    dup2(out, 2);
    execve(argp[0], argp.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadWholeFile(const std::string& path) {
  std::string data;
  if (FILE* file = std::fopen(path.c_str(), "rb")) {
    char buffer[4096];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) data.append(buffer, got);
    std::fclose(file);
  }
  return data;
}

}  // namespace

TEST_CASE("pip installs from a local package index through the proxy using only ProxyEnvironment") {
  REQUIRE(access("/usr/bin/python3", X_OK) == 0);
  char dir_template[] = "/tmp/nsbox-netproxy-pip-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  std::filesystem::path dir = dir_template;
  struct RemoveDir {
    std::filesystem::path path;
    ~RemoveDir() { std::filesystem::remove_all(path); }
  } remove_dir{dir};

  // A one-module wheel, made with the standard library's zipfile.
  std::string wheel_path = (dir / "nsboxdemo-1.0-py3-none-any.whl").string();
  std::string make_wheel =
      "import sys, zipfile\n"
      "files = {'nsboxdemo/__init__.py': 'GREETING = \"installed through the proxy\"\\n',\n"
      "  'nsboxdemo-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: nsboxdemo\\nVersion: 1.0\\n',\n"
      "  'nsboxdemo-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\n"
      "Tag: py3-none-any\\n'}\n"
      "files['nsboxdemo-1.0.dist-info/RECORD'] = ''.join(n + ',,\\n' for n in files) + "
      "'nsboxdemo-1.0.dist-info/RECORD,,\\n'\n"
      "with zipfile.ZipFile(sys.argv[1], 'w') as z:\n"
      "    [z.writestr(n, c) for n, c in files.items()]\n";
  REQUIRE(RunWithEnvironment({"/usr/bin/python3", "-c", make_wheel, wheel_path}, {}, (dir / "wheel.log").string()) ==
          0);
  std::string wheel = ReadWholeFile(wheel_path);
  REQUIRE(!wheel.empty());

  TestHttpServer index([&](const std::string& head) {
    if (head.rfind("GET /simple/nsboxdemo/ ", 0) == 0) {
      return HttpResponse(200,
                          "<!DOCTYPE html><html><body><a href=\"/files/nsboxdemo-1.0-py3-none-any.whl\">"
                          "nsboxdemo-1.0-py3-none-any.whl</a></body></html>\n",
                          "Content-Type: text/html\r\n");
    }
    if (head.rfind("GET /files/nsboxdemo-1.0-py3-none-any.whl ", 0) == 0) return HttpResponse(200, wheel);
    return HttpResponse(404, "not found\n");
  });
  ProxyConfig config = LocalConfig();
  config.resolver_override["index.test"] = "127.0.0.1";
  config.allowed_domains.push_back("index.test");
  RunningProxy proxy = StartProxy(config);

  std::map<std::string, std::string> environment = ProxyEnvironment(proxy.port);
  environment["PIP_DISABLE_PIP_VERSION_CHECK"] = "1";
  environment["PIP_NO_CACHE_DIR"] = "1";
  environment["PIP_RETRIES"] = "0";
  environment["PIP_TRUSTED_HOST"] = "index.test refused.test";  // plain http, as a local index is
  std::string log = (dir / "pip.log").string();
  std::string index_url = "http://index.test:" + std::to_string(index.port()) + "/simple/";
  int status = RunWithEnvironment({"/usr/bin/python3", "-m", "pip", "install", "--no-deps", "--target",
                                   (dir / "site").string(), "--index-url", index_url, "nsboxdemo"},
                                  environment, log);
  INFO(ReadWholeFile(log));
  REQUIRE(status == 0);
  CHECK_THAT(ReadWholeFile((dir / "site" / "nsboxdemo" / "__init__.py").string()),
             Catch::Contains("installed through the proxy"));
  CHECK(index.heads().size() >= 2);
  CHECK(proxy->BytesIn() > wheel.size());

  // The same pip, pointed at an index outside the list, fails, and the refusal is on record.
  environment["PIP_TIMEOUT"] = "5";
  status = RunWithEnvironment({"/usr/bin/python3", "-m", "pip", "download", "--no-deps", "-d", (dir / "dl").string(),
                               "--index-url", "http://refused.test:" + std::to_string(index.port()) + "/simple/",
                               "nsboxdemo"},
                              environment, log);
  CHECK(status != 0);
  CHECK(proxy->DeniedHosts().at("refused.test") >= 1);
}

TEST_CASE("CONNECT goes only to port 443 (and the configured ports): a tunnel to port 80 is refused") {
  // Through a tunnel to port 80 a client could send any Host to the allowed domain's address, unchecked.
  EchoServer echo;
  RunningProxy proxy = StartProxy(LocalConfig());
  for (const std::string& port : {std::string("80"), std::to_string(echo.port())}) {
    std::string response =
        Exchange(proxy.port, "CONNECT tunnel.allowed.test:" + port + " HTTP/1.1\r\nHost: tunnel.allowed.test:" + port +
                                 "\r\n\r\n");
    INFO(response);
    CHECK(StatusLine(response).rfind("HTTP/1.1 403", 0) == 0);
    CHECK_THAT(response, Catch::Contains("port " + port) && Catch::Contains("443"));
  }
  CHECK(echo.connections() == 0);
}

TEST_CASE("a request pipelined behind an allowed one never reaches the origin, nor bytes past the body") {
  std::mutex mutex;
  std::string received;
  TestServer origin([&](int fd) {
    std::string all = ReadHeadBlocking(fd);
    // Whatever else arrives within a moment: the proxy must send nothing more than the head and its body.
    for (;;) {
      pollfd ready = {fd, POLLIN, 0};
      if (poll(&ready, 1, 300) <= 0) break;
      char buffer[4096];
      ssize_t n = recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      all.append(buffer, static_cast<size_t>(n));
    }
    {
      std::lock_guard lock(mutex);
      received += all;
    }
    SendAllBlocking(fd, HttpResponse(200, "first\n"));
  });
  RunningProxy proxy = StartProxy(LocalConfig());
  const std::string authority = "allowed.test:" + std::to_string(origin.port());
  const std::string smuggled = "GET /admin HTTP/1.1\r\nHost: internal.evil\r\n\r\n";
  std::string response = Exchange(proxy.port, "GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority +
                                                  "\r\n\r\n" + smuggled);
  CHECK(Body(response) == "first\n");
  response = Exchange(proxy.port, "POST http://" + authority + "/ HTTP/1.1\r\nHost: " + authority +
                                      "\r\nContent-Length: 5\r\n\r\nhello" + smuggled);
  CHECK(Body(response) == "first\n");
  std::lock_guard lock(mutex);
  INFO(received);
  CHECK_THAT(received, Catch::Contains("\r\n\r\nhello") && !Catch::Contains("internal.evil"));
  // A chunked body would need parsing to find its end: refused.
  response = Exchange(proxy.port, "POST http://" + authority + "/ HTTP/1.1\r\nHost: " + authority +
                                      "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  CHECK(StatusLine(response).rfind("HTTP/1.1 501", 0) == 0);
}

TEST_CASE("an allowed domain resolving to one of the host's own addresses is refused") {
  ProxyConfig config = LocalConfig();
  config.allow_private_addresses = false;
  // A public address standing for one of this host's interfaces (the host here has only private ones).
  config.host_addresses_override = {"93.184.216.34", "2606:2800:220:1::7"};
  config.resolver_override["self.allowed.test"] = "93.184.216.34";
  config.allowed_domains.push_back("self.allowed.test");
  RunningProxy proxy = StartProxy(config);
  std::string response = Exchange(proxy.port, Get("self.allowed.test", 8080));
  INFO(response);
  CHECK(StatusLine(response).rfind("HTTP/1.1 403", 0) == 0);
  CHECK_THAT(response, Catch::Contains("an address of this host"));
  CHECK_THAT(response, !Catch::Contains("special-purpose"));
}

TEST_CASE("the host's own IPv4 address inside an IPv6 one (NAT64, IPv4-translated) is the host's too") {
  for (const char* wrapped : {"64:ff9b::5db8:d822", "::ffff:0:5db8:d822", "2002:5db8:d822::1"}) {
    INFO(wrapped);
    ProxyConfig config = LocalConfig();
    config.allow_private_addresses = false;
    config.host_addresses_override = {"93.184.216.34"};
    config.resolver_override["self.allowed.test"] = wrapped;
    config.allowed_domains.push_back("self.allowed.test");
    RunningProxy proxy = StartProxy(config);
    std::string response = Exchange(proxy.port, Get("self.allowed.test", 8080));
    CHECK(StatusLine(response).rfind("HTTP/1.1 403", 0) == 0);
    CHECK_THAT(response, Catch::Contains("an address of this host"));
  }
}

TEST_CASE("an allowed domain resolving into a prefix on lo (this host's, on no interface's list) is refused") {
  if (::geteuid() != 0) {
    RecordSkip("lo prefix refused", "needs root: a network namespace of its own with an address on lo");
    return;
  }
  // In a child with a network namespace of its own: 11.11.11.11/24 on lo makes the whole /24 this host's, though
  // getifaddrs lists only .11. The kernel's route (RTN_LOCAL) says so for .12; an address off the prefix has none.
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNET) != 0) _exit(10);
    if (std::system("ip link set lo up && ip addr add 11.11.11.11/24 dev lo") != 0) _exit(11);
    sockaddr_in in_prefix{}, off_prefix{};
    in_prefix.sin_family = off_prefix.sin_family = AF_INET;
    ::inet_pton(AF_INET, "11.11.11.12", &in_prefix.sin_addr);
    ::inet_pton(AF_INET, "11.11.12.1", &off_prefix.sin_addr);
    auto local = RouteTypeOf(reinterpret_cast<sockaddr*>(&in_prefix));
    auto remote = RouteTypeOf(reinterpret_cast<sockaddr*>(&off_prefix));
    if (!local.ok() || *local != RTN_LOCAL) _exit(12);
    if (!remote.ok() || *remote == RTN_LOCAL) _exit(13);
    ProxyConfig config;
    config.allow_private_addresses = false;
    config.allowed_domains = {"lo-prefix.allowed.test"};
    config.resolver_override = {{"lo-prefix.allowed.test", "11.11.11.12"}};
    auto listener = ListenOnLoopback(0);
    if (!listener.ok()) _exit(14);
    auto port = LocalPort(listener->get());
    auto proxy = EgressProxy::Start(std::move(config), std::move(*listener));
    if (!port.ok() || !proxy.ok()) _exit(15);
    std::string response = Exchange(*port, Get("lo-prefix.allowed.test", 8000));
    if (response.rfind("HTTP/1.1 403", 0) != 0) _exit(16);
    if (response.find("11.11.11.12 (an address of this host)") == std::string::npos) _exit(17);
    (*proxy)->Stop();
    _exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO("the child's exit status (10+: the step that failed, see above): " << status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
