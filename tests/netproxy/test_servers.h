// Test helpers for the egress proxy: small servers on 127.0.0.1 standing in for internet hosts, and raw
// clients that show exactly what a program inside the sandbox would receive.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/base/unique_fd.h"
#include "src/netproxy/listen.h"
#include "tests/support/skip.h"

namespace nsbox::netproxy::testing {

inline UniqueFd MustListen() {
  auto listener = ListenOnLoopback(0);
  if (!listener.ok()) {
    std::fprintf(stderr, "%s\n", listener.status().message().c_str());
    std::abort();
  }
  return std::move(listener).value();
}

// Accepts connections one at a time on its own thread and hands each to `serve`.
class TestServer {
 public:
  explicit TestServer(std::function<void(int fd)> serve)
      : listener_(MustListen()), stop_(eventfd(0, EFD_CLOEXEC)), serve_(std::move(serve)) {
    port_ = LocalPort(listener_.get()).value();
    thread_ = std::thread([this] { Loop(); });
  }
  ~TestServer() {
    uint64_t one = 1;
    (void)!write(stop_.get(), &one, sizeof one);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void Loop() {
    while (true) {
      pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (poll(fds, 2, -1) < 0 || fds[1].revents) return;
      UniqueFd client(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!client) continue;
      ++connections_;
      timeval timeout{5, 0};
      setsockopt(client.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      setsockopt(client.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
      serve_(client.get());
    }
  }
  UniqueFd listener_;
  UniqueFd stop_;
  std::function<void(int)> serve_;
  uint16_t port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

inline void SendAllBlocking(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t sent = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent <= 0) return;
    data.remove_prefix(static_cast<size_t>(sent));
  }
}

// Reads until the blank line after the headers (or EOF / the socket's receive timeout).
inline std::string ReadHeadBlocking(int fd) {
  std::string head;
  char c;
  while (head.size() < 65536 && head.find("\r\n\r\n") == std::string::npos) {
    if (recv(fd, &c, 1, 0) != 1) break;
    head += c;
  }
  return head;
}

// An HTTP origin server: records each request head it receives and answers with respond(head).
class TestHttpServer {
 public:
  explicit TestHttpServer(std::function<std::string(const std::string& head)> respond)
      : respond_(std::move(respond)), server_([this](int fd) {
          std::string head = ReadHeadBlocking(fd);
          {
            std::lock_guard lock(mutex_);
            heads_.push_back(head);
          }
          SendAllBlocking(fd, respond_(head));
        }) {}
  uint16_t port() const { return server_.port(); }
  int connections() const { return server_.connections(); }
  std::vector<std::string> heads() const {
    std::lock_guard lock(mutex_);
    return heads_;
  }

 private:
  std::function<std::string(const std::string&)> respond_;
  mutable std::mutex mutex_;
  std::vector<std::string> heads_;
  TestServer server_;  // last: its thread uses the members above
};

inline std::string HttpResponse(int status, const std::string& body, const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + extra_headers + "\r\n" + body;
}

// A plaintext stand-in for a TLS server behind CONNECT: echoes every byte until the client half-closes.
class EchoServer {
 public:
  EchoServer()
      : server_([](int fd) {
          char buffer[4096];
          ssize_t got;
          while ((got = recv(fd, buffer, sizeof buffer, 0)) > 0) SendAllBlocking(fd, std::string_view(buffer, got));
        }) {}
  int connections() const { return server_.connections(); }
  uint16_t port() const { return server_.port(); }

 private:
  TestServer server_;
};

inline UniqueFd ConnectLoopback(uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return UniqueFd();
  timeval timeout{10, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

inline std::string ReadToEof(int fd, size_t max_bytes = 16 << 20) {
  std::string data;
  char buffer[16384];
  ssize_t got;
  while (data.size() < max_bytes && (got = recv(fd, buffer, sizeof buffer, 0)) > 0) data.append(buffer, got);
  return data;
}

// Sends `request` to the proxy as a client in the sandbox would, half-closes (so a proxy waiting for more
// of a head sees the end at once), and returns everything the proxy answers.
inline std::string Exchange(uint16_t proxy_port, std::string_view request) {
  UniqueFd fd = ConnectLoopback(proxy_port);
  if (!fd) return "(connect to the proxy failed)";
  SendAllBlocking(fd.get(), request);
  shutdown(fd.get(), SHUT_WR);
  return ReadToEof(fd.get());
}

inline std::string StatusLine(const std::string& response) { return response.substr(0, response.find("\r\n")); }

inline std::string Body(const std::string& response) {
  size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

// Records a skip where the kernel or the privileges truly lack what a test needs (see PREAMBLE).
inline void RecordSkip(const std::string& test, const std::string& reason) {
  nsbox::testing::RecordSkip("netproxy_tests", test, reason);
}

}  // namespace nsbox::netproxy::testing
