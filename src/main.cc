// nsbox's entry point: builds the CLI from the verbs, runs one, and prints a failure once, at the top.
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "src/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"nsbox: run untrusted code in a Linux-native sandbox (namespaces, cgroups, seccomp, read-only root)"};
  app.set_version_flag("--version", "nsbox " NSBOX_VERSION);
  app.require_subcommand(1);
  nsbox::cli::ExitCode exit_code;
  nsbox::cli::RegisterRun(app, exit_code);
  nsbox::cli::RegisterDoctor(app, exit_code);
  nsbox::cli::RegisterAgent(app, exit_code);
  nsbox::cli::RegisterMcp(app, exit_code);
  nsbox::cli::RegisterProfile(app, exit_code);
  nsbox::cli::RegisterImage(app, exit_code);
  nsbox::cli::RegisterSession(app, exit_code);
  nsbox::cli::RegisterExec(app, exit_code);
  nsbox::cli::RegisterCp(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the problem, and the exit code of an nsbox failure.
    fmt::print(stderr, "nsbox: {}\n", e.what());
    return nsbox::cli::kExitNsboxFailure;
  } catch (const std::exception& e) {
    fmt::print(stderr, "nsbox: {}\n", e.what());
    return nsbox::cli::kExitNsboxFailure;
  }
  return exit_code.value;
}
