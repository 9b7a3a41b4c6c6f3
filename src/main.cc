// nsbox's entry point: builds the CLI from the verbs, runs one, and prints a failure once, at the top.
#include <fcntl.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
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
#include "src/cli/parse_error.h"

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
    std::string names;
    for (const CLI::App* c : commands) names += (names.empty() ? "" : ", ") + c->get_name();
    // An option before any command that nsbox itself does not have (`nsbox --bogus`): CLI11 would say only that a
    // command is required.
    if (command == &app && i < argc && argv[i][0] == '-' &&
        app.get_option_no_throw(std::string(argv[i]).substr(0, std::string_view(argv[i]).find('='))) == nullptr)
      return fmt::format("nsbox: unknown option '{}' (options come after the command: {}; see nsbox --help)", argv[i],
                         names);
    if (commands.empty() || (i < argc && argv[i][0] == '-')) return std::nullopt;
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

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The command argv names (`nsbox session create ...`: session's create), and in `next` the index of the first word
// after its name; `path` (may be null) gets its words ("nsbox session create").
CLI::App* NamedCommand(CLI::App& app, int argc, char** argv, int* next, std::string* path = nullptr) {
  CLI::App* command = &app;
  int i = 1;
  for (; i < argc && argv[i][0] != '-'; ++i) {
    CLI::App* sub = nullptr;
    for (CLI::App* c : command->get_subcommands([](CLI::App*) { return true; }))
      if (c->check_name(argv[i])) sub = c;
    if (sub == nullptr) break;
    command = sub;
    if (path) *path += " " + sub->get_name();
  }
  *next = i;
  return command;
}

// The first word before "--" that looks like an option and that the command named by argv does not have, as one line
// naming it (and the nearest option it has): CLI11 reports such a word by whatever token it could not place, often
// the next one ("nsbox run --memroy 1G -- true" would say "not expected: true").
std::optional<std::string> UnknownOption(CLI::App& app, int argc, char** argv) {
  std::string path = "nsbox";
  int i = 1;
  CLI::App* command = NamedCommand(app, argc, argv, &i, &path);
  if (command == &app || command->get_allow_extras()) return std::nullopt;
  const std::string name = nsbox::cli::FirstUnknownOption(*command, std::vector<std::string>(argv + i, argv + argc));
  if (name.empty()) return std::nullopt;
  std::string nearest;
  size_t best = 3;  // at most two edits away
  for (const CLI::Option* known : command->get_options()) {
    for (const std::string& long_name : known->get_lnames()) {
      size_t distance = EditDistance(name, "--" + long_name);
      // A near miss: a typo or two, not a different short word (--nope is not --code).
      if (distance < best && distance * 3 <= name.size() - 2) best = distance, nearest = "--" + long_name;
    }
  }
  return fmt::format("{}: unknown option '{}'{} (see {} --help)", path.substr(6), name,
                     nearest.empty() ? "" : fmt::format("; did you mean {}?", nearest), path);
}

// CLI11's other messages in nsbox's words, with the verb they are about (ExplainParseError).
std::string ExplainParseError(CLI::App& app, int argc, char** argv, const std::string& what) {
  std::string path = "nsbox";
  int i = 1;
  CLI::App* command = NamedCommand(app, argc, argv, &i, &path);
  return nsbox::cli::ExplainParseError(*command, path == "nsbox" ? "" : path.substr(6) + ": ", path, what);
}

// Docker's rule for a command that runs a program (run, exec): the program's first word ends nsbox's options, so
// `nsbox run echo --json` prints "--json" and `nsbox run ls -la` lists. CLI11 alone would take every later word that
// names an option of nsbox's, silently (`nsbox run echo --memory 64M` set the limit). Returns argv with "--" put
// before that word, or argv as it is.
std::vector<char*> EndOptionsAtCommand(CLI::App& app, int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  int i = 1;
  CLI::App* command = NamedCommand(app, argc, argv, &i);
  CLI::Option* words = command == &app ? nullptr : command->get_option_no_throw("command");
  if (words == nullptr) return args;
  // CLI11 reads a word in brackets as a list ("[1, 2]" became "1" and " 2": `nsbox run -- python3 -c "[f(x) for x in
  // y]"` ran a broken program). Such words get a \x1f before them, which the option's transform takes off again (a
  // word that starts with \x1f gets one more).
  static std::deque<std::string> escaped;  // a deque: args point into its strings
  words->transform([](std::string word) { return word.starts_with('\x1f') ? word.substr(1) : word; });
  auto escape_from = [&](size_t first) {
    for (size_t k = first; k < args.size(); ++k) {
      std::string_view word = args[k];
      if (!word.starts_with('\x1f') && !(word.starts_with('[') && word.ends_with(']'))) continue;
      escaped.push_back("\x1f" + std::string(word));
      args[k] = escaped.back().data();
    }
    return args;
  };
  // The positionals before the program's words (exec's session).
  int before = 0;
  for (const CLI::Option* option : command->get_options())
    if (option->get_positional() && option->get_name() != "command") before += option->get_expected_min();
  static char end_of_options[] = "--";
  for (; i < argc; ++i) {
    std::string_view word = argv[i];
    if (word == "--") return escape_from(i + 1);
    if (word.size() >= 2 && word[0] == '-') {
      std::string name(word.substr(0, word.find('=')));
      const CLI::Option* option = command->get_option_no_throw(name);
      if (option == nullptr && name.size() == 2) option = command->get_option_no_throw(name.substr(1));
      // Its value is the next word (unless written --name=value), even when that looks like a positional.
      if (option != nullptr && option->get_expected_min() > 0 && word.find('=') == std::string_view::npos) ++i;
      continue;
    }
    if (before-- > 0) continue;
    args.insert(args.begin() + i, end_of_options);
    return escape_from(i + 1);
  }
  return args;
}

// What a verb printed through stdio (help, profile check, image ls, doctor ...) and could not write (a full disk, a
// closed pipe) is an nsbox failure, said, not a silent success: `exit_code`, or 125.
int Written(int exit_code) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fmt::print(stderr, "nsbox: writing the output: {}\n", std::strerror(errno != 0 ? errno : EIO));
    return nsbox::cli::kExitNsboxFailure;
  }
  return exit_code;
}

}  // namespace

// An empty value is refused for every option that takes one (`--workspace "$UNSET"` must not quietly mean no
// workspace), but for --code (an empty program is a program), the command's own arguments after --, and the options
// whose verbs refuse an empty value in words of their own (--name, agent's --base-url).
void RefuseEmptyValues(CLI::App* app) {
  for (CLI::Option* option : app->get_options()) {
    if (option->get_expected_max() == 0 || option->get_lnames().empty()) continue;
    if (option->check_lname("code") || option->check_lname("name") || option->check_lname("base-url")) continue;
    option->check(CLI::Validator(
        [](std::string& value) { return value.empty() ? std::string("an empty value (leave the option out instead)")
                                                      : std::string(); },
        "", "non-empty"));
  }
  for (CLI::App* sub : app->get_subcommands({})) RefuseEmptyValues(sub);
}

int main(int argc, char** argv) {
  OpenStandardDescriptors();
  // A reader that went away (`nsbox run ... | head -c1`) is a write error nsbox reports (exit 125, with the reason),
  // not a silent death by SIGPIPE that would read as the program's. Sandboxed programs get the default back.
  ::signal(SIGPIPE, SIG_IGN);
  // Every verb but doctor (which reports it) refuses untrusted data before anything is set up (data_dir.h); run and
  // exec, below, once their program's words are told from theirs: with --json they still print their one JSON result.
  const std::string_view verb = argc > 1 ? argv[1] : "";
  const bool runs_program = verb == "run" || verb == "exec";
  if (!verb.empty() && verb[0] != '-' && verb != "doctor" && !runs_program) nsbox::DataDir();
  // The service is a program of its own, which takes the whole command line (src/cli/serve.cc).
  if (argc > 1 && std::string_view(argv[1]) == "serve") return nsbox::cli::ExecServe(argc, argv);
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
      {"serve", nsbox::cli::RegisterServe},
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
  RefuseEmptyValues(&app);
  std::vector<char*> args = EndOptionsAtCommand(app, argc, argv);
  argc = static_cast<int>(args.size());
  argv = args.data();
  if (runs_program) {
    if (nsbox::cli::WantsJsonResult(argc, argv)) {
      if (auto data = nsbox::ResolveDataDir(); !data.ok())
        return nsbox::cli::FailBeforeRun("", fmt::format("{}; {}", data.status().message(), nsbox::DataDirHint()),
                                         true);
    }
    nsbox::DataDir();
  }
  // "--workspace=" with nothing after the '=': CLI11 would take the next argument as its value ("--workspace= -- x"
  // binds "--"). Refused as an empty value, before the parse; only --code= may be empty.
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.starts_with("--") && arg.size() > 3 && arg.ends_with("=") && arg.find('=') == arg.size() - 1 &&
        arg != "--code=") {
      const std::string option(arg.substr(0, arg.size() - 1));
      return nsbox::cli::FailBeforeRun("", option + ": an empty value (leave the option out instead)",
                                       nsbox::cli::WantsJsonResult(argc, argv));
    }
  }
  if (auto mistake = CommandMistake(app, argc, argv)) {
    fmt::print(stderr, "{}\n", nsbox::PrintableLine(*mistake));  // argv's control bytes escaped
    return nsbox::cli::kExitNsboxFailure;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return Written(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return Written(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return Written(app.exit(e));
  } catch (const CLI::ParseError& e) {
    // One line naming the problem, and the exit code of an nsbox failure (and the JSON result --json promises).
    if (auto unknown = UnknownOption(app, argc, argv))
      return nsbox::cli::FailBeforeRun("", *unknown, nsbox::cli::WantsJsonResult(argc, argv));
    return nsbox::cli::FailBeforeRun("", ExplainParseError(app, argc, argv, e.what()),
                                     nsbox::cli::WantsJsonResult(argc, argv));
  } catch (const std::exception& e) {
    fmt::print(stderr, "nsbox: {}\n", nsbox::PrintableLine(e.what()));
    return nsbox::cli::kExitNsboxFailure;
  }
  return Written(exit_code.value);
}
