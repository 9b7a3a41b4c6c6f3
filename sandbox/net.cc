// The network namespace in the child: brings up "lo" with SIOCSIFFLAGS; the namespace has no other interface.
#include "sandbox/net.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nsbox {

int BringUpLoopback(const char** step) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *step = "socket(AF_INET) for loopback";
    return -1;
  }
  struct ifreq ifr = {};
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int rc = ::ioctl(fd, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    rc = ::ioctl(fd, SIOCSIFFLAGS, &ifr);
  }
  int saved = errno;
  ::close(fd);
  if (rc != 0) {
    *step = "ioctl(lo, SIOCSIFFLAGS, IFF_UP)";
    errno = saved;
    return -1;
  }
  return 0;
}

}  // namespace nsbox
