// nsbox's entry point: builds the CLI from the verbs, runs one, and prints a failure once, at the top.
#include <fcntl.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "src/cli/commands.h"

namespace {

// A standard descriptor nsbox was started without (`nsbox run ... >&-`) becomes /dev/null, as a daemon's would: else
// the number would go to the first file nsbox opens (a profile, a cgroup control file), and the result or an error
// message would be written into that file. What was meant for the closed descriptor is discarded.
void OpenStandardDescriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    int null = ::open("/dev/null", O_RDWR);  // the lowest free number: this one
    if (null >= 0 && null != fd) ::close(null);
  }
}

}  // namespace

int main(int argc, char** argv) {
  OpenStandardDescriptors();
  // A reader that went away (`nsbox run ... | head -c1`) is a write error nsbox reports (exit 125, with the reason),
  // not a silent death by SIGPIPE that would read as the program's. Sandboxed programs get the default back.
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"nsbox: run untrusted code in a Linux-native sandbox (namespaces, cgroups, seccomp, read-only root)"};
  app.set_version_flag("--version", "nsbox " NSBOX_VERSION);
  app.require_subcommand(1);
  nsbox::cli::ExitCode exit_code;
  // Every verb's options cost allocations at start-up (CLI11 builds them eagerly); when the verb is named, only it
  // is built. Help, version and mistakes see them all.
  using Register = void (*)(CLI::App&, nsbox::cli::ExitCode&);
  static const std::pair<const char*, Register> kVerbs[] = {
      {"run", nsbox::cli::RegisterRun},       {"session", nsbox::cli::RegisterSession},
      {"exec", nsbox::cli::RegisterExec},     {"cp", nsbox::cli::RegisterCp},
      {"agent", nsbox::cli::RegisterAgent},   {"mcp", nsbox::cli::RegisterMcp},
      {"image", nsbox::cli::RegisterImage},   {"profile", nsbox::cli::RegisterProfile},
      {"doctor", nsbox::cli::RegisterDoctor},
  };
  bool registered = false;
  if (argc > 1) {
    for (const auto& [name, reg] : kVerbs) {
      if (std::string_view(argv[1]) == name) {
        reg(app, exit_code);
        registered = true;
      }
    }
  }
  if (!registered && argc > 1 && argv[1][0] != '-') {
    std::string known;
    for (const auto& [name, reg] : kVerbs) known += known.empty() ? name : std::string(", ") + name;
    fmt::print(stderr, "nsbox: unknown command '{}' (commands: {}; see nsbox --help)\n", argv[1], known);
    return nsbox::cli::kExitNsboxFailure;
  }
  if (!registered)
    for (const auto& [name, reg] : kVerbs) reg(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the problem, and the exit code of an nsbox failure (and the JSON result --json promises).
    return nsbox::cli::FailBeforeRun("", e.what(), nsbox::cli::WantsJsonResult(argc, argv));
  } catch (const std::exception& e) {
    fmt::print(stderr, "nsbox: {}\n", e.what());
    return nsbox::cli::kExitNsboxFailure;
  }
  return exit_code.value;
}
