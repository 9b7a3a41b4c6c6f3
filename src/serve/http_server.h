// HttpServer: the service's HTTP/1.1 front, on libmicrohttpd: one thread per connection, bodies capped, the peer's uid
// taken from the Unix socket, and responses that are either whole or streamed chunk by chunk.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "sandbox/base/status.h"

struct MHD_Daemon;

namespace nsbox::serve {

struct HttpRequest {
  std::string method, path;
  std::map<std::string, std::string> query;    // decoded ?k=v
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  bool over_unix_socket = false;
  std::optional<uid_t> peer_uid;  // SO_PEERCRED, Unix socket only
  std::function<bool()> client_gone;  // whether the client has closed its connection (a long answer may stop)
  // The handler has what it keeps of the body (an exec, parsed; its stdin counted with its answer's room): the body is
  // freed (request.body is empty from then on) and no longer counts against the cap on bodies held, which the
  // handler's run would otherwise hold for others too.
  std::function<void()> body_taken;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// What a streamed response writes through: Write returns false once the client is gone (the producer should stop).
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual bool Write(std::string chunk) = 0;
  virtual bool ClientGone() const = 0;
  // Keeps `hold` (a reservation for what the stream may queue) until the response is done with: sent, or its client
  // gone.
  virtual void KeepUntilSent(std::shared_ptr<void> hold) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more headers than Content-Type (Allow)
  // When set, the body is produced by this function on a thread of its own, chunk by chunk (chunked encoding); the
  // response ends when it returns.
  std::function<void(StreamSink&)> stream;
  // When set (whole responses only), called when the client has gone (closed its connection) by the time the response
  // is ready. It undoes what the request made for a client that never learns of it (a sandbox it cannot name).
  std::function<void()> undelivered;
  // Kept until the answer is freed (sent, or its client gone): what the handler reserved for it (the answer room).
  std::shared_ptr<void> hold;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  uint64_t max_body_bytes = 16 << 20;  // larger bodies are answered 413 before they are read
  unsigned connection_limit = 512;
  unsigned idle_timeout_seconds = 120;  // a client that sends nothing for this long is dropped
  // The answer to a body over max_body_bytes (413), so that it has the service's error format.
  std::function<HttpResponse(uint64_t limit)> too_large;
  // The bodies held at once, by all connections, counted as they arrive: a body past this has the rest of its bytes
  // dropped and is answered `busy` (503).
  uint64_t max_buffered_bytes = 256 << 20;
  std::function<HttpResponse(uint64_t limit)> busy;
  // The answers' bodies held at once, by all connections, until their clients have read them: past this an answer
  // waits for room; a GET's, after 10 s, is replaced by `answers_busy` (503: nothing was done, try again); any
  // other's (an exec's result) is sent all the same after the idle time-out. One answer alone always fits.
  uint64_t max_answer_bytes = 512 << 20;
  std::function<HttpResponse(uint64_t size, uint64_t held)> answers_busy;
  // Called once a request's head is read, before its body: a response refuses the request there and then (nothing
  // of its body is read or kept), nullopt lets it through. The request has no body and no query yet.
  std::function<std::optional<HttpResponse>(const HttpRequest& head)> admit;
};

class HttpServer {
 public:
  // Serves on `listen_fd` (bound and listening, AF_UNIX or AF_INET[6]); takes it.
  static StatusOr<std::unique_ptr<HttpServer>> Start(int listen_fd, bool unix_socket, HttpServerOptions options,
                                                      HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops accepting connections (the listening socket is closed); requests in progress go on.
  void StopAccepting();
  // Ends the server: waits (until `answers_until`, 10 s from now by default) for the answers of requests in progress
  // and for streams to be sent, then for the connections' threads.
  void Stop(std::chrono::steady_clock::time_point answers_until = std::chrono::steady_clock::now() +
                                                                  std::chrono::seconds(10));

  // Bytes of request bodies held (reserved) now, by all connections: what max_buffered_bytes bounds.
  uint64_t HeldBodyBytes() const { return buffered_.load(); }

  struct Connection;  // one request's state (http_server.cc)

 private:
  HttpServer() = default;
  void StartProducer(std::function<void()> produce);
  MHD_Daemon* daemon_ = nullptr;
  int listen_fd_ = -1;
  bool unix_socket_ = false;
  HttpServerOptions options_;
  HttpHandler handler_;
  std::mutex producers_mutex_;  // guards producers_ and answers_pending_; producers_done_ says either fell
  std::condition_variable producers_done_;
  int producers_ = 0;
  int answers_pending_ = 0;  // requests whose handler ran and whose answer is not sent yet (Stop waits for them)
  std::atomic<uint64_t> buffered_{0};      // request bodies' bytes held (reserved) by all connections
  std::atomic<uint64_t> answers_held_{0};  // answers' bytes queued and not yet sent (HttpServerOptions)

  friend struct HttpServerCallbacks;
};

}  // namespace nsbox::serve
