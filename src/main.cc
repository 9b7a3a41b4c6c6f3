// nsbox's entry point: builds the CLI from the verbs, runs one, and prints a failure once, at the top.
#include <fcntl.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "nsbox_config.h"
#include "sandbox/base/data_dir.h"
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

// Every level of verbs is checked alike: a word that names none of a level's commands (`nsbox bogus`, `nsbox image
// bogus`), or none at all where one is required (`nsbox image`), is one line listing them. Options end the walk:
// CLI11 judges those, and --help works at any level.
std::optional<std::string> CommandMistake(CLI::App& app, int argc, char** argv) {
  CLI::App* command = &app;
  std::string path = "nsbox";
  for (int i = 1;; ++i) {
    std::vector<CLI::App*> commands = command->get_subcommands([](CLI::App*) { return true; });
    if (commands.empty() || (i < argc && argv[i][0] == '-')) return std::nullopt;
    std::string names;
    for (const CLI::App* c : commands) names += (names.empty() ? "" : ", ") + c->get_name();
    if (i >= argc) {
      if (command->get_require_subcommand_min() == 0) return std::nullopt;
      return fmt::format("{}: a command is required (commands: {}; see {} --help)", path, names, path);
    }
    auto named =
        std::find_if(commands.begin(), commands.end(), [&](const CLI::App* c) { return c->check_name(argv[i]); });
    if (named == commands.end())
      return fmt::format("{}: unknown command '{}' (commands: {}; see {} --help)", path, argv[i], names, path);
    command = *named;
    path += " " + command->get_name();
  }
}

}  // namespace

int main(int argc, char** argv) {
  OpenStandardDescriptors();
  // A reader that went away (`nsbox run ... | head -c1`) is a write error nsbox reports (exit 125, with the reason),
  // not a silent death by SIGPIPE that would read as the program's. Sandboxed programs get the default back.
  ::signal(SIGPIPE, SIG_IGN);
  // Every verb but doctor (which reports it) refuses untrusted data before anything is set up (data_dir.h).
  if (argc > 1 && argv[1][0] != '-' && std::string_view(argv[1]) != "doctor") nsbox::DataDir();
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
      {"doctor", nsbox::cli::RegisterDoctor},   {"batch", nsbox::cli::RegisterBatch},
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
  if (!registered)
    for (const auto& [name, reg] : kVerbs) reg(app, exit_code);
  if (auto mistake = CommandMistake(app, argc, argv)) {
    fmt::print(stderr, "{}\n", *mistake);
    return nsbox::cli::kExitNsboxFailure;
  }
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
