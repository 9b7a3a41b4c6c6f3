// An embedder of the nsbox engine: built with include/nsbox/ as its only include path and linked with the engine's
// static library, it runs one command in a sandbox and prints the outcome. Usage: embed_example DATADIR CMD [ARG...]
// (DATADIR holds rootfs/host.json and seccomp-profiles/, as nsbox's data directory does).
#include <cstdio>
#include <string>

#include <nsbox/executor.h>
#include <nsbox/policy.h>
#include <nsbox/result.h>
#include <nsbox/sandbox.h>

// The public headers bring no JSON library with them (the system's include path would find one).
#ifdef NLOHMANN_JSON_VERSION_MAJOR
#error "include/nsbox/ pulled in nlohmann_json"
#endif

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DATADIR CMD [ARG...]\n", argv[0]);
    return 2;
  }
  const std::string data_dir = argv[1];
  nsbox::CgroupLimits limits;
  limits.memory_max_bytes = 128ull << 20;
  limits.pids_max = 32;
  auto policy = nsbox::PolicyBuilder()
                    .SetHostViewFile(data_dir + "/rootfs/host.json")
                    .SetSeccompProfile("default", data_dir + "/seccomp-profiles")
                    .SetCgroupLimits(limits)
                    .TryBuild();
  if (!policy.ok()) {
    std::fprintf(stderr, "policy: %s\n", policy.status().message().c_str());
    return 125;
  }
  nsbox::Executor executor;
  executor.argv.assign(argv + 2, argv + argc);
  executor.env = nsbox::DefaultSandboxEnv();
  nsbox::Sandbox sandbox(std::move(executor), std::move(*policy));
  nsbox::Result result = sandbox.Run();
  std::fwrite(result.stdout_data.data(), 1, result.stdout_data.size(), stdout);
  std::printf("status=%s exit_code=%d reason=%s\n", nsbox::RunStatusName(result.status), result.exit_code,
              result.reason.c_str());
  return result.ShellExitCode();
}
