// Capabilities: the bounding set emptied, the ambient set cleared, and permitted/effective/inheritable set to nothing.
#include "sandbox/caps.h"

#include <sys/prctl.h>

#include <cerrno>

namespace nsbox {

int DropBoundingSet(const char** step) {
  for (cap_value_t cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    // EINVAL: a capability this kernel does not know; nothing to drop.
    if (cap_drop_bound(cap) != 0 && errno != EINVAL) {
      *step = "prctl(PR_CAPBSET_DROP)";
      return -1;
    }
  }
  return 0;
}

int ClearCapabilities(cap_t no_caps, const char** step) {
  // One prctl clears the whole ambient set (libcap's cap_reset_ambient probes each capability first).
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    *step = "prctl(PR_CAP_AMBIENT_CLEAR_ALL)";
    return -1;
  }
  if (cap_set_proc(no_caps) != 0) {
    *step = "capset(no capabilities)";
    return -1;
  }
  return 0;
}

}  // namespace nsbox
