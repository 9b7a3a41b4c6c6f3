// Launch helpers shared by one-shot sandboxes and sessions.
#include "sandbox/launch.h"

#include <fcntl.h>
#include <unistd.h>

namespace nsbox {

StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Errno("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace nsbox
