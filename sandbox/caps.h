// Capabilities: the bounding set emptied and every set cleared (through libcap) before the payload runs.
#pragma once

#include <sys/capability.h>

namespace nsbox {

// Both run after clone; return 0, or -1 with errno and *step naming the call.
int DropBoundingSet(const char** step);
int ClearCapabilities(cap_t no_caps, const char** step);

}  // namespace nsbox
