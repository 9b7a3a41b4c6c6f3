// The mount namespace in the child: applies a prepared mount plan under /newroot and pivots into it.
#pragma once

#include "sandbox/child.h"

namespace nsbox {

// Each returns 0, or -1 with errno set and `step` naming the failed call (a static buffer).
int MountBaseAndPivotToIt(const char** step);
int ApplyChildMount(const ChildMount& mount, uint32_t uid, uint32_t gid, const char** step);
int FinishRoot(const char** step);

// The device nodes the sandbox gets (/dev/null, zero, full, random, urandom, tty, and the null device behind the /proc
// masks), made by nsbox on a detached tmpfs of its own (size=4k,nr_inodes=16) instead of bound from the host's
// devtmpfs, whose options in mountinfo (size=, nr_inodes=) are derived from the host's RAM. Made once per process, in
// the parent, where mknod is allowed (root on the host); without it (rootless, or no CAP_MKNOD) the host's nodes are
// bound as before. The detached mount lives only as long as its descriptor: nothing is mounted anywhere.
void PrepareDeviceNodeTree();
int DeviceNodeTreeFd();  // -1 when there is none
// In the child, once the root is built: the program never holds the tree.
void CloseDeviceNodeTree();

}  // namespace nsbox
