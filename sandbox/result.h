// Result inside nsbox: the public struct (include/nsbox/result.h) and its JSON form (sandbox/result_json.h).
#pragma once

#include "nsbox/result.h"
#include "sandbox/result_json.h"
