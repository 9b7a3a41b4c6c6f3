// The user namespace from the parent side: the sandbox uid/gid mapped to one unprivileged host uid/gid.
#pragma once

#include <sys/types.h>

#include <string>

#include "sandbox/base/status.h"
#include "sandbox/policy.h"

namespace nsbox {

// Writes /proc/PID/{setgroups,uid_map,gid_map}. Unprivileged callers map to themselves and deny setgroups.
Status WriteIdMaps(pid_t pid, const Policy& policy, bool privileged);

// Makes a pipe nsbox made for the program's stdio the sandbox user's, as a file the program opens again must be
// (/dev/stdin, /dev/stderr, /proc/self/fd/1: node's readFileSync('/dev/stdin'), `echo x > /dev/stderr`). Made by
// root, a pipe is root's with mode 0600, which the sandbox user may not open. A caller other than root made it its
// own, which is the sandbox user already. Only for pipes nsbox made: never the caller's own stdin or terminal, and
// not a sealed stdin file (anyone may open a memfd again for reading, and nothing may write it).
Status GiveToSandboxUser(int fd, const Policy& policy);

// What a failed clone into new namespaces (errno `err`) most likely means, and where to look for the fix.
std::string NamespaceFailureHint(int err);

}  // namespace nsbox
