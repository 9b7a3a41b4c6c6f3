// Status and StatusOr: forwarded from the public header (include/nsbox/status.h), where an embedder finds them.
#pragma once

#include "nsbox/status.h"
