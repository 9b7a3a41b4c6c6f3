// Launch helpers shared by one-shot sandboxes and sessions: pipes, set-up errors, verdict text.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/result.h"

namespace nsbox {

struct Pipe {
  UniqueFd read, write;
};

// A close-on-exec pipe.
StatusOr<Pipe> MakePipe();
void SetNonBlocking(int fd);
// A result that says nothing ran, and why.
Result SetupError(std::string reason);
// Adds to the reason what the limits did to a program that ended otherwise: the pids limit reached (a program that
// could not fork often says no more than "Resource temporarily unavailable"), processes the OOM killer ended while
// the program itself lived on (a worker, a subprocess).
void NoteLimitsHit(Result* result);
// "exited with code N" / "killed by signal N (SIGNAME)".
std::string ExitReason(int wait_status);

}  // namespace nsbox
