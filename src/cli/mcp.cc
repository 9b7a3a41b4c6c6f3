// `nsbox mcp`: serves the Model Context Protocol on stdio; one sandbox session per connection, ended with it.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include <fmt/format.h>

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
  mcp->footer([] {
    return "Sandbox options: those of `nsbox session create` (isolation, limits, lifetime), passed through to the\n"
           "connection's session and checked at start-up:\n" +
           SessionCreateOptionsHelp() +
           "\nExamples:\n"
           "  nsbox mcp --memory 1G --pids 128\n"
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
    if (Status s = CheckSessionCreateArgs(sandbox_args); !s.ok()) {
      fmt::print(stderr, "nsbox mcp: {}\n", s.message());
      exit_code.value = kExitNsboxFailure;
      return;
    }
    runtime::NsboxRuntimeOptions options;
    options.sandbox_args = sandbox_args;
    if (verbose) options.log = [](const std::string& line) { fmt::print(stderr, "nsbox mcp: {}\n", line); };
    mcp::McpServer server(
        [options]() -> StatusOr<std::unique_ptr<runtime::SandboxRuntime>> {
          return std::unique_ptr<runtime::SandboxRuntime>(new runtime::NsboxRuntime(options));
        },
        mcp::ServerOptions{});

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
