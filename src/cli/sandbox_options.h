// The options shared by every verb that makes a sandbox (run, session create, mcp), and how they become a Policy.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sandbox/base/status.h"
#include "sandbox/executor.h"
#include "sandbox/policy.h"
#include "src/cli/compiled_program.h"
#include "src/cli/network.h"

namespace nsbox::cli {

struct SandboxOptions {
  std::string rootfs = "host";
  std::string workspace;
  std::vector<std::string> ro_binds, binds;
  std::string network = "none";
  std::string network_limit;
  bool allow_private_addresses = false;
  std::string memory = "512M";
  std::string memory_swap;
  uint64_t pids = 256;
  double cpus = 1.0;
  std::string tmpfs_size = "256M";
  bool no_limits = false;
  std::string profile = "default";
  std::string limit_given;  // the first of --memory, --memory-swap, --pids, --cpus given, for conflicts
};

void AddSandboxOptions(CLI::App* app, SandboxOptions& options);
// The sandbox options given on `app` (declared there by AddSandboxOptions), back as arguments in the order of their
// declaration: for a verb that parses them itself and hands them to `nsbox session create` (agent).
std::vector<std::string> GivenSandboxArgs(const CLI::App& app);
// hold_image: an image named by --rootfs is held (UseImage) for this process's life, for a sandbox it sets up; a check
// of the options alone (nsbox mcp's, nsbox agent's at start) resolves it without holding it.
StatusOr<Policy> BuildPolicy(const SandboxOptions& options, bool hold_image = true);
// An engine message in the CLI's words: the policy settings it names (CgroupLimits::cpus,
// PolicyBuilder::DangerDisableCgroupLimits …) become the options that set them (--cpus,
// --dangerously-run-without-limits).
std::string InCliTerms(std::string message);
// For --network allow=…: the proxy's settings; nullopt for none and host.
StatusOr<std::optional<NetworkAllowSpec>> BuildNetworkSpec(const SandboxOptions& options);

// What to run and how: shared by run and exec.
struct ProgramOptions {
  bool json = false;
  std::string timeout = "30s";
  std::string output_limit = "1M";
  std::string stdin_source;  // "" → /dev/null, "-" → nsbox's stdin, else a file
  std::vector<std::string> env;        // KEY=VALUE, or KEY for the host's value (Docker's -e)
  std::vector<std::string> env_files;  // lines KEY=VALUE or KEY, # comments (Docker's --env-file)
  std::string workdir;                 // the program's working directory (default /workspace)
  std::string lang, code, file;
  std::string compile_timeout;  // a compiled language's compile step; "" → the language table's
  std::string compile_memory;   // the compile step's own memory limit; "" → the language table's (1G)
  bool code_given = false, file_given = false;  // --code '' is an empty program, not no program
  std::vector<std::string> command;
};

void AddProgramOptions(CLI::App* app, ProgramOptions& options);
// Fills argv, env, code file, limits and stdin, and for a compiled language the compile step (PlanCompiledProgram).
// `rootfs_dir` (empty for host) is where interpreters and compilers are checked. Every front end that runs --lang
// code builds it here and runs it with RunProgram (in-process) or sends it to a session with ExecRequest.
// program_memory_bytes: the memory limit the program will run under (nullopt: none), for SizeHeap.
StatusOr<Program> BuildProgram(const ProgramOptions& options, const std::string& rootfs_dir,
                               std::optional<uint64_t> program_memory_bytes);
// BuildProgram for a verb that runs one step only: a compiled language is refused, naming the verb.
StatusOr<Executor> BuildExecutor(const ProgramOptions& options, const std::string& rootfs_dir,
                                 std::optional<uint64_t> program_memory_bytes);
// The program's memory limit under `policy`: nullopt when it runs without cgroup limits.
std::optional<uint64_t> ProgramMemory(const Policy& policy);
// A compiled language's compiler needs more memory than most programs: each step has its own limit (an exec group
// of its own, see docs/languages.md), and the sandbox's cgroup gets the larger of --compile-memory (default the
// language table's) and --memory. Returns the program's own limit (--memory), 0 when there is none to set (not a
// compiled language, --no-limits). A bad compile memory is named `name` (a batch job's field, or the option).
StatusOr<uint64_t> ApplyCompileMemory(const ProgramOptions& program, SandboxOptions& sandbox,
                                      std::string_view name = "--compile-memory");
// --compile-timeout and --compile-memory as given, whatever the language: a command running many programs (batch)
// refuses a bad one once rather than failing each compiled job with it.
Status CheckCompileOptions(const ProgramOptions& program, const SandboxOptions& sandbox);

// Reads a whole input (a file, or "-" for stdin) with a size cap, naming the problem when it fails.
StatusOr<std::string> ReadInput(const std::string& source, size_t max_bytes, std::string_view what);

}  // namespace nsbox::cli
