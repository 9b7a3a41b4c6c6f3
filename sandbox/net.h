// The sandbox's network namespace: loopback up, nothing else (in the child, or from nsbox's side first).
#pragma once

#include "sandbox/base/status.h"

namespace nsbox {

// Returns 0, or -1 with errno and *step naming the call. Finds it up already when nsbox was quicker (below).
int BringUpLoopback(const char** step);

// nsbox's side, while the child builds its root: brings the loopback of the process `pidfd` refers to up from
// outside (setns into its network namespace for the socket's creation only), so that the child finds it up and its
// own step costs one ioctl instead of bringing an interface up (about 50 µs). Best effort: false when it could not
// (setns needs CAP_SYS_ADMIN in nsbox's own user namespace); the child then does it. Leaves the calling thread in
// its own network namespace, or returns a failure status when it could not get back there.
StatusOr<bool> BringUpLoopbackFromOutside(int pidfd);

}  // namespace nsbox
