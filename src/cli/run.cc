// `nsbox run`: one program in one fresh sandbox; output passed through, or one JSON result.
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "sandbox/sandbox.h"
#include "src/cli/commands.h"
#include "src/cli/sandbox_options.h"

namespace nsbox::cli {
namespace {

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

// Prints a result the way run and exec do; returns the exit code.
int EmitResult(const Result& result, bool json) {
  if (json) {
    fmt::print("{}\n", ResultToJson(result).dump());
    std::fflush(stdout);
  } else {
    WriteAll(1, result.stdout_data);
    WriteAll(2, result.stderr_data);
    if (result.status != RunStatus::kOk && result.status != RunStatus::kExit)
      fmt::print(stderr, "nsbox: {}: {}\n", RunStatusName(result.status), result.reason);
  }
  return result.ShellExitCode();
}

void RegisterRun(CLI::App& app, ExitCode& exit_code) {
  auto* run = app.add_subcommand("run", "run one program in a fresh sandbox");
  static SandboxOptions sandbox_options;
  static ProgramOptions program_options;
  AddSandboxOptions(run, sandbox_options);
  AddProgramOptions(run, program_options);
  run->callback([&exit_code] {
    auto fail = [&](const Status& status) {
      fmt::print(stderr, "nsbox run: {}\n", status.message());
      exit_code.value = kExitNsboxFailure;
    };
    auto policy = BuildPolicy(sandbox_options);
    if (!policy.ok()) return fail(policy.status());
    auto network = BuildNetworkSpec(sandbox_options);
    if (!network.ok()) return fail(network.status());
    auto executor = BuildExecutor(program_options, policy->rootfs_dir());
    if (!executor.ok()) return fail(executor.status());
    std::unique_ptr<EgressProxyHooks> proxy;
    if (*network) {
      for (const auto& [key, value] : netproxy::ProxyEnvironment(netproxy::kSandboxProxyPort)) executor->env[key] = value;
      proxy = std::make_unique<EgressProxyHooks>(**network);
    }
    Sandbox sandbox(std::move(*executor), std::move(*policy));
    sandbox.ForwardSignals(true);
    if (proxy) sandbox.SetHooks(proxy.get());
    Result result = sandbox.Run();
    exit_code.value = EmitResult(result, program_options.json);
  });
}

}  // namespace nsbox::cli
