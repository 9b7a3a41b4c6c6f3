// A streamed answer on libmicrohttpd: the queue between its producer thread and libmicrohttpd's reader callback; and
// the client's connection under every answer: its descriptor, and whether its client has gone.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "src/serve/http_server.h"

struct MHD_Connection;

namespace nsbox::serve::http_detail {  // HttpServer's own (http_server.cc): not an API of the service

// Whether the client of `fd` has gone (closed or reset its end): a streamed or long answer stops for it.
bool PeerGone(int fd);

// The connection's socket, or -1.
int ConnectionFd(MHD_Connection* connection);

// A streamed answer: the producer thread queues chunks, libmicrohttpd's reader callback takes them.
struct StreamState : StreamSink {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::string> chunks;
  size_t offset = 0;  // into chunks.front()
  bool done = false;
  bool gone = false;  // the response was destroyed (sent, or the connection closed)
  int client_fd = -1;
  // While ReadStream waits for the producer (a program that prints nothing for a while), the connection's idle
  // time-out is lifted: it would cut a quiet program's result off. It is set again, afresh, as soon as there is
  // something to send, so that a client that stops reading is still dropped.
  MHD_Connection* connection = nullptr;
  unsigned idle_timeout_seconds = 0;

  // Bounded in bytes: a client that does not read keeps the producer waiting here, not the server's memory growing.
  // A chunk larger than the bound (an exec's result line holds all its output) is queued piece by piece as the client
  // takes the pieces before it.
  static constexpr size_t kMaxQueuedBytes = 1 << 20;
  size_t queued = 0;  // bytes in chunks, the front's sent part included

  bool Write(std::string chunk) override {
    std::unique_lock lock(mutex);
    for (size_t at = 0; at < chunk.size();) {
      changed.wait(lock, [&] { return gone || queued < kMaxQueuedBytes; });
      if (gone) return false;
      const size_t n = std::min(chunk.size() - at, kMaxQueuedBytes - queued);
      chunks.push_back(n == chunk.size() ? std::move(chunk) : chunk.substr(at, n));
      queued += n;
      at += n;
      changed.notify_all();
    }
    return !gone;
  }
  bool ClientGone() const override {
    {
      std::lock_guard lock(const_cast<std::mutex&>(mutex));
      if (gone) return true;
    }
    return PeerGone(client_fd);
  }
  std::shared_ptr<void> hold;  // given up when the response is freed (FreeStream)
  void KeepUntilSent(std::shared_ptr<void> h) override {
    std::lock_guard lock(mutex);
    if (gone) return;  // freed already: nothing is held for it
    hold = std::move(h);
  }
};

// What libmicrohttpd holds of a streamed response (its callbacks' `cls`).
struct StreamHandle {
  std::shared_ptr<StreamState> state;
};

// libmicrohttpd's reader callback (MHD_create_response_from_callback): the next bytes of the stream, waiting for the
// producer while it has queued none.
ssize_t ReadStream(void* cls, uint64_t, char* buffer, size_t max);

// libmicrohttpd's free callback: the response is done with (sent, or its client gone); the producer is told.
void FreeStream(void* cls);

}  // namespace nsbox::serve::http_detail
