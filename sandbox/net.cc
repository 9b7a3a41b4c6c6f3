// The sandbox's network namespace: "lo" up (SIOCSIFFLAGS), by the child or, sooner, by nsbox from outside; the
// namespace has no other interface.
#include "sandbox/net.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/base/unique_fd.h"

namespace nsbox {

namespace {

// lo up through a socket of its namespace: one ioctl when it is up already. 0, or -1 with errno.
int SetLoopbackUp(int sock) {
  struct ifreq ifr = {};
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) return -1;
  if (ifr.ifr_flags & IFF_UP) return 0;
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  return ::ioctl(sock, SIOCSIFFLAGS, &ifr);
}

}  // namespace

int BringUpLoopback(const char** step) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *step = "socket(AF_INET) for loopback";
    return -1;
  }
  int rc = SetLoopbackUp(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0) {
    *step = "ioctl(lo, SIOCSIFFLAGS, IFF_UP)";
    errno = saved;
    return -1;
  }
  return 0;
}

StatusOr<bool> BringUpLoopbackFromOutside(int pidfd) {
  UniqueFd own(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!own || ::setns(pidfd, CLONE_NEWNET) != 0) return false;
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));  // a socket stays in the namespace it was made in
  if (::setns(own.get(), CLONE_NEWNET) != 0) return Status::Errno("setns(nsbox's own network namespace)");
  return sock && SetLoopbackUp(sock.get()) == 0;
}

}  // namespace nsbox
