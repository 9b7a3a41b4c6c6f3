// The session wire format: newline-framed JSON with SCM_RIGHTS descriptors, both directions.
#include "src/session/wire.h"

#include <sys/socket.h>

#include <cstring>

namespace nsbox::session {

Status SendMessage(int socket, const nlohmann::json& message, int fd) {
  std::string line = message.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
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
    ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Errno("sendmsg(session socket)");
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

StatusOr<nlohmann::json> MessageReader::Next() {
  for (;;) {
    auto newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      auto message = nlohmann::json::parse(buffer_.substr(0, newline), nullptr, false);
      buffer_.erase(0, newline + 1);
      if (message.is_discarded() || !message.is_object()) return Status::Error("malformed message on the session socket");
      return message;
    }
    if (buffer_.size() > max_bytes_) return Status::Error("message on the session socket is too large");
    char data[65536];
    struct iovec iov = {data, sizeof data};
    alignas(struct cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(socket_, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
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
