// Passing one file descriptor over a unix socket (SCM_RIGHTS).
#include "sandbox/base/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace nsbox {

int SendFd(int socket, int fd) {
  char byte = 'F';
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
  return ::sendmsg(socket, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

int ReceiveFd(int socket) {
  char byte;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC); while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  struct cmsghdr* cmsg = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (!cmsg || cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) {
    errno = ENOMSG;
    return -1;
  }
  int fd;
  memcpy(&fd, CMSG_DATA(cmsg), sizeof fd);
  return fd;
}

}  // namespace nsbox
