// `nsbox mcp`: serves the Model Context Protocol on stdio; one sandbox session per connection, ended with it.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "sandbox/executor.h"
#include "sandbox/spec/units.h"
#include "src/cli/commands.h"
#include "src/mcp/server.h"
#include "src/runtime/nsbox_runtime.h"

namespace nsbox::cli {

void RegisterMcp(CLI::App& app, ExitCode& exit_code) {
  auto* mcp = app.add_subcommand("mcp", "serve sandboxed code execution to an MCP client over stdio");
  // Isolation and limit options are passed through to the session unchanged (`nsbox session create` checks them).
  mcp->allow_extras();
  mcp->prefix_command(false);
  static bool verbose = false;
  mcp->add_flag("--verbose", verbose, "log each session step to stderr");
  // The operator's caps: a tool call's timeout_seconds (the model's choice) is cut to --max-timeout, always.
  static std::string timeout = "30s", max_timeout = "10m", output_limit = "1M";
  mcp->add_option("--timeout", timeout, "time limit of a tool call that sets no timeout_seconds")
      ->capture_default_str();
  mcp->add_option("--max-timeout", max_timeout, "the most time any tool call gets, whatever timeout_seconds asks")
      ->capture_default_str();
  mcp->add_option("--output-limit", output_limit, "bytes the sandbox keeps per stream of a tool call")
      ->capture_default_str();
  mcp->footer([] {
    return "Sandbox options: those of `nsbox session create` (isolation, limits, lifetime), passed through to the\n"
           "connection's session and checked at start-up:\n" +
           SessionCreateOptionsHelp() +
           "\nExamples:\n"
           "  nsbox mcp --memory 1G --pids 128 --max-timeout 2m --output-limit 256K\n"
           "  nsbox mcp --network allow=pypi.org,files.pythonhosted.org --network-limit 500M\n"
           "  nsbox mcp --rootfs IMAGE --idle-timeout 30m --max-lifetime 8h\n";
  });
  mcp->callback([mcp, &exit_code] {
    std::vector<std::string> sandbox_args = mcp->remaining();
    for (const auto& arg : sandbox_args) {
      if (arg == "--json" || arg == "--lang" || arg == "--code" || arg == "--file") {
        fmt::print(stderr, "nsbox mcp: {} is not an isolation or limit option\n", arg);
        exit_code.value = kExitNsboxFailure;
        return;
      }
    }
    // A bad option is said now, once, rather than by every tool call of a client that cannot show it well.
    if (Status s = CheckSessionCreateArgs(sandbox_args, "nsbox mcp"); !s.ok()) {
      fmt::print(stderr, "nsbox mcp: {}\n", s.message());
      exit_code.value = kExitNsboxFailure;
      return;
    }
    mcp::ServerOptions server_options;
    auto fail = [&exit_code](const std::string& message) {
      fmt::print(stderr, "nsbox mcp: {}\n", message);
      exit_code.value = kExitNsboxFailure;
    };
    auto default_timeout = ParseDuration(timeout);
    if (!default_timeout.ok()) return fail("--timeout: " + default_timeout.status().message());
    auto cap = ParseDuration(max_timeout);
    if (!cap.ok()) return fail("--max-timeout: " + cap.status().message());
    if (mcp->count("--timeout") > 0 && *default_timeout > *cap)
      return fail(fmt::format("--timeout {} is longer than --max-timeout {}", timeout, max_timeout));
    server_options.default_timeout = std::min(*default_timeout, *cap);
    server_options.max_timeout = *cap;
    auto limit = ParseSize(output_limit);
    if (!limit.ok()) return fail("--output-limit: " + limit.status().message());
    if (std::string why = CheckOutputLimit(*limit); !why.empty()) return fail("--output-limit: " + why);
    server_options.output_limit_bytes = *limit;
    for (size_t i = 0; i < sandbox_args.size(); ++i) {
      const std::string& arg = sandbox_args[i];
      std::string network = arg.starts_with("--network=")                       ? arg.substr(10)
                            : arg == "--network" && i + 1 < sandbox_args.size() ? sandbox_args[i + 1]
                                                                                : "";
      if (!network.empty()) server_options.open_world = network != "none";
    }
    runtime::NsboxRuntimeOptions options;
    options.sandbox_args = sandbox_args;
    if (verbose) options.log = [](const std::string& line) { fmt::print(stderr, "nsbox mcp: {}\n", line); };
    mcp::McpServer server(
        [options]() -> StatusOr<std::unique_ptr<runtime::SandboxRuntime>> {
          return std::unique_ptr<runtime::SandboxRuntime>(new runtime::NsboxRuntime(options));
        },
        server_options);

    // SIGINT/SIGTERM/SIGHUP end the session at once, running calls and all. The end of stdin is gentler: Serve()
    // answers the calls in flight first.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR2}) sigaddset(&stop_signals, sig);
    ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    std::thread watcher([&server, stop_signals] {
      int sig = 0;
      ::sigwait(&stop_signals, &sig);
      if (sig == SIGUSR2) return;  // Serve() ended normally
      server.Shutdown();
      _exit(128 + sig);
    });
    server.Serve(0, 1);
    ::pthread_kill(watcher.native_handle(), SIGUSR2);
    watcher.detach();
    exit_code.value = 0;
  });
}

}  // namespace nsbox::cli
