// The sandbox's pid 1: reaps orphans, forwards signals to the payload and reports the payload's exit status.
#pragma once

#include <sys/types.h>

#include "sandbox/child.h"

namespace nsbox {

// Never returns: exits when the payload has exited, which makes the kernel kill the rest of the pid namespace.
[[noreturn]] void RunInit(const ChildPlan& plan, pid_t payload);

}  // namespace nsbox
