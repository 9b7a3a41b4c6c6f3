// Executor: forwarded from the public header (include/nsbox/executor.h).
#pragma once

#include "nsbox/executor.h"
