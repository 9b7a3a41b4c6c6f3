// The user namespace from the parent side: the sandbox uid/gid mapped to one unprivileged host uid/gid.
#pragma once

#include <sys/types.h>

#include <string>

#include "sandbox/base/status.h"
#include "sandbox/policy.h"

namespace nsbox {

// Writes /proc/PID/{setgroups,uid_map,gid_map}. Unprivileged callers map to themselves and deny setgroups.
Status WriteIdMaps(pid_t pid, const Policy& policy, bool privileged);

// What a failed clone into new namespaces (errno `err`) most likely means, and where to look for the fix.
std::string NamespaceFailureHint(int err);

}  // namespace nsbox
