// Bind paths by descriptor: opening a bind's source and mount point without following a link a sandbox could have
// made, and the test that keeps the host's kernel filesystems out of a user's binds.
// Allocation-free and async-signal-safe: the cloned child walks with these after its mount namespace exists.
#pragma once

#include <cstddef>

namespace nsbox {

// Opens the absolute `path` beneath root_fd (O_PATH, close-on-exec); ".." never climbs above root_fd, and an absolute
// link starts again at root_fd. A symbolic link is followed only where only root could have made it: the link is
// owned by root and sits in a root-owned directory that neither group nor others may write. Any other link (one a
// sandbox may have planted in a workspace or writable bind) fails with ELOOP, its name copied into bad_link; a loop
// of root's links fails with ELOOP and bad_link left as it was. Returns the descriptor, or -1 with errno set.
int OpenHostPath(int root_fd, const char* path, char* bad_link, size_t bad_link_size);

// Opens the mount point `path` beneath root_fd (O_PATH), creating missing directories (0755) and the last component
// as a directory or an empty file, and following no symbolic link at all: a link anywhere in the path fails with
// ELOOP, its name copied into bad_link. Returns the descriptor, or -1 with errno set.
int OpenMountPoint(int root_fd, const char* path, bool directory, char* bad_link, size_t bad_link_size);

// Why the opened bind source `fd` must not be bound into a sandbox from the host reached at root_fd: it is that root
// itself, it lives on a kernel filesystem (proc, sysfs, cgroup, debugfs ...), or on the host's /dev. nullptr when it
// may be bound. The reason is a static string.
const char* KernelFsBindRefusal(int root_fd, int fd);

}  // namespace nsbox
