// A streamed answer on libmicrohttpd, and the client's connection under every answer (http_stream.h).
#include "src/serve/http_stream.h"

#include <poll.h>

#include <chrono>
#include <cstring>

#include <microhttpd.h>

#include "sandbox/base/defer.h"

namespace nsbox::serve::http_detail {

bool PeerGone(int fd) {
  if (fd < 0) return true;
  struct pollfd p = {fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

int ConnectionFd(MHD_Connection* connection) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  return info ? info->connect_fd : -1;
}

ssize_t ReadStream(void* cls, uint64_t, char* buffer, size_t max) {
  auto& state = *static_cast<StreamHandle*>(cls)->state;
  std::unique_lock lock(state.mutex);
  const bool lift = state.chunks.empty() && !state.done && state.connection;
  if (lift) MHD_set_connection_option(state.connection, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
  Defer restore([&] {
    if (lift) MHD_set_connection_option(state.connection, MHD_CONNECTION_OPTION_TIMEOUT, state.idle_timeout_seconds);
  });
  // Waits in slices, so that a client that goes away while nothing is written is noticed.
  while (state.chunks.empty() && !state.done) {
    if (state.changed.wait_for(lock, std::chrono::milliseconds(200)) == std::cv_status::timeout) {
      lock.unlock();
      bool gone = PeerGone(state.client_fd);
      lock.lock();
      if (gone) {
        state.gone = true;
        state.changed.notify_all();
        return MHD_CONTENT_READER_END_WITH_ERROR;
      }
    }
  }
  if (state.chunks.empty()) return MHD_CONTENT_READER_END_OF_STREAM;
  std::string& front = state.chunks.front();
  size_t n = std::min(max, front.size() - state.offset);
  memcpy(buffer, front.data() + state.offset, n);
  state.offset += n;
  if (state.offset == front.size()) {
    state.queued -= front.size();
    state.chunks.pop_front();
    state.offset = 0;
    state.changed.notify_all();
  }
  return static_cast<ssize_t>(n);
}

void FreeStream(void* cls) {
  auto* handle = static_cast<StreamHandle*>(cls);
  {
    std::lock_guard lock(handle->state->mutex);
    handle->state->gone = true;
    handle->state->hold.reset();
    handle->state->changed.notify_all();
  }
  delete handle;
}

}  // namespace nsbox::serve::http_detail
