// ListenInNetns: a process in its own network namespace reaches the host-side proxy at 127.0.0.1:PORT over
// its own loopback, and nothing else; on the host's 127.0.0.1:PORT nothing answers.
#include <sched.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>

#include "src/netproxy/egress_proxy.h"
#include "tests/netproxy/test_servers.h"

using namespace nsbox;
using namespace nsbox::netproxy;
using namespace nsbox::netproxy::testing;

namespace {

// What the child in the new namespace reports back, in one pipe write.
struct ChildReport {
  int unshare_errno = 0;
  int direct_connect_errno = 0;  // connecting straight to the host's test server from inside
  int proxy_connect_errno = 0;
  char response[512] = {};
};

// Runs in the forked child: only system calls from here on (the parent has threads).
[[noreturn]] void ChildInNewNetns(int unshare_flags, int ready_fd, int go_fd, int report_fd, uint16_t origin_port,
                                  uint16_t proxy_port, const char* request, size_t request_length) {
  ChildReport report;
  if (unshare(unshare_flags) != 0) {
    report.unshare_errno = errno;
    (void)!write(report_fd, &report, sizeof report);
    _exit(1);
  }
  char byte = 'r';
  (void)!write(ready_fd, &byte, 1);
  if (read(go_fd, &byte, 1) != 1) _exit(2);

  auto connect_to = [](uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int err = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 ? 0 : errno;
    return std::pair<int, int>(fd, err);
  };
  auto [direct_fd, direct_err] = connect_to(origin_port);
  report.direct_connect_errno = direct_err;
  close(direct_fd);
  auto [fd, err] = connect_to(proxy_port);
  report.proxy_connect_errno = err;
  if (err == 0) {
    (void)!write(fd, request, request_length);
    size_t used = 0;
    ssize_t got;
    while (used < sizeof report.response - 1 &&
           (got = read(fd, report.response + used, sizeof report.response - 1 - used)) > 0) {
      used += static_cast<size_t>(got);
    }
  }
  (void)!write(report_fd, &report, sizeof report);
  _exit(0);
}

}  // namespace

TEST_CASE("a process in its own network namespace is served by the host-side proxy through ListenInNetns") {
  // With a user namespace too, the network namespace belongs to the sandbox's user namespace; the host's
  // root can still enter it and bring its loopback up.
  int unshare_flags = GENERATE(CLONE_NEWNET, CLONE_NEWNET | CLONE_NEWUSER);
  std::string variant = unshare_flags & CLONE_NEWUSER ? "user+net namespaces" : "net namespace";
  INFO(variant);
  TestHttpServer origin([](const std::string&) { return HttpResponse(200, "served across namespaces\n"); });
  // A port that is free on the host (listened on, then closed), to show the proxy is not reachable there.
  uint16_t proxy_port = LocalPort(MustListen().get()).value();
  std::string authority = "allowed.test:" + std::to_string(origin.port());
  std::string request = "GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";

  int ready[2], go[2], report_pipe[2];
  REQUIRE(pipe2(ready, O_CLOEXEC) == 0);
  REQUIRE(pipe2(go, O_CLOEXEC) == 0);
  REQUIRE(pipe2(report_pipe, O_CLOEXEC) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(ready[0]);
    close(go[1]);
    close(report_pipe[0]);
    ChildInNewNetns(unshare_flags, ready[1], go[0], report_pipe[1], origin.port(), proxy_port, request.data(),
                    request.size());
  }
  UniqueFd ready_read(ready[0]), go_write(go[1]), report_read(report_pipe[0]);
  close(ready[1]);
  close(go[0]);
  close(report_pipe[1]);
  struct Reap {
    pid_t pid;
    ~Reap() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reap{child};

  char byte;
  if (read(ready_read.get(), &byte, 1) != 1) {
    ChildReport report;
    REQUIRE(read(report_read.get(), &report, sizeof report) == static_cast<ssize_t>(sizeof report));
    if (report.unshare_errno == EPERM) {
      RecordSkip("ListenInNetns (" + variant + ")", "unshare needs root (EPERM)");
      return;
    }
    FAIL("unshare(" << variant << ") failed: " << std::strerror(report.unshare_errno));
  }

  auto listener = ListenInNetns(child, proxy_port);
  INFO(listener.status().message());
  REQUIRE(listener.ok());
  ProxyConfig config;
  config.allowed_domains = {"allowed.test"};
  config.allow_private_addresses = true;
  config.resolver_override = {{"allowed.test", "127.0.0.1"}};
  auto proxy = EgressProxy::Start(config, std::move(listener).value());
  REQUIRE(proxy.ok());

  CHECK_FALSE(ConnectLoopback(proxy_port));  // the host's own 127.0.0.1:PORT: nothing there
  REQUIRE(write(go_write.get(), "g", 1) == 1);
  ChildReport report;
  REQUIRE(read(report_read.get(), &report, sizeof report) == static_cast<ssize_t>(sizeof report));
  CHECK(report.direct_connect_errno == ECONNREFUSED);  // the host's servers are out of reach from inside
  CHECK(report.proxy_connect_errno == 0);
  std::string response = report.response;
  CHECK_THAT(response, Catch::StartsWith("HTTP/1.1 200"));
  CHECK(Body(response) == "served across namespaces\n");
  CHECK(origin.heads().size() == 1);
  (*proxy)->Stop();
}

TEST_CASE("ListenInNetns names the failing step for a process that does not exist") {
  auto listener = ListenInNetns(999'999'999, 0);
  REQUIRE_FALSE(listener.ok());
  CHECK_THAT(listener.status().message(), Catch::Contains("open(/proc/999999999/ns/net)") && Catch::Contains("ENOENT"));
}
