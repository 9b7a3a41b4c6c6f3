// Listening sockets for the proxy: on 127.0.0.1 inside a sandbox's network namespace, or on the host's.
#include "src/netproxy/listen.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

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

StatusOr<UniqueFd> ListenInNetns(pid_t pid, uint16_t port) {
  std::string path = fmt::format("/proc/{}/ns/net", pid);
  UniqueFd netns(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns) return Status::Errno(fmt::format("open({})", path));
  return ListenInNetnsFd(netns.get(), port);
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
