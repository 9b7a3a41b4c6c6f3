// The session wire format: newline-framed JSON with SCM_RIGHTS descriptors, both directions.
#include "src/session/wire.h"
#include "sandbox/base/bounded_json.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace nsbox::session {

namespace {

// poll's time-out for a deadline, rounded up: a deadline 0.4 ms away is still waited for, not polled past.
int PollTimeout(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 1 << 30));
}

}  // namespace

int WaitUntilReady(int socket, short events, Deadline deadline) {
  if (!deadline) return 1;
  for (;;) {
    struct pollfd fd = {socket, events, 0};
    int rc = ::poll(&fd, 1, PollTimeout(*deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    if (rc > 0) return 1;
    if (std::chrono::steady_clock::now() >= *deadline) return 0;
  }
}

Status SendMessage(int socket, const nlohmann::json& message, int fd, Deadline deadline, bool* timed_out) {
  std::string line = message.dump() + "\n";
  size_t done = 0;
  // With a deadline the socket is written without blocking, after a poll that ends at the deadline.
  const int flags = MSG_NOSIGNAL | (deadline ? MSG_DONTWAIT : 0);
  while (done < line.size()) {
    int ready = WaitUntilReady(socket, POLLOUT, deadline);
    if (ready < 0) return Status::Errno("poll(session socket, POLLOUT)");
    if (ready == 0) {
      if (timed_out) *timed_out = true;
      return Status::Error("the session did not take the request in time");
    }
    struct iovec iov = {line.data() + done, line.size() - done};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (fd >= 0 && done == 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
    }
    ssize_t n = ::sendmsg(socket, &msg, flags);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::Errno("sendmsg(session socket)");
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

int MessageReader::WaitForData() {
  if (interrupt_fd_ < 0 || !deadline_) return WaitUntilReady(socket_, POLLIN, deadline_);
  for (;;) {
    struct pollfd fds[2] = {{socket_, POLLIN, 0}, {interrupt_fd_, POLLIN, 0}};
    int rc = ::poll(fds, 2, PollTimeout(*deadline_));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    if (fds[1].revents) {
      interrupt_fd_ = -1;
      deadline_ = on_interrupt_();
      return WaitUntilReady(socket_, POLLIN, deadline_);
    }
    if (rc > 0) return 1;
    if (std::chrono::steady_clock::now() >= *deadline_) return 0;
  }
}

StatusOr<nlohmann::json> MessageReader::Next() {
  for (;;) {
    // Only what came since the last look is searched: an answer of hundreds of MB arrives in 64 KiB reads.
    auto newline = buffer_.find('\n', scanned_);
    if (newline != std::string::npos) {
      auto message = ParseBoundedJsonOrDiscarded(std::string_view(buffer_).substr(0, newline));
      buffer_.erase(0, newline + 1);
      scanned_ = 0;
      if (message.is_discarded() || !message.is_object())
        return Status::Error("malformed message on the session socket");
      return message;
    }
    scanned_ = buffer_.size();
    if (buffer_.size() > max_bytes_) {
      too_large_ = true;
      return Status::Error(fmt::format("a message on the session socket is larger than {} MiB", max_bytes_ >> 20));
    }
    if (stop_ && stop_()) return Status::Error("stopped waiting for the session's answer");
    int ready = WaitForData();
    if (ready < 0) return Status::Errno("poll(session socket, POLLIN)");
    if (ready == 0) {
      timed_out_ = true;
      return Status::Error("the session did not answer in time");
    }
    char data[65536];
    struct iovec iov = {data, sizeof data};
    alignas(struct cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(socket_, &msg, MSG_CMSG_CLOEXEC | (deadline_ ? MSG_DONTWAIT : 0));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::Errno("recvmsg(session socket)");
    }
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds_.emplace_back(fd);
      }
    }
    if (n == 0) return Status::Error("the session closed the connection");
    buffer_.append(data, static_cast<size_t>(n));
  }
}

}  // namespace nsbox::session
