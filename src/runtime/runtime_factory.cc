// MakeRuntime: name → runtime, with the checks each needs before a conversation starts.
#include "src/runtime/runtime_factory.h"

#include <fmt/format.h>

#include "src/runtime/docker_runtime.h"
#include "src/runtime/local_runtime.h"
#include "src/runtime/nsbox_runtime.h"

namespace nsbox::runtime {

StatusOr<std::unique_ptr<SandboxRuntime>> MakeRuntime(const std::string& name, const RuntimeConfig& config) {
  if (name == "nsbox") {
    NsboxRuntimeOptions options;
    options.nsbox_bin = config.nsbox_bin;
    options.max_lifetime = config.max_lifetime;
    options.sandbox_args = config.sandbox_args;
    options.log = config.log;
    return std::unique_ptr<SandboxRuntime>(new NsboxRuntime(std::move(options)));
  }
  if (!config.sandbox_args.empty())
    return Status::Error(
        fmt::format("{} is an nsbox sandbox option; the {} runtime does not take it (use --runtime "
                    "nsbox)",
                    config.sandbox_args.front(), name));
  if (name == "local") return std::unique_ptr<SandboxRuntime>(new LocalRuntime());
  if (name == "docker") {
    NSBOX_RETURN_IF_ERROR(DockerRuntime::EngineAvailable().Wrap("the docker runtime needs a Docker engine"));
    return std::unique_ptr<SandboxRuntime>(new DockerRuntime());
  }
  return Status::Error(fmt::format("unknown runtime \"{}\" (choose {})", name, kRuntimeNames));
}

}  // namespace nsbox::runtime
