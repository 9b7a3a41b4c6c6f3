// Listening sockets for the proxy: on 127.0.0.1 inside a sandbox's network namespace, or on the host's.
#include "src/netproxy/listen.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace nsbox::netproxy {
namespace {

// A fresh network namespace has "lo" down and 127.0.0.1 unassigned until it is up; bind would fail.
Status BringUpLoopback() {
  UniqueFd control(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!control) return Status::Errno("socket(AF_INET, SOCK_DGRAM)");
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(control.get(), SIOCGIFFLAGS, &request) != 0) return Status::Errno("ioctl(SIOCGIFFLAGS, lo)");
  if (request.ifr_flags & IFF_UP) return OkStatus();
  request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
  if (ioctl(control.get(), SIOCSIFFLAGS, &request) != 0) return Status::Errno("ioctl(SIOCSIFFLAGS, lo, IFF_UP)");
  return OkStatus();
}

}  // namespace

StatusOr<UniqueFd> ListenOnLoopback(uint16_t port) {
  UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener) return Status::Errno("socket(AF_INET, SOCK_STREAM)");
  int one = 1;
  // A restarted session may reuse the port while old connections sit in TIME_WAIT.
  if (setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return Status::Errno("setsockopt(SO_REUSEADDR)");
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return Status::Errno(fmt::format("bind(127.0.0.1:{})", port));
  }
  if (listen(listener.get(), 128) != 0) return Status::Errno("listen(127.0.0.1)");
  return listener;
}

StatusOr<UniqueFd> ListenInNetnsFd(int netns_fd, uint16_t port) {
  StatusOr<UniqueFd> result = Status::Error("ListenInNetns: the worker thread did not run");
  // setns(CLONE_NEWNET) moves only the calling thread, so a throwaway thread does the work and the rest
  // of the process (the proxy's outbound connections included) stays in the host namespace.
  std::thread worker([&] {
    UniqueFd own_netns(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!own_netns) {
      result = Status::Errno("open(/proc/thread-self/ns/net)");
      return;
    }
    if (setns(netns_fd, CLONE_NEWNET) != 0) {
      result = Status::Errno("setns(CLONE_NEWNET)");
      return;
    }
    Status loopback = BringUpLoopback();
    result = loopback.ok() ? ListenOnLoopback(port) : StatusOr<UniqueFd>(loopback);
    // Going back is tidiness only: the thread ends here, and its namespace with it.
    (void)setns(own_netns.get(), CLONE_NEWNET);
  });
  worker.join();
  if (!result.ok()) return result.status().Wrap("listening inside the sandbox's network namespace");
  return result;
}

namespace {

// What the helper of ListenAsNamespaceOwner sends back: the listening socket (SCM_RIGHTS), or the failed step.
struct HelperReply {
  int32_t err = 0;
  char step[64] = {};
};

void SendReply(int channel, int fd, int err, const char* step) {
  HelperReply reply;
  reply.err = err;
  std::strncpy(reply.step, step, sizeof reply.step - 1);
  iovec iov{&reply, sizeof reply};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
  }
  (void)sendmsg(channel, &msg, MSG_NOSIGNAL);
}

// An ordinary user has no CAP_SYS_ADMIN in its own user namespace, which setns(CLONE_NEWNET) demands, but it owns the
// sandbox's user namespace. A forked helper (single-threaded, as setns(CLONE_NEWUSER) requires) joins that user
// namespace, then the network namespace, and sends the listening socket back. Only raw syscalls after fork: the
// parent may have other threads.
StatusOr<UniqueFd> ListenAsNamespaceOwner(int userns_fd, int netns_fd, uint16_t port) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return Status::Errno("socketpair(AF_UNIX)");
  UniqueFd ours(pair[0]), theirs(pair[1]);
  pid_t helper = fork();
  if (helper < 0) return Status::Errno("fork(netns helper)");
  if (helper == 0) {
    int channel = theirs.get();
    auto fail = [&](const char* step) {
      SendReply(channel, -1, errno, step);
      _exit(1);
    };
    if (setns(userns_fd, CLONE_NEWUSER) != 0) fail("setns(CLONE_NEWUSER)");
    if (setns(netns_fd, CLONE_NEWNET) != 0) fail("setns(CLONE_NEWNET)");
    int control = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (control < 0) fail("socket(AF_INET, SOCK_DGRAM)");
    ifreq request{};
    std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
    if (ioctl(control, SIOCGIFFLAGS, &request) != 0) fail("ioctl(SIOCGIFFLAGS, lo)");
    if (!(request.ifr_flags & IFF_UP)) {
      request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
      if (ioctl(control, SIOCSIFFLAGS, &request) != 0) fail("ioctl(SIOCSIFFLAGS, lo, IFF_UP)");
    }
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) fail("socket(AF_INET, SOCK_STREAM)");
    int one = 1;
    if (setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) fail("setsockopt(SO_REUSEADDR)");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) fail("bind(127.0.0.1)");
    if (listen(listener, 128) != 0) fail("listen(127.0.0.1)");
    SendReply(channel, listener, 0, "");
    _exit(0);
  }
  theirs.reset();
  HelperReply reply;
  iovec iov{&reply, sizeof reply};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = recvmsg(ours.get(), &msg, MSG_CMSG_CLOEXEC); while (n < 0 && errno == EINTR);
  int saved = errno;
  while (waitpid(helper, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (n < 0) return Status::Errno("recvmsg(netns helper)", saved);
  if (n != static_cast<ssize_t>(sizeof reply)) return Status::Error("the netns helper ended without an answer");
  if (reply.err != 0) return Status::Errno(fmt::format("netns helper: {}", reply.step), reply.err);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if (!cmsg || cmsg->cmsg_type != SCM_RIGHTS) return Status::Error("the netns helper sent no socket");
  int fd;
  std::memcpy(&fd, CMSG_DATA(cmsg), sizeof fd);
  return UniqueFd(fd);
}

}  // namespace

StatusOr<UniqueFd> ListenInNetns(pid_t pid, uint16_t port) {
  std::string path = fmt::format("/proc/{}/ns/net", pid);
  UniqueFd netns(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns) return Status::Errno(fmt::format("open({})", path));
  if (geteuid() == 0) return ListenInNetnsFd(netns.get(), port);
  // Rootless: go through the sandbox's user namespace, which this user owns.
  std::string userns_path = fmt::format("/proc/{}/ns/user", pid);
  UniqueFd userns(open(userns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!userns) return Status::Errno(fmt::format("open({})", userns_path));
  auto listener = ListenAsNamespaceOwner(userns.get(), netns.get(), port);
  if (!listener.ok()) return listener.status().Wrap("listening inside the sandbox's network namespace");
  return listener;
}

StatusOr<uint16_t> LocalPort(int socket_fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return Status::Errno(fmt::format("getsockname({})", socket_fd));
  }
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return Status::Error(fmt::format("getsockname({}): not an IP socket", socket_fd));
}

}  // namespace nsbox::netproxy
