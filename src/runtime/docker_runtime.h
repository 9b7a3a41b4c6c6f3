// DockerRuntime: runs each call in a throw-away `docker run --rm` container with no network, capped resources, a
// read-only root and no privileges.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "src/runtime/sandbox_runtime.h"

namespace nsbox::runtime {

struct DockerRuntimeOptions {
  std::string docker_bin = "docker";
  std::string python_image = "python:3-slim";
  std::string node_image = "node:20-slim";
  std::string shell_image = "debian:bookworm-slim";
  std::string memory = "512m";
  std::string cpus = "1";
  int pids_limit = 256;
};

class DockerRuntime : public SandboxRuntime {
 public:
  explicit DockerRuntime(DockerRuntimeOptions options = {});
  std::string name() const override { return "docker"; }
  StatusOr<ExecutionResult> execute(const std::string& language, const std::string& code,
                                    const ExecuteOptions& options) override;

  // Whether a Docker engine answers (`docker info`); the error says why not.
  static Status EngineAvailable(const std::string& docker_bin = "docker");
  // The `docker run` argv for one call (pure, for tests); an unknown language is an error.
  static StatusOr<std::vector<std::string>> RunArgv(const DockerRuntimeOptions& options,
                                                    const std::string& container_name, const std::string& language);

 private:
  DockerRuntimeOptions options_;
  std::atomic<int> calls_{0};
};

}  // namespace nsbox::runtime
