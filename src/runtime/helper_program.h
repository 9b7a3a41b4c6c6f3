// FindHelperProgram: where nsbox's helper programs (nsbox-http, nsbox-serve: the ones linked dynamically) are found.
#pragma once

#include <string>

#include "sandbox/base/status.h"

namespace nsbox::runtime {

// Beside the running program (a bindir install), the installed libexec path, then, for a build-tree binary only (the
// test programs live in build/tests/), the build tree's. The helper runs with the caller's privileges, so one that
// others could change is refused (sandbox/base/data_dir.h). `role` names it in errors ("the agent's HTTP helper").
StatusOr<std::string> FindHelperProgram(const std::string& name, const std::string& installed_path,
                                        const std::string& build_path, const std::string& role);

}  // namespace nsbox::runtime
