// The network namespace in the child: loopback up, nothing else.
#pragma once

namespace nsbox {

// Returns 0, or -1 with errno and *step naming the call.
int BringUpLoopback(const char** step);

}  // namespace nsbox
