// MakeRuntime: builds a SandboxRuntime by name ("nsbox", "local", "docker"), the one place where runtimes differ for
// their users.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/runtime/sandbox_runtime.h"

namespace nsbox::runtime {

struct RuntimeConfig {
  std::string nsbox_bin;  // nsbox runtime: empty = $NSBOX_BIN or this program
  std::optional<std::chrono::milliseconds> max_lifetime;  // nsbox runtime: the session's own end
  std::vector<std::string> sandbox_args;  // nsbox runtime: isolation and limit options for `session create`
  std::function<void(const std::string&)> log;
};

// The names MakeRuntime accepts, for help texts.
inline constexpr const char* kRuntimeNames = "nsbox|local|docker";

// "docker" fails here, saying why, when no engine answers.
StatusOr<std::unique_ptr<SandboxRuntime>> MakeRuntime(const std::string& name, const RuntimeConfig& config);

}  // namespace nsbox::runtime
