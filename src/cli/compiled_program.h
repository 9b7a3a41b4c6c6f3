// A program with a compile step: the plan (compiler and program as two Executors), the session exec request that
// carries it, and RunProgram, the one sequence (compile, its verdict, run) that run, sessions and their clients share.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"
#include "sandbox/executor.h"
#include "sandbox/live_output.h"
#include "sandbox/policy.h"
#include "sandbox/result.h"
#include "src/cli/languages.h"

namespace nsbox {
class SandboxHooks;
}

namespace nsbox::cli {

// Where compile steps write, inside the sandbox: a directory of /tmp per program (BuildDir). /tmp rather than
// /workspace: the workspace may be a host directory (--workspace) and is what a session reports as changed files;
// the source and the binary are nsbox's, not the user's. In a session, RunProgram removes it after the program.
inline constexpr const char* kBuildRoot = "/tmp/nsbox-build";

struct Program {
  Executor run;                     // the program (for an interpreted language, the interpreter on the code)
  std::optional<Executor> compile;  // a compiled language's compiler: runs first, in the same sandbox
  std::string build_dir;            // the compile step's directory; empty without one
};

// OK when the root (rootfs_dir, empty for the host view) has what the language runs with: its interpreter, or its
// compiler, /bin/sh for the compile step and the program's runtime (java, node). Else the one-line error naming what
// is missing and the image template that has it.
Status CheckToolchain(const Language& lang, const std::string& rootfs_dir);

// A fresh build directory's path under kBuildRoot (random, so that a session's concurrent execs do not meet).
std::string NewBuildDir();

// The compile plan of a compiled language (pure, for tests): `program` holds the program's environment, cwd, stdin,
// umask and limits, as BuildExecutor made them; its code goes to the compiler, and its argv becomes the language's
// with {build} and {output} filled in. The compiler reads /dev/null, runs for `compile_timeout` and has the language's
// compile memory as its own memory limit (Executor::memory_max_bytes).
Program PlanCompiledProgram(const Language& lang, Executor program, const std::string& build_dir,
                            std::chrono::milliseconds compile_timeout);

// The language's part of a program, for `nsbox run`/`exec` (BuildProgram) and the service alike: its environment
// added to `ex`'s (callers add the user's after it, so that the user's wins), and for an interpreted language the
// interpreter's argv on the code file in /workspace. A compiled language's argv comes with FinishProgram's plan.
void ApplyLanguage(const Language& lang, Executor& ex);

// A compiled language's step limits when the caller gives them; nullopt: the language table's.
struct CompileOverrides {
  std::optional<std::chrono::milliseconds> timeout;
  std::optional<uint64_t> memory_bytes;
};
// The program to run: `ex` alone for a command or an interpreted language, else the compile plan
// (PlanCompiledProgram in a fresh build directory) with the overrides applied. The caller has refused overrides for
// a language without a compile step, naming them its own way (a flag, a JSON field).
// program_memory_bytes: the program's memory limit (nullopt: none), for SizeHeap.
Program FinishProgram(const std::optional<Language>& lang, Executor ex, const CompileOverrides& overrides,
                      std::optional<uint64_t> program_memory_bytes);

// Runtimes that size their heap from the host's RAM, which the sandbox does not hide (the JVM, V8), are told the
// program's limit: "{heap_mib}" in the first `language_args` arguments (the language table's) becomes three quarters
// of `memory_bytes` in MiB (at least 16), so that they collect garbage before the OOM killer comes. Without a memory
// limit the argument that holds it is left out. The user's arguments and environment are never touched.
void SizeHeap(Executor& program, std::optional<uint64_t> memory_bytes, size_t language_args);

// Runs one step in the sandbox: Sandbox::Run's or SessionSandbox::Exec's result for this executor. kRemove is the
// last step, removing the build directory.
enum class Step { kCompile, kProgram, kRemove };
using StepRunner = std::function<Result(Executor, Step)>;

// Runs program.compile (when set) and then, if it succeeded, program.run, each through run_step. The result is the
// program's own with a "compile" key (the compile step's figures) added; a compile step that failed, or hit its
// limits, is a kCompileError result holding the compiler's output as stdout and stderr (the program never ran).
// remove_build_dir: after the program, a last step removes the build directory (a session's /tmp outlives the exec).
Result RunProgram(Program program, const StepRunner& run_step, bool remove_build_dir);

// Whether `result`, a step that could not start, is the compiled program `made` (its argv[0]) failing to execve in
// `build_dir`: gone, not executable, no program format. The code's doing (a package that is not main, or a program
// that removed itself in an earlier case), not nsbox's.
bool CompiledProgramWouldNotStart(const Result& result, const std::string& made, const std::string& build_dir);
// Such a result at the program's first start, as the compile error it is: "compile step made no program".
Result MadeNoProgram(Result result, const std::string& made);

// The compile step alone (for a program run several times, e.g. on test cases): runs program.compile through
// run_step. `figures` is the "compile" object; `failed` holds RunProgram's kCompileError (or setup_error) result when
// the step did not succeed. A program without a compile step gives neither.
struct CompileOutcome {
  nlohmann::json figures;        // null without a compile step
  std::optional<Result> failed;  // the verdict when the compile did not succeed
};
CompileOutcome RunCompileStep(Program& program, const StepRunner& run_step);

// Starts a sandbox for the steps of one run (a SessionSandbox that lives for `steps`), hands `steps` a runner of
// execs in it, then ends it. `cancel_fd` (-1: none) readable kills the running step; `hooks` may be null. Makes the
// calling process a child subreaper (each exec's payload becomes its child). An error when the sandbox did not start.
// `live` (may be null) passes the program step's output on while it runs (not the compiler's: its diagnostics are
// the result's), and a reader that goes away ends the step.
Status RunSteps(Policy policy, SandboxHooks* hooks, int cancel_fd, const std::function<void(const StepRunner&)>& steps,
                LiveOutput* live = nullptr);

// RunProgram in a sandbox of its own (RunSteps): nsbox run's and nsbox batch's compiled languages.
Result RunCompiledProgram(Program program, Policy policy, SandboxHooks* hooks, int cancel_fd,
                          LiveOutput* live = nullptr);

// The session exec request for a program (nsbox exec, and any front end that speaks to a session's supervisor), and
// the program back from one (the supervisor). `repl` asks for the session's Python REPL.
nlohmann::json ExecRequest(const Program& program, bool repl);
StatusOr<Program> ProgramFromExecRequest(const nlohmann::json& request);
// How long a client waits for an exec's answer, before the session's grace: both steps' time-outs.
std::chrono::milliseconds ProgramTimeout(const Program& program);

}  // namespace nsbox::cli
