// The user namespace from the parent side: the sandbox uid/gid mapped to one unprivileged host uid/gid.
#pragma once

#include <sys/types.h>

#include <string>

#include "sandbox/base/status.h"
#include "sandbox/policy.h"

namespace nsbox {

// Writes /proc/PID/{setgroups,uid_map,gid_map}. Unprivileged callers map to themselves and deny setgroups.
Status WriteIdMaps(pid_t pid, const Policy& policy, bool privileged);

// Lets the sandbox user open a pipe nsbox made for the program's stdio again by name, as a program may
// (/dev/stdin, /dev/stderr, /proc/self/fd/1: node's readFileSync('/dev/stdin'), `echo x > /dev/stderr`): made by
// root, a pipe is root's with mode 0600, which the sandbox user may not open. Its mode becomes 0666 (an owner change
// would need CAP_CHOWN and the sandbox's host ids mapped, which a container does not give); only processes that may
// look into the holder's /proc/PID/fd reach it by name: the sandbox's own, and root. Pipes only: a sealed stdin file
// may be a caller's, and anyone may read it again already; never the caller's own stdin or terminal.
Status LetSandboxReopen(int fd);

// What a failed clone into new namespaces (errno `err`) most likely means, and where to look for the fix.
std::string NamespaceFailureHint(int err);

}  // namespace nsbox
