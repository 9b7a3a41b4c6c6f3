// `nsbox serve`: execs nsbox-serve (src/serve/main.cc), the service, with the command line as given and this
// program's own path, from which the service makes its sandboxes.
#include <unistd.h>

#include <fmt/format.h>

#include "nsbox_config.h"
#include "src/cli/commands.h"
#include "src/runtime/helper_program.h"

namespace nsbox::cli {

void RegisterServe(CLI::App& app, ExitCode&) {
  // Listed for --help; the command line itself goes to nsbox-serve whole (ExecServe, called before parsing).
  app.add_subcommand("serve", "the sandbox service: an HTTP API on a Unix socket (and TCP with a token), a warm pool");
}

int ExecServe(int argc, char** argv) {
  auto helper = runtime::FindHelperProgram("nsbox-serve", NSBOX_SERVE_HELPER_INSTALLED, NSBOX_SERVE_HELPER_BUILD,
                                           "the service program");
  if (!helper.ok()) {
    fmt::print(stderr, "nsbox serve: {}\n", helper.status().message());
    return kExitNsboxFailure;
  }
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fmt::print(stderr, "nsbox serve: readlink(/proc/self/exe) failed\n");
    return kExitNsboxFailure;
  }
  std::string self_path(self, static_cast<size_t>(n));
  // Ahead of the user's options: after them, an option left without its value (`--pool` last) took it as its own.
  std::vector<std::string> args = {*helper, "--nsbox-binary=" + self_path};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> c_args;
  for (auto& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  ::execv(helper->c_str(), c_args.data());
  fmt::print(stderr, "nsbox serve: execv({}): {}\n", *helper, strerror(errno));
  return kExitNsboxFailure;
}

}  // namespace nsbox::cli
