// Sandbox inside the engine: the public class (include/nsbox/sandbox.h), and the root planning run and sessions share.
#pragma once

#include <vector>

#include "nsbox/sandbox.h"
#include "sandbox/child.h"
#include "sandbox/executor.h"
#include "sandbox/policy.h"
#include "sandbox/result.h"

namespace nsbox {

// The sandbox's root as the child applies it (paths under /newroot and /oldroot), planned from the policy: its host
// view (Policy::host_view) or a prepared root, with the generated /etc. Shared by run and sessions.
StatusOr<std::vector<ChildMount>> PlanChildRoot(const Policy& policy);

}  // namespace nsbox
