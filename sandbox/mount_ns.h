// The mount namespace in the child: applies a prepared mount plan under /newroot and pivots into it.
#pragma once

#include "sandbox/child.h"

namespace nsbox {

// Each returns 0, or -1 with errno set and `step` naming the failed call (a static buffer).
int MountBaseAndPivotToIt(const char** step);
int ApplyChildMount(const ChildMount& mount, uint32_t uid, uint32_t gid, const char** step);
int FinishRoot(const char** step);

}  // namespace nsbox
