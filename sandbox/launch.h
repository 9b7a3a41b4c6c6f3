// Launch helpers shared by one-shot sandboxes and sessions: close-on-exec pipes (the verdict's text: verdict.h).
#pragma once

#include <sys/types.h>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox {

struct Pipe {
  UniqueFd read, write;
};

// A close-on-exec pipe.
StatusOr<Pipe> MakePipe();
void SetNonBlocking(int fd);

}  // namespace nsbox
