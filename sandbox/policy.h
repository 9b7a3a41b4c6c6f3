// Policy and PolicyBuilder: forwarded from the public header (include/nsbox/policy.h).
#pragma once

#include "nsbox/policy.h"
