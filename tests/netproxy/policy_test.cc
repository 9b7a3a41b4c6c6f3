// Unit tests for the proxy's pure parts: the allow list, the address check and request-head parsing.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>

#include "src/netproxy/address_class.h"
#include "src/netproxy/allow_list.h"
#include "src/netproxy/egress_proxy.h"
#include "src/netproxy/http_head.h"

using namespace nsbox::netproxy;

namespace {

std::string RangeOf(const char* text) {
  sockaddr_in v4{};
  sockaddr_in6 v6{};
  if (inet_pton(AF_INET, text, &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    return std::string(SpecialAddressRange(reinterpret_cast<sockaddr*>(&v4)));
  }
  REQUIRE(inet_pton(AF_INET6, text, &v6.sin6_addr) == 1);
  v6.sin6_family = AF_INET6;
  return std::string(SpecialAddressRange(reinterpret_cast<sockaddr*>(&v6)));
}

HeadError Parse(const std::string& head, ProxyRequest& request) { return ParseRequestHead(head, request); }

}  // namespace

TEST_CASE("allow list parses domains and wildcards, lower-cased and deduplicated") {
  auto domains = ParseAllowList("allow=PyPI.org,files.pythonhosted.org.,*.Example.com,pypi.org");
  REQUIRE(domains.ok());
  CHECK(*domains == std::vector<std::string>{"pypi.org", "files.pythonhosted.org", "*.example.com"});
  CHECK(ParseAllowList("allow=localhost")->size() == 1);
}

TEST_CASE("allow list refuses addresses, ports, schemes, bare wildcards and junk, saying what to write") {
  auto message = [](const std::string& spec) {
    auto parsed = ParseAllowList(spec);
    return parsed.ok() ? std::string("(accepted)") : parsed.status().message();
  };
  CHECK_THAT(message("pypi.org"), Catch::Contains("expected allow=DOMAIN"));
  CHECK_THAT(message("allow="), Catch::Contains("empty domain"));
  CHECK_THAT(message("allow=pypi.org,,a.com"), Catch::Contains("empty domain"));
  CHECK_THAT(message("allow=10.0.0.1"), Catch::Contains("IP addresses are not accepted"));
  CHECK_THAT(message("allow=2130706433"), Catch::Contains("IP addresses are not accepted"));
  CHECK_THAT(message("allow=[::1]"), Catch::Contains("IP addresses are not accepted"));
  CHECK_THAT(message("allow=pypi.org:443"), Catch::Contains("without a port"));
  CHECK_THAT(message("allow=https://pypi.org"), Catch::Contains("without a scheme"));
  CHECK_THAT(message("allow=pypi.org/simple"), Catch::Contains("without a path"));
  CHECK_THAT(message("allow=*"), Catch::Contains("bare wildcard"));
  CHECK_THAT(message("allow=a.*.com"), Catch::Contains("whole first label"));
  CHECK_THAT(message("allow=*.com"), Catch::Contains("a wildcard over a whole top-level domain"));
  CHECK_THAT(message("allow=*.com."), Catch::Contains("a wildcard over a whole top-level domain"));
  CHECK(message("allow=com") == "(accepted)");  // a name, not a wildcard: only itself
  CHECK(message("allow=*.example.com") == "(accepted)");
  CHECK_THAT(message("allow=bad_dom ain.com"), Catch::Contains("not a valid domain name"));
  CHECK_THAT(message("allow=-bad.com"), Catch::Contains("not a valid domain name"));
  // One trailing dot is an absolute name; more are not a name (taking each off in turn once let them through).
  CHECK(message("allow=allowed.test.") == "(accepted)");
  CHECK_THAT(message("allow=allowed.test.."), Catch::Contains("not a valid domain name"));
  CHECK_THAT(message("allow=allowed.test..."), Catch::Contains("not a valid domain name"));
  CHECK_THAT(message("allow=*.allowed.test.."), Catch::Contains("not a valid domain name"));
  CHECK_FALSE(AllowEntryProblem("allowed.test..").empty());
}

TEST_CASE("an exact entry matches only itself; a wildcard matches every subdomain but not the parent") {
  std::vector<std::string> allowed = {"pypi.org", "*.example.com"};
  CHECK(HostAllowed(allowed, "pypi.org"));
  CHECK_FALSE(HostAllowed(allowed, "evil.pypi.org"));
  CHECK_FALSE(HostAllowed(allowed, "notpypi.org"));
  CHECK_FALSE(HostAllowed(allowed, "pypi.org.evil.com"));
  CHECK(HostAllowed(allowed, "a.example.com"));
  CHECK(HostAllowed(allowed, "a.b.example.com"));
  CHECK_FALSE(HostAllowed(allowed, "example.com"));
  CHECK_FALSE(HostAllowed(allowed, "badexample.com"));
  CHECK_FALSE(HostAllowed(allowed, ""));
}

TEST_CASE("host names normalise for matching and IP literals in every spelling are recognised") {
  CHECK(NormalizeHostName("PyPI.org.") == "pypi.org");
  CHECK(NormalizeHostName("127.0.0.1").empty());
  CHECK(NormalizeHostName("a..b").empty());
  CHECK(NormalizeHostName(std::string(64, 'a') + ".com").empty());
  for (const char* literal : {"127.0.0.1", "127.1", "0x7f000001", "2130706433", "0177.0.0.1", "[::1]",
                              "::ffff:127.0.0.1", "[::ffff:10.0.0.1]", "10.0.0.1."}) {
    INFO(literal);
    CHECK(IsIpLiteral(literal));
  }
  CHECK_FALSE(IsIpLiteral("pypi.org"));
  CHECK_FALSE(IsIpLiteral("1password.com"));
}

TEST_CASE("special-purpose addresses are refused in IPv4, IPv6 and v4-mapped form; public ones pass") {
  CHECK(RangeOf("127.0.0.1") == "loopback");
  CHECK(RangeOf("10.1.2.3") == "private");
  CHECK(RangeOf("172.31.255.255") == "private");
  CHECK(RangeOf("192.168.0.1") == "private");
  CHECK(RangeOf("169.254.169.254") == "link-local");  // the cloud metadata service
  CHECK(RangeOf("0.0.0.0") != "");
  CHECK(RangeOf("224.0.0.1") == "multicast");
  CHECK(RangeOf("255.255.255.255") != "");
  CHECK(RangeOf("100.64.0.1") != "");
  CHECK(RangeOf("::") == "unspecified");
  CHECK(RangeOf("::1") == "loopback");
  CHECK(RangeOf("fe80::1") == "link-local");
  CHECK(RangeOf("fd00::1") != "");
  CHECK(RangeOf("ff02::1") == "multicast");
  CHECK(RangeOf("::ffff:127.0.0.1") == "loopback");
  CHECK(RangeOf("::ffff:192.168.1.1") == "private");
  CHECK(RangeOf("64:ff9b::a00:1") == "private");  // NAT64 of 10.0.0.1
  CHECK(RangeOf("2002:7f00:1::") == "loopback");  // 6to4 of 127.0.0.1
  CHECK(RangeOf("::ffff:0:a00:1") == "private");  // SIIT's IPv4-translated 10.0.0.1
  CHECK(RangeOf("64:ff9b:1::a00:1") != "");       // local-use NAT64, refused whole
  CHECK(RangeOf("64:ff9b:1:ffff::1") != "");
  CHECK(RangeOf("64:ff9b::9765:df") == "");  // well-known NAT64 of a public address
  CHECK(RangeOf("151.101.0.223") == "");  // a public address (pypi.org's CDN)
  CHECK(RangeOf("172.32.0.1") == "");
  CHECK(RangeOf("2a04:4e42::223") == "");
  CHECK(RangeOf("::ffff:151.101.0.223") == "");
}

TEST_CASE("an absolute-form request parses and is rewritten for the origin with Host and Connection: close") {
  ProxyRequest request;
  HeadError error = Parse(
      "GET http://Files.Example.com:8080/a/b?c=d HTTP/1.1\r\nHost: files.example.com:8080\r\n"
      "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nConnection: keep-alive, X-Secret\r\n"
      "X-Secret: 1\r\nAccept: */*\r\n\r\n",
      request);
  REQUIRE(error.status == 0);
  CHECK(request.host == "files.example.com");
  CHECK(request.port == 8080);
  CHECK(request.path == "/a/b?c=d");
  CHECK_FALSE(request.is_connect);
  CHECK(BuildOriginHead(request) ==
        "GET /a/b?c=d HTTP/1.1\r\nHost: files.example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n");

  REQUIRE(Parse("GET http://example.com HTTP/1.0\r\n\r\n", request).status == 0);
  CHECK(request.port == 80);
  CHECK(request.path == "/");
  REQUIRE(Parse("GET http://example.com?q=1#frag HTTP/1.1\r\n\r\n", request).status == 0);
  CHECK(request.path == "/?q=1");
}

TEST_CASE("CONNECT parses host:port, IPv6 literals included") {
  ProxyRequest request;
  REQUIRE(Parse("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", request).status == 0);
  CHECK(request.is_connect);
  CHECK(request.host == "pypi.org");
  CHECK(request.port == 443);
  REQUIRE(Parse("CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", request).status == 0);
  CHECK(request.host == "[::1]");
  CHECK(request.port == 8443);
}

TEST_CASE("malformed or unsupported request heads are answered 400, 431 or 501 with a reason") {
  struct Case {
    std::string head;
    int status;
    std::string reason;
  };
  std::vector<Case> cases = {
      {"GET / HTTP/1.1\r\nHost: a.com\r\n\r\n", 400, "absolute URL"},
      {"GET http://a.com/ HTTP/2.0\r\n\r\n", 400, "protocol version"},
      {"GET http://a.com/\r\n\r\n", 400, "request line"},
      {"GET  http://a.com/ HTTP/1.1\r\n\r\n", 400, "request line"},
      {"G(T http://a.com/ HTTP/1.1\r\n\r\n", 400, "method"},
      {"GET https://a.com/ HTTP/1.1\r\n\r\n", 501, "CONNECT"},
      {"GET ftp://a.com/ HTTP/1.1\r\n\r\n", 501, "scheme"},
      {"GET http://user:pw@a.com/ HTTP/1.1\r\n\r\n", 400, "credentials"},
      {"GET http://a.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n", 400, "Host header names"},
      {"GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\nHost: a.com\r\n\r\n", 400, "more than one Host"},
      {"GET http://a.com/ HTTP/1.1\r\nNoColon\r\n\r\n", 400, "without a colon"},
      {"GET http://a.com/ HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400, "folded"},
      {"GET http://a.com/ HTTP/1.1\r\nX\n: a\r\n\r\n", 400, "bare CR"},
      {"GET http://a.com:99999/ HTTP/1.1\r\n\r\n", 400, "port"},
      {"GET http://a.com:0/ HTTP/1.1\r\n\r\n", 400, "port"},
      {"GET http:///path HTTP/1.1\r\n\r\n", 400, "no host"},
      {"CONNECT pypi.org HTTP/1.1\r\n\r\n", 400, "host:port"},
      {"CONNECT [::1 HTTP/1.1\r\n\r\n", 400, "IPv6"},
      {"\r\n\r\n", 400, "empty request line"},
      {"GET http://a.com/ HTTP/1.1\r\n", 400, "incomplete"},
  };
  std::string many_headers = "GET http://a.com/ HTTP/1.1\r\n";
  for (int i = 0; i < 200; ++i) many_headers += "X-" + std::to_string(i) + ": 1\r\n";
  cases.push_back({many_headers + "\r\n", 431, "too many"});
  for (const Case& c : cases) {
    INFO(c.head);
    ProxyRequest request;
    HeadError error = Parse(c.head, request);
    CHECK(error.status == c.status);
    CHECK_THAT(error.reason, Catch::Contains(c.reason));
  }
}

TEST_CASE("the sandbox environment points every common client at the proxy and keeps loopback direct") {
  auto environment = ProxyEnvironment(3128);
  for (const char* name : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "PIP_PROXY",
                           "npm_config_proxy", "npm_config_https_proxy"}) {
    INFO(name);
    CHECK(environment.at(name) == "http://127.0.0.1:3128");
  }
  CHECK_THAT(environment.at("NO_PROXY"), Catch::Contains("127.0.0.1") && Catch::Contains("localhost"));
  CHECK(environment.at("no_proxy") == environment.at("NO_PROXY"));
}
