// HttpServer on libmicrohttpd (thread per connection): a request's body is gathered up to its cap, then the handler
// runs on the connection's thread; a streamed answer is produced on a thread of its own and handed to libmicrohttpd
// chunk by chunk.
#include "src/serve/http_server.h"
#include "src/serve/http_request_parsing.h"
#include "src/serve/http_stream.h"

#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace nsbox::serve {

// One request while it is read.
struct HttpServer::Connection {
  std::string raw_uri;  // as the client sent it, before libmicrohttpd's percent-decoding
  std::string body;
  bool too_large = false;
  bool busy = false;       // the bodies held at once left no room for this one: its bytes are dropped, a 503 at the end
  bool answered = false;   // a response was queued before the body was read (refused at admission)
  bool answering = false;  // its handler ran: counted in answers_pending_ until libmicrohttpd is done with it
  uint64_t counted = 0;    // bytes of server->buffered_ this request holds
  std::atomic<uint64_t>* buffered = nullptr;
  ~Connection() { Release(); }
  void Release() {
    if (buffered) *buffered -= counted;
    counted = 0;
  }
  // Counts a body of `bytes` (as its bytes come, in doublings) against the server's cap on the bodies it holds at
  // once; false when that would pass `cap`.
  bool Reserve(uint64_t bytes, uint64_t cap) {
    if (bytes <= counted) return true;
    const uint64_t more = bytes - counted;
    uint64_t now = buffered->load();
    do {
      if (now + more > cap) return false;
    } while (!buffered->compare_exchange_weak(now, now + more));
    counted = bytes;
    body.reserve(bytes);
    return true;
  }
};

namespace http_detail {  // with the helpers of http_request_parsing.h and http_stream.h

// The request's state, made when its head is read: with its URI as the client sent it (MHD_OPTION_URI_LOG_CALLBACK).
void* KeepRawUri(void*, const char* uri, MHD_Connection*) {
  auto* state = new HttpServer::Connection();
  state->raw_uri = uri ? uri : "";
  return state;
}

}  // namespace http_detail

using namespace http_detail;

struct HttpServerCallbacks {
  static MHD_Result Access(void* cls, MHD_Connection* connection, const char* url, const char* method, const char*,
                           const char* upload_data, size_t* upload_data_size, void** con_cls) {
    auto* server = static_cast<HttpServer*>(cls);
    auto* state = static_cast<HttpServer::Connection*>(*con_cls);
    if (!state) {  // KeepRawUri made it, unless libmicrohttpd did not call it
      state = new HttpServer::Connection();
      state->raw_uri = url ? url : "";
      *con_cls = state;
    }
    const int fd = ConnectionFd(connection);
    // The request's head: method, path, headers and the socket peer's uid (built on the first call and the last).
    auto head = [&] {
      HttpRequest request;
      request.method = method ? method : "";
      request.path = DecodePath(state->raw_uri);
      MHD_get_connection_values(connection, MHD_HEADER_KIND, &AddToMap, &request.headers);
      request.over_unix_socket = server->unix_socket_;
      if (server->unix_socket_ && fd >= 0) {
        struct ucred cred = {};
        socklen_t len = sizeof cred;
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) request.peer_uid = cred.uid;
      }
      return request;
    };
    if (!state->buffered) {  // the first call: the head is read, the body not yet
      state->buffered = &server->buffered_;
      // A client the service would refuse (no token, a uid not allowed) is answered now: nothing of its body is
      // read or kept.
      if (server->options_.admit) {
        if (std::optional<HttpResponse> refused = server->options_.admit(head())) {
          state->answered = true;
          return Queue(server, connection, *refused);
        }
      }
      const char* why = AmbiguousFraming(connection);
      if (!why && HasMalformedEscape(state->raw_uri)) why = "a '%' in its URI that is not followed by two hex digits";
      std::string repeated;
      if (!why) {
        if (std::optional<std::string> key = RepeatedQueryKey(connection)) {
          repeated = fmt::format("the query parameter '{}' twice", *key);
          why = repeated.c_str();
        }
      }
      if (why) {
        state->answered = true;
        HttpResponse refused;
        refused.status = 400;
        refused.body = ErrorBody("bad_request", fmt::format("the request has {}", why));
        return Queue(server, connection, std::move(refused));
      }
      // A declared length over the cap is refused before any of the body is read.
      const char* length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
      const uint64_t declared = length ? std::strtoull(length, nullptr, 10) : 0;
      if (declared > server->options_.max_body_bytes) {
        state->too_large = true;
        state->answered = true;
        return Queue(server, connection, server->options_.too_large(server->options_.max_body_bytes));
      }
      // Nothing is counted (or allocated) for a declared length until its bytes come: a client that declares 16 MB
      // and sends nothing holds nothing of the cap that other clients' bodies share.
      return MHD_YES;
    }
    if (state->answered) {
      *upload_data_size = 0;  // what still comes of a refused request's body is dropped
      return MHD_YES;
    }
    // libmicrohttpd takes no answer while a body is still coming: a refusal found in the middle of one drops the
    // rest of its bytes and is answered once they are in.
    if (*upload_data_size > 0) {
      if (!state->too_large && !state->busy) {
        if (state->body.size() + *upload_data_size > server->options_.max_body_bytes) {
          state->too_large = true;
        } else if (state->body.size() + *upload_data_size > state->counted &&
                   !state->Reserve(std::min<uint64_t>(
                                       server->options_.max_body_bytes,
                                       std::max<uint64_t>(2 * state->counted, state->body.size() + *upload_data_size)),
                                   server->options_.max_buffered_bytes)) {
          state->busy = true;
        } else {
          state->body.append(upload_data, *upload_data_size);
        }
        if (state->too_large || state->busy) {
          state->body.clear();
          state->body.shrink_to_fit();
          state->Release();
        }
      }
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (state->too_large) return Queue(server, connection, server->options_.too_large(server->options_.max_body_bytes));
    if (state->busy) return Queue(server, connection, Busy(server));

    HttpRequest request = head();
    request.body = std::move(state->body);
    MHD_get_connection_values_n(connection, MHD_GET_ARGUMENT_KIND, &AddQuery, &request.query);
    request.client_gone = [fd] { return PeerGone(fd); };
    // The body's bytes go with it (the handler keeps what it parsed): counted no more, held no more.
    request.body_taken = [state, &request] {
      request.body = std::string();
      state->Release();
    };
    HttpResponse response;
    {
      std::lock_guard lock(server->producers_mutex_);
      ++server->answers_pending_;
      state->answering = true;
    }
    try {
      response = server->handler_(request);
    } catch (const std::exception& e) {
      response.status = 500;
      response.body = ErrorBody("internal", e.what());
    }
    // The body has been dealt with; what is counted is the bodies requests are still sending or being served on.
    request.body = std::string();
    state->Release();
    if (!response.stream) {
      // On TCP the write would still succeed: the peer's FIN says it will not be read. (libmicrohttpd's completion
      // code cannot tell the rest: it reports an error for some responses the client did read.)
      if (response.undelivered && PeerGone(fd)) response.undelivered();
      const bool replaceable = request.method == "GET" || request.method == "HEAD";
      return Queue(server, connection, std::move(response), replaceable);
    }

    auto stream = std::make_shared<StreamState>();
    stream->client_fd = fd;
    stream->connection = connection;
    stream->idle_timeout_seconds = server->options_.idle_timeout_seconds;
    MHD_Response* mhd = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, &ReadStream,
                                                          new StreamHandle{stream}, &FreeStream);
    if (!mhd) return MHD_NO;
    MHD_add_response_header(mhd, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
    for (const auto& [name, value] : response.headers) MHD_add_response_header(mhd, name.c_str(), value.c_str());
    // The producer runs beside libmicrohttpd's writes; it ends when the stream is done or the client is gone.
    server->StartProducer([stream, produce = std::move(response.stream)] {
      produce(*stream);
      std::unique_lock lock(stream->mutex);
      stream->done = true;
      stream->changed.notify_all();
      // The producer counts until libmicrohttpd is done with the response (sent, or the client gone), so that a
      // server that stops (Stop) does not cut a stream's last lines off; bounded for a client that stops reading.
      stream->changed.wait_for(lock, std::chrono::seconds(5), [&] { return stream->gone; });
    });
    MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(response.status), mhd);
    MHD_destroy_response(mhd);
    return queued;
  }

  static HttpResponse Busy(HttpServer* server) {
    if (server->options_.busy) return server->options_.busy(server->options_.max_buffered_bytes);
    HttpResponse r;
    r.status = 503;
    r.body = R"({"error": {"code": "unavailable", "message": "the server holds too many request bodies; try again"}})";
    return r;
  }

  // An answer's body while libmicrohttpd sends it, counted in answers_held_ until it is freed (sent, or the client
  // gone). Bodies are built whole (a file, an exec's result): a client that does not read would otherwise let the
  // server hold any number of them.
  struct HeldAnswer {
    std::string body;
    uint64_t counted = 0;
    std::atomic<uint64_t>* held = nullptr;
    std::shared_ptr<void> hold;  // the handler's reservation for it (HttpResponse::hold)
  };
  static void FreeAnswer(void* cls) {
    auto* answer = static_cast<HeldAnswer*>(cls);
    *answer->held -= answer->counted;
    delete answer;
  }

  // Counts `bytes` of answers against the cap, waiting for room while the client is still there: up to
  // kAnswerRoomWait for an answer that may be replaced (false: it is not counted), as long as the connection's idle
  // time-out for one that may not (then it is counted over the cap: a result is never lost).
  static bool ReserveAnswer(HttpServer* server, uint64_t bytes, int fd, bool replaceable) {
    constexpr auto kAnswerRoomWait = std::chrono::seconds(10);
    constexpr uint64_t kSmallAnswer = 64 << 10;  // an error, a sandbox, a listing: never held up
    if (bytes <= kSmallAnswer) {
      server->answers_held_ += bytes;
      return true;
    }
    const auto give_up = std::chrono::steady_clock::now() +
                         (replaceable ? kAnswerRoomWait : std::chrono::seconds(server->options_.idle_timeout_seconds));
    for (;;) {
      uint64_t now = server->answers_held_.load();
      if (now == 0 || now + bytes <= server->options_.max_answer_bytes) {
        if (server->answers_held_.compare_exchange_weak(now, now + bytes)) return true;
        continue;
      }
      if (std::chrono::steady_clock::now() >= give_up || PeerGone(fd)) {
        if (replaceable) return false;
        server->answers_held_ += bytes;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Queues `response`. `replaceable`: the request changed nothing (a GET), so that its answer may become a 503 when
  // the answers held leave no room; an exec's or a run's result never is (its program ran: a client that took the
  // 503 at its word would run it again).
  static MHD_Result Queue(HttpServer* server, MHD_Connection* connection, HttpResponse response,
                          bool replaceable = false) {
    auto* answer = new HeldAnswer{.body = {}, .counted = 0, .held = &server->answers_held_, .hold = {}};
    if (ReserveAnswer(server, response.body.size(), ConnectionFd(connection), replaceable)) {
      answer->counted = response.body.size();
    } else {
      const uint64_t size = response.body.size();
      response = HttpResponse{};
      response.status = 503;
      response.body = server->options_.answers_busy
                          ? server->options_.answers_busy(size, server->answers_held_.load()).body
                          : R"({"error": {"code": "unavailable", "message": "busy"}})";
    }
    answer->body = std::move(response.body);
    answer->hold = std::move(response.hold);  // a 503 in its place holds nothing
    MHD_Response* mhd = MHD_create_response_from_buffer_with_free_callback_cls(answer->body.size(), answer->body.data(),
                                                                               &FreeAnswer, answer);
    if (!mhd) {
      FreeAnswer(answer);
      return MHD_NO;
    }
    if (!response.content_type.empty())
      MHD_add_response_header(mhd, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
    for (const auto& [name, value] : response.headers) MHD_add_response_header(mhd, name.c_str(), value.c_str());
    MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(response.status), mhd);
    MHD_destroy_response(mhd);
    return queued;
  }

  static void Completed(void* cls, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
    auto* state = static_cast<HttpServer::Connection*>(*con_cls);
    if (state && state->answering) {
      auto* server = static_cast<HttpServer*>(cls);
      std::lock_guard lock(server->producers_mutex_);
      --server->answers_pending_;
      server->producers_done_.notify_all();
    }
    delete state;
    *con_cls = nullptr;
  }
};

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(int listen_fd, bool unix_socket, HttpServerOptions options,
                                                        HttpHandler handler) {
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->listen_fd_ = listen_fd;
  server->unix_socket_ = unix_socket;
  server->options_ = std::move(options);
  server->handler_ = std::move(handler);
  const unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
  server->daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &HttpServerCallbacks::Access, server.get(), MHD_OPTION_LISTEN_SOCKET, listen_fd,
      MHD_OPTION_CONNECTION_LIMIT, server->options_.connection_limit, MHD_OPTION_CONNECTION_TIMEOUT,
      server->options_.idle_timeout_seconds, MHD_OPTION_NOTIFY_COMPLETED, &HttpServerCallbacks::Completed, server.get(),
      MHD_OPTION_URI_LOG_CALLBACK, &KeepRawUri, nullptr, MHD_OPTION_END);
  if (!server->daemon_) {
    ::close(listen_fd);
    return Status::Error("libmicrohttpd could not start serving the listening socket");
  }
  return server;
}

void HttpServer::StartProducer(std::function<void()> produce) {
  {
    std::lock_guard lock(producers_mutex_);
    ++producers_;
  }
  std::thread([this, produce = std::move(produce)] {
    produce();
    std::lock_guard lock(producers_mutex_);
    --producers_;
    producers_done_.notify_all();
  }).detach();
}

void HttpServer::StopAccepting() {
  if (!daemon_ || listen_fd_ < 0) return;
  MHD_socket fd = MHD_quiesce_daemon(daemon_);
  if (fd >= 0) ::close(fd);
  listen_fd_ = -1;
}

void HttpServer::Stop(std::chrono::steady_clock::time_point answers_until) {
  if (!daemon_) return;
  StopAccepting();
  {
    // Producers end with their streams, and handlers with their requests (the sandboxes are ended before the server
    // stops: an exec in progress answers as killed); then their answers are sent, so that a client is not cut off
    // from a result whose program ran. Bounded for clients that do not read.
    std::unique_lock lock(producers_mutex_);
    producers_done_.wait_until(lock, answers_until, [this] { return producers_ == 0 && answers_pending_ == 0; });
  }
  MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace nsbox::serve
