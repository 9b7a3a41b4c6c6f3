// Deferred release of a mount namespace: an io_uring fixed-file slot holds the last reference.
#include "sandbox/ns_release.h"

#include <fcntl.h>
#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

namespace nsbox {

UniqueFd OpenMountNamespace(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/mnt";
  return UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
}

UniqueFd HoldForAsyncRelease(UniqueFd ns) {
  if (!ns) return UniqueFd();
  // One entry, never used: the instance exists for its registered-file table. The descriptor is close-on-exec.
  struct io_uring_params params = {};
  UniqueFd ring(static_cast<int>(::syscall(SYS_io_uring_setup, 1, &params)));
  if (!ring) return UniqueFd();
  int fd = ns.get();
  if (::syscall(SYS_io_uring_register, ring.get(), IORING_REGISTER_FILES, &fd, 1) != 0) return UniqueFd();
  return ring;  // `ns` closes here: the ring's reference is the one that stays
}

}  // namespace nsbox
