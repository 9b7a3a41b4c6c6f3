// The CLI verbs: each verb file registers its subcommand on the root CLI11 app.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"

namespace nsbox::cli {

// A verb's callback sets this to the process exit code; main() returns it.
struct ExitCode {
  int value = 0;
};

// Exit code for failures of nsbox itself: bad options, setup errors.
inline constexpr int kExitNsboxFailure = 125;

// run's and exec's failures before any sandbox ran (a bad option or input): the one-line error on stderr and, with
// --json, a setup_error result on stdout, which then holds one JSON object whatever happened. Returns 125.
int FailBeforeRun(std::string_view verb, std::string_view message, bool json,
                  const nlohmann::json& extras = nlohmann::json::object());
// Whether argv is `nsbox run|exec ... --json ...` (before any "--"), for errors found while parsing it.
bool WantsJsonResult(int argc, char** argv);

void RegisterRun(CLI::App& app, ExitCode& exit_code);
void RegisterDoctor(CLI::App& app, ExitCode& exit_code);
void RegisterAgent(CLI::App& app, ExitCode& exit_code);
void RegisterMcp(CLI::App& app, ExitCode& exit_code);
void RegisterProfile(CLI::App& app, ExitCode& exit_code);  // src/cli/profile.cc
void RegisterImage(CLI::App& app, ExitCode& exit_code);    // src/cli/image.cc
void RegisterSession(CLI::App& app, ExitCode& exit_code);
// Parses and checks options as `nsbox session create` would, making nothing: for verbs that pass them through. `help`
// names the verb whose --help lists them ("nsbox mcp").
Status CheckSessionCreateArgs(const std::vector<std::string>& args, const std::string& help);
// The help lines of those options, for the --help of verbs that pass them through.
std::string SessionCreateOptionsHelp();
void RegisterExec(CLI::App& app, ExitCode& exit_code);
void RegisterCp(CLI::App& app, ExitCode& exit_code);
void RegisterBatch(CLI::App& app, ExitCode& exit_code);  // src/cli/batch.cc
void RegisterServe(CLI::App& app, ExitCode& exit_code);  // src/cli/serve.cc
// `nsbox serve ...`: execs the service program with the rest of the command line; returns only on failure.
int ExecServe(int argc, char** argv);
// Further verbs (profile, session, exec, cp, agent, mcp, image, doctor) add their Register* here.

}  // namespace nsbox::cli
