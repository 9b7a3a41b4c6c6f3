// LiveOutput: a queue of chunks and one writer thread that drains it into nsbox's stdout and stderr.
#include "sandbox/live_output.h"

#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "sandbox/base/fs.h"

namespace nsbox {
namespace {

// Writes `data` whole to `fd`. To a pipe or a socket without blocking, the descriptor's own flags left as the caller
// has them: a socket with MSG_DONTWAIT, a pipe with RWF_NOWAIT, or (a named FIFO, which does not take RWF_NOWAIT)
// PIPE_BUF bytes at a time once poll says it has room, which such a write never blocks on. While it takes nothing,
// `cancelled` is asked every 100 ms. Anything else (a file, a terminal) is written as usual. 0, or an errno
// (ECANCELED when cancelled).
int WriteCancellable(int fd, std::string_view data, const std::function<bool()>& cancelled) {
  struct stat st {};
  if (!cancelled || ::fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
    return WriteAll(fd, data);
  bool nowait = true;  // RWF_NOWAIT, until the pipe refuses it
  while (!data.empty()) {
    ssize_t n;
    if (S_ISSOCK(st.st_mode)) {
      n = ::send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == ENOTSOCK) return WriteAll(fd, data);
    } else if (nowait) {
      struct iovec iov = {const_cast<char*>(data.data()), data.size()};
      n = ::pwritev2(fd, &iov, 1, -1, RWF_NOWAIT);
      if (n < 0 && errno == EOPNOTSUPP) {
        nowait = false;
        continue;
      }
    } else {
      struct pollfd room = {fd, POLLOUT, 0};
      int ready = ::poll(&room, 1, 100);
      if (ready < 0 && errno != EINTR) return errno;
      if (ready > 0 && (room.revents & (POLLERR | POLLHUP))) return EPIPE;
      n = ready > 0 ? ::write(fd, data.data(), std::min<size_t>(data.size(), PIPE_BUF)) : (errno = EAGAIN, -1);
    }
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return errno;
    if (cancelled()) return ECANCELED;
    if (nowait || S_ISSOCK(st.st_mode)) {
      struct pollfd ready = {fd, POLLOUT, 0};
      (void)::poll(&ready, 1, 100);
    }
  }
  return 0;
}

}  // namespace

LiveOutput::LiveOutput(int stdout_fd, int stderr_fd, std::function<bool()> cancelled)
    : fds_{-1, stdout_fd, stderr_fd}, cancelled_(std::move(cancelled)), failed_(::eventfd(0, EFD_CLOEXEC)) {}

LiveOutput::LiveOutput(Sink sink) : fds_{-1, -1, -1}, sink_(std::move(sink)), failed_(::eventfd(0, EFD_CLOEXEC)) {}

LiveOutput::~LiveOutput() { Finish(); }

void LiveOutput::Add(int stream, std::string_view data) {
  if (data.empty() || (stream != 1 && stream != 2)) return;
  std::lock_guard lock(mutex_);
  if (error_ != 0 || finishing_) return;
  if (!queue_.empty() && queue_.back().first == stream) queue_.back().second.append(data);
  else queue_.emplace_back(stream, std::string(data));
  if (!writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
  wake_.notify_one();
}

int LiveOutput::Finish() {
  {
    std::lock_guard lock(mutex_);
    finishing_ = true;
    wake_.notify_one();
  }
  if (writer_.joinable()) writer_.join();
  std::lock_guard lock(mutex_);
  return error_;
}

void LiveOutput::WriterLoop() {
  // A reader that went away is EPIPE here, reported by Finish, not a SIGPIPE that would end the whole process.
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return !queue_.empty() || finishing_; });
    if (queue_.empty()) return;  // finishing, and all written
    auto [stream, chunk] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    int err = sink_ ? (sink_(stream, chunk) ? 0 : EPIPE) : WriteCancellable(fds_[stream], chunk, cancelled_);
    lock.lock();
    if (err != 0 && error_ == 0) {
      error_ = err;
      queue_.clear();
      uint64_t one = 1;
      if (failed_ && err != ECANCELED) (void)!::write(failed_.get(), &one, sizeof one);
    }
  }
}

}  // namespace nsbox
