// HttpPost through the nsbox-http helper, against raw TCP servers in this process: bytes both ways, cancel, time-out,
// refusal.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "src/agent/http_client.h"
#include "src/agent/http_wire.h"

using namespace nsbox;
using namespace std::chrono_literals;

namespace {

// One connection on 127.0.0.1: reads the request (headers and Content-Length body), then answers `reply` or, when
// it is empty, keeps the connection open and silent until the test ends.
class OneShotServer {
 public:
  explicit OneShotServer(std::string reply) : reply_(std::move(reply)) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(listen(listener_, 4) == 0);
    socklen_t len = sizeof addr;
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotServer() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    close(listener_);
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/post"; }
  // What the one request carried, once the server has answered it.
  std::string ReceivedBody() {
    thread_.join();
    return body_;
  }

 private:
  bool WaitReadable(int fd) {
    while (!done_) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) return true;
    }
    return false;
  }
  void Serve() {
    if (!WaitReadable(listener_)) return;
    int conn = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return;
    std::string request;
    char buffer[65536];
    size_t header_end = std::string::npos;
    size_t want = 0;
    while (WaitReadable(conn)) {
      ssize_t n = read(conn, buffer, sizeof buffer);
      if (n <= 0) break;
      request.append(buffer, static_cast<size_t>(n));
      if (header_end == std::string::npos && (header_end = request.find("\r\n\r\n")) != std::string::npos) {
        std::string head = request.substr(0, header_end);
        for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        size_t at = head.find("content-length:");
        want = at == std::string::npos ? 0 : std::stoul(head.substr(at + 15));
      }
      if (header_end != std::string::npos && request.size() >= header_end + 4 + want) break;
    }
    if (header_end != std::string::npos) body_ = request.substr(header_end + 4, want);
    if (!reply_.empty()) {
      // A client that stops reading (a body over its limit) ends the reply: no SIGPIPE.
      for (size_t sent = 0; sent < reply_.size();) {
        ssize_t n = send(conn, reply_.data() + sent, reply_.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
    } else {
      while (!done_) std::this_thread::sleep_for(20ms);
    }
    close(conn);
  }

  std::string reply_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> done_{false};
  std::thread thread_;
  std::string body_;
};

// Children of this process whose command name is nsbox-http.
int HelperChildren() {
  int count = 0;
  DIR* proc = opendir("/proc");
  while (dirent* e = readdir(proc)) {
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    size_t close_paren = line.rfind(')');
    if (close_paren == std::string::npos || line.find("(nsbox-http)") == std::string::npos) continue;
    int ppid = std::atoi(line.c_str() + close_paren + 4);  // ") S PPID"
    if (ppid == getpid()) ++count;
  }
  closedir(proc);
  return count;
}

std::string AllBytes() {
  std::string bytes;
  for (int round = 0; round < 4; ++round)
    for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  return bytes;
}

}  // namespace

TEST_CASE("HttpPost carries any bytes both ways through nsbox-http") {
  std::string body = AllBytes();
  OneShotServer server("HTTP/1.1 201 Created\r\nContent-Length: " + std::to_string(body.size()) +
                       "\r\nX-Odd: caf\xff\r\nRetry-After: 7\r\nConnection: close\r\n\r\n" + body);
  agent::HttpRequest request;
  request.url = server.Url();
  request.headers = {"Content-Type: application/octet-stream"};
  request.body = body;
  request.deadline = std::chrono::steady_clock::now() + 10s;
  auto result = agent::HttpPost(request);
  REQUIRE(result.error == agent::TransportError::kNone);
  CHECK(result.response.status == 201);
  CHECK(result.response.body == body);
  CHECK(result.response.headers.at("retry-after") == "7");
  CHECK(result.response.headers.at("x-odd") == "caf\xEF\xBF\xBD");  // invalid UTF-8 replaced, not fatal
  CHECK(server.ReceivedBody() == body);
  CHECK(HelperChildren() == 0);
}

TEST_CASE("a response body over the limit fails the request, naming the limit") {
  std::string body(agent::kMaxResponseBodyBytes + 1, 'x');
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                       "\r\nConnection: close\r\n\r\n" + body);
  agent::HttpRequest request;
  request.url = server.Url();
  request.body = "{}";
  request.deadline = std::chrono::steady_clock::now() + 30s;
  auto result = agent::HttpPost(request);
  CHECK(result.error == agent::TransportError::kOther);
  CHECK(result.error_message == "POST " + server.Url() + ": the response body is larger than nsbox's limit of 32 MiB");
  CHECK(result.response.body.empty());
  CHECK(HelperChildren() == 0);
}

TEST_CASE("a URL's credentials stay out of the error messages") {
  agent::HttpRequest request;
  request.url = "http://user:s3cr3t@127.0.0.1:1/";  // nothing listens on port 1
  auto result = agent::HttpPost(request);
  CHECK(result.error == agent::TransportError::kConnect);
  CHECK(result.error_message.rfind("POST http://user:[redacted]@127.0.0.1:1/: ", 0) == 0);
  CHECK(result.error_message.find("s3cr3t") == std::string::npos);
}

TEST_CASE("a cancelled request ends at once and leaves no nsbox-http behind") {
  OneShotServer server("");
  std::atomic<bool> cancel{false};
  agent::HttpRequest request;
  request.url = server.Url();
  request.body = "{}";
  request.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);
    cancel = true;
  });
  auto result = agent::HttpPost(request);
  canceller.join();
  CHECK(result.error == agent::TransportError::kCancelled);
  CHECK(result.error_message == "POST " + server.Url() + ": cancelled");
  CHECK(HelperChildren() == 0);
}

TEST_CASE("a request past its deadline is a time-out, in curl's words") {
  OneShotServer server("");
  agent::HttpRequest request;
  request.url = server.Url();
  request.body = "{}";
  request.deadline = std::chrono::steady_clock::now() + 500ms;
  auto result = agent::HttpPost(request);
  CHECK(result.error == agent::TransportError::kTimeout);
  CHECK(result.error_message.find("Operation timed out") != std::string::npos);
}

TEST_CASE("a refused connection is a connect error") {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  close(s);  // nothing listens there now
  agent::HttpRequest request;
  request.url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/";
  auto result = agent::HttpPost(request);
  CHECK(result.error == agent::TransportError::kConnect);
  CHECK(result.error_message.rfind("POST " + request.url + ": ", 0) == 0);
}

TEST_CASE("nsbox-http works only for the nsbox that started it") {
  int err[2];
  REQUIRE(pipe(err) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  std::string path = NSBOX_HTTP_HELPER;
  std::string not_parent = "1";
  char* argv[] = {path.data(), not_parent.data(), nullptr};
  char* envp[] = {nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, path.c_str(), &actions, nullptr, argv, envp) == 0);
  posix_spawn_file_actions_destroy(&actions);
  close(err[1]);
  std::string said;
  char buffer[512];
  ssize_t n;
  while ((n = read(err[0], buffer, sizeof buffer)) > 0) said.append(buffer, static_cast<size_t>(n));
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(said == "nsbox-http: run by nsbox only (nsbox-http PARENT-PID, request on stdin)\n");
}
