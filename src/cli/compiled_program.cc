// Compiled languages: the two-step plan, the exec request carrying it, and the compile step's verdict.
#include "src/cli/compiled_program.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "sandbox/base/unique_fd.h"
#include "sandbox/session.h"
#include "src/cli/java_class.h"

namespace nsbox::cli {
namespace {

// The compile step's shell: makes the build directory, writes the sealed code ($2, /dev/fd/N) there as the source
// file ($3), then the language's files ($4 of them, each a name and its text), and execs the compiler in it.
// Compilers want a named file (gcc picks the language by its suffix, javac the class by the file name, go build a
// .go file); the sealed memfd keeps the code unchanged until it is copied. The script's own failure (a full /tmp, a
// file in the way) exits kCompileSetupExit, which no compiler uses, so that it is not taken for the code's.
constexpr int kCompileSetupExit = 223;
std::string CompileScript() {
  return fmt::format(
      "mkdir -p -- \"$1\" && cd -- \"$1\" && cat -- \"$2\" > \"$3\" || exit {0}; n=$4; shift 4; "
      "while [ \"$n\" -gt 0 ]; do printf '%s' \"$2\" > \"$1\" || exit {0}; shift 2; n=$((n - 1)); done; exec \"$@\"",
      kCompileSetupExit);
}

// The placeholders of a compiled language's entry: {output} and {build} in argv and env; {java_class}, the program's
// own class (JavaMainClass), in those and in the source and output names.
struct Placeholders {
  std::string build_dir, output, java_class;
};

std::string Fill(std::string text, const Placeholders& values) {
  auto replace = [&text](std::string_view key, const std::string& value) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  };
  replace("{java_class}", values.java_class);
  replace("{output}", values.build_dir + "/" + values.output);
  replace("{build}", values.build_dir);
  return text;
}

nlohmann::json ExecutorToJson(const Executor& ex) {
  return {{"argv", ex.argv},
          {"env", ex.env},
          {"cwd", ex.cwd},
          {"umask", ex.umask},
          {"code_path", ex.code_path},
          {"code", ex.code},
          {"timeout_ms", ex.wall_timeout.count()},
          {"output_limit", ex.output_limit_bytes},
          {"memory_max_bytes", ex.memory_max_bytes},
          {"heap_exhausted_text", ex.heap_exhausted_text}};
}

Executor ExecutorFromJson(const nlohmann::json& request) {  // throws nlohmann::json::exception
  Executor ex;
  ex.argv = request.at("argv").get<std::vector<std::string>>();
  ex.env = request.at("env").get<std::map<std::string, std::string>>();
  ex.cwd = request.value("cwd", "/workspace");
  ex.umask = request.value("umask", 022u) & 0777;  // the client's; a client that does not say: 022
  ex.code_path = request.value("code_path", "");
  ex.code = request.value("code", "");
  ex.wall_timeout = std::chrono::milliseconds(request.at("timeout_ms").get<int64_t>());
  ex.output_limit_bytes = request.at("output_limit").get<uint64_t>();
  ex.memory_max_bytes = request.value("memory_max_bytes", uint64_t{0});  // 0 or absent: the session's limit alone
  ex.heap_exhausted_text = request.value("heap_exhausted_text", "");
  return ex;
}

// The compile step's figures, the "compile" key of the result.
// A compiler driver (gcc, g++, go build) whose own child was killed by the OOM killer exits with 1 and an "internal
// compiler error: Killed" of its own: the step hit its memory limit all the same, which the cgroup's OOM count during
// the step tells.
bool CompilerHitMemoryLimit(const Result& compiled) {
  return compiled.status == RunStatus::kExit && compiled.limits && compiled.limits->oom_kills > 0;
}

nlohmann::json CompileFigures(const Result& compiled) {
  const RunStatus status = CompilerHitMemoryLimit(compiled) ? RunStatus::kOom : compiled.status;
  return {{"status", RunStatusName(status)}, {"exit_code", compiled.exit_code},
          {"wall_ms", compiled.wall_ms},              {"cpu_ms", compiled.cpu_ms},
          {"peak_memory_bytes", compiled.peak_memory_bytes}};
}

// A compile step that did not succeed as the program's verdict: a failed compile or a compiler stopped by its
// limits is kCompileError; a step nsbox could not start, or that was cancelled, keeps its own status (nothing was
// judged of the code).
Result CompileVerdict(Result compiled, const std::string& compiler) {
  const nlohmann::json figures = CompileFigures(compiled);
  Result verdict = std::move(compiled);
  switch (verdict.status) {
    case RunStatus::kSetupError:
    case RunStatus::kSessionLost:
    case RunStatus::kKilled:
      verdict.reason = "compile step: " + verdict.reason;
      break;
    case RunStatus::kExit:
      if (verdict.exit_code == kCompileSetupExit) {
        std::string why = verdict.stderr_data.substr(0, verdict.stderr_data.find('\n'));
        verdict.reason = fmt::format("compile step: the source could not be written to the build directory: {}",
                                     why.empty() ? "the shell failed" : SanitizeUtf8(why));
        verdict.status = RunStatus::kSetupError;
        break;
      }
      verdict.reason =
          CompilerHitMemoryLimit(verdict)
              ? fmt::format(
                    "compile step oom: a process of the compiler was killed by the OOM killer ({} exited "
                    "with {}); give the compile step more memory (--compile-memory, compile_memory over the API)",
                    compiler, verdict.exit_code)
          : verdict.limits && verdict.limits->pids_limit_hit
              ? fmt::format("compile step stopped by the pids limit: {} exited with {} after the limit of {} "
                            "processes and threads was reached; give the sandbox more (--pids)",
                            compiler, verdict.exit_code, verdict.limits->pids_max)
              : fmt::format("compile error: {} exited with {}; its diagnostics are in stderr and stdout", compiler,
                            verdict.exit_code);
      verdict.status = RunStatus::kCompileError;
      break;
    default:  // the compiler's own time-out, memory, a signal, a denied system call
      verdict.reason = fmt::format("compile step {}: {}", RunStatusName(verdict.status), verdict.reason);
      verdict.status = RunStatus::kCompileError;
      break;
  }
  SetExtra(verdict, "compile", figures);
  // The program's own figures: it never ran (the compiler's are under "compile").
  verdict.exit_code = -1;
  verdict.signal = 0;
  verdict.wall_ms = verdict.cpu_ms = 0;
  verdict.peak_memory_bytes = 0;
  verdict.exec_errno = verdict.status == RunStatus::kSetupError ? verdict.exec_errno : 0;
  return verdict;
}

// Whether PATH names an executable file as the sandbox will see it: on the host view the host's; in a root directory
// resolved inside it (RESOLVE_IN_ROOT), so that an absolute symlink there (Debian's /usr/bin/javac ->
// /etc/alternatives/javac -> /usr/lib/jvm/...) is followed in the image, not on the host.
bool ExecutableInRoot(const std::string& rootfs_dir, const std::string& path) {
  if (rootfs_dir.empty()) return ::access(path.c_str(), X_OK) == 0;
  UniqueFd root(::open(rootfs_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) return false;
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  UniqueFd file(static_cast<int>(::syscall(SYS_openat2, root.get(), path.c_str(), &how, sizeof how)));
  struct stat st;
  return file.get() >= 0 && ::fstat(file.get(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0;
}

bool UsesJavaClass(const Language& lang) {
  auto has = [](const std::string& text) { return text.find("{java_class}") != std::string::npos; };
  const CompileSpec& spec = *lang.compile;
  return has(spec.source) || has(spec.output) || std::ranges::any_of(spec.argv, has) ||
         std::ranges::any_of(lang.argv, has);
}

}  // namespace

Status CheckToolchain(const Language& lang, const std::string& rootfs_dir) {
  std::vector<std::pair<std::string, std::string>> needed;  // role, path inside the root
  if (lang.compile) {
    needed = {{"compiler", lang.compile->argv[0]}, {"shell (for the compile step)", "/bin/sh"}};
    if (lang.argv[0] != "{output}") needed.emplace_back("runtime", lang.argv[0]);
  } else {
    needed = {{"interpreter", lang.argv[0]}};
  }
  for (const auto& [role, path] : needed) {
    if (ExecutableInRoot(rootfs_dir, path)) continue;
    std::string hint = lang.image_template.empty()
                           ? ""
                           : fmt::format("; the image template '{}' has it (nsbox image build {}, then --rootfs {})",
                                         lang.image_template, lang.image_template, lang.image_template);
    return Status::Error(fmt::format("language '{}': {} {} is not in the root filesystem ({}){}", lang.name, role,
                                     path, rootfs_dir.empty() ? "host" : rootfs_dir, hint));
  }
  return OkStatus();
}

std::string NewBuildDir() {
  uint64_t random = 0;
  // getrandom of 8 bytes from an initialized pool does not fail or return short; the clock is a fallback.
  if (::getrandom(&random, sizeof random, 0) != static_cast<ssize_t>(sizeof random))
    random = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return fmt::format("{}/{:016x}", kBuildRoot, random);
}

Program PlanCompiledProgram(const Language& lang, Executor program, const std::string& build_dir,
                            std::chrono::milliseconds compile_timeout) {
  const CompileSpec& spec = *lang.compile;
  Placeholders values{.build_dir = build_dir, .output = "", .java_class = ""};
  if (UsesJavaClass(lang)) values.java_class = JavaMainClass(program.code);
  values.output = Fill(spec.output, values);
  Executor compile = program;
  // The code's token in argv: the engine replaces it by /dev/fd/N of the sealed code.
  compile.code_path = build_dir + "/.nsbox-code";
  compile.argv = {"/bin/sh",
                  "-c",
                  CompileScript(),
                  "nsbox-compile",
                  build_dir,
                  compile.code_path,
                  Fill(spec.source, values),
                  std::to_string(spec.files.size())};
  for (const auto& [file, text] : spec.files) compile.argv.insert(compile.argv.end(), {file, text});
  for (const auto& arg : spec.argv) compile.argv.push_back(Fill(arg, values));
  // The compiler's own temporary files (gcc's cc*.o, rustc's, go's) go below the build directory too, which is
  // removed after the run, also when the compile was cut short.
  compile.env["TMPDIR"] = build_dir;
  for (const auto& [key, value] : spec.env) compile.env[key] = Fill(value, values);
  compile.stdin_fd = -1;  // the program's input is the program's
  compile.wall_timeout = compile_timeout;
  compile.memory_max_bytes = spec.memory_bytes;  // its own group's limit; --compile-memory overrides (BuildProgram)

  program.code.clear();
  program.code_path.clear();
  program.argv.clear();
  for (const auto& arg : lang.argv) program.argv.push_back(Fill(arg, values));
  return {.run = std::move(program), .compile = std::move(compile), .build_dir = build_dir};
}

void ApplyLanguage(const Language& lang, Executor& ex) {
  for (const auto& [key, value] : lang.env) ex.env[key] = value;
  if (lang.compile) return;
  ex.code_path = "/workspace/" + lang.file;
  ex.argv = lang.argv;
  ex.argv.push_back(ex.code_path);
}

void SizeHeap(Executor& program, std::optional<uint64_t> memory_bytes, size_t language_args) {
  constexpr std::string_view kKey = "{heap_mib}";
  const std::string heap = memory_bytes ? std::to_string(std::max<uint64_t>(16, *memory_bytes / 4 * 3 >> 20)) : "";
  const size_t end = std::min(language_args, program.argv.size());
  std::vector<std::string> argv;
  for (size_t i = 0; i < program.argv.size(); ++i) {
    std::string arg = std::move(program.argv[i]);
    if (i < end && arg.find(kKey) != std::string::npos) {
      if (!memory_bytes) continue;  // no limit to tell: the runtime's own default
      for (size_t at = arg.find(kKey); at != std::string::npos; at = arg.find(kKey, at + heap.size()))
        arg.replace(at, kKey.size(), heap);
    }
    argv.push_back(std::move(arg));
  }
  program.argv = std::move(argv);
}

Program FinishProgram(const std::optional<Language>& lang, Executor ex, const CompileOverrides& overrides,
                      std::optional<uint64_t> program_memory_bytes) {
  Program program;
  if (!lang || !lang->compile) {
    program = Program{.run = std::move(ex), .compile = std::nullopt, .build_dir = ""};
  } else {
    program =
        PlanCompiledProgram(*lang, std::move(ex), NewBuildDir(), overrides.timeout.value_or(lang->compile->timeout));
    if (overrides.memory_bytes) program.compile->memory_max_bytes = *overrides.memory_bytes;
  }
  // The language's own arguments lead argv (ApplyLanguage, PlanCompiledProgram); the user's are left as written.
  if (lang) SizeHeap(program.run, program_memory_bytes, lang->argv.size());
  // A heap sized from the memory limit that fills up is the program running out of memory (an oom verdict).
  if (lang && program_memory_bytes) program.run.heap_exhausted_text = lang->heap_exhausted;
  return program;
}

namespace {

// The compiler's name for the reason: the first argument after the shell's own (see PlanCompiledProgram).
std::string CompilerName(const Executor& compile) {
  // After the shell's arguments (PlanCompiledProgram): the count of the language's files, their names and texts.
  if (compile.argv.size() < 8) return "the compiler";
  const size_t at = 8 + 2 * std::strtoul(compile.argv[7].c_str(), nullptr, 10);
  return at < compile.argv.size() ? compile.argv[at] : "the compiler";
}

}  // namespace

CompileOutcome RunCompileStep(Program& program, const StepRunner& run_step) {
  CompileOutcome outcome;
  if (!program.compile) return outcome;
  const std::string compiler = CompilerName(*program.compile);
  Result compiled = run_step(std::move(*program.compile), Step::kCompile);
  program.compile.reset();
  outcome.figures = CompileFigures(compiled);
  if (compiled.status != RunStatus::kOk) outcome.failed = CompileVerdict(std::move(compiled), compiler);
  return outcome;
}

bool CompiledProgramWouldNotStart(const Result& result, const std::string& made, const std::string& build_dir) {
  const int err = result.exec_errno;
  return result.status == RunStatus::kSetupError && (err == EACCES || err == ENOEXEC || err == ENOENT) &&
         !build_dir.empty() && made.starts_with(build_dir + "/");
}

Result MadeNoProgram(Result result, const std::string& made) {
  result.status = RunStatus::kCompileError;
  result.reason = fmt::format(
      "compile step made no program: the compiler succeeded, but {} cannot be run ({}); "
      "is the code a program (package main, a main function)?",
      made, ErrnoName(result.exec_errno));
  result.exec_errno = 0;
  return result;
}

Result RunProgram(Program program, const StepRunner& run_step, bool remove_build_dir) {
  if (!program.compile) return run_step(std::move(program.run), Step::kProgram);
  Executor remove;
  if (remove_build_dir) {
    remove = program.run;
    remove.argv = {"/bin/rm", "-rf", "--", program.build_dir};
    remove.stdin_fd = -1;
    remove.wall_timeout = std::chrono::seconds(10);
    remove.output_limit_bytes = 4096;
  }
  CompileOutcome compiled = RunCompileStep(program, run_step);
  Result result;
  if (!compiled.failed) {
    const std::string made = program.run.argv.empty() ? "" : program.run.argv[0];
    result = run_step(std::move(program.run), Step::kProgram);
    // The compiler succeeded but made nothing that runs (a Go package other than main, a Rust library crate): the
    // code's fault, not nsbox's, so a compile error rather than a setup error.
    if (CompiledProgramWouldNotStart(result, made, program.build_dir)) result = MadeNoProgram(std::move(result), made);
    SetExtra(result, "compile", compiled.figures);
  } else {
    result = std::move(*compiled.failed);
  }
  // What is left of the build directory is nsbox's own; a failure to remove it does not change the verdict.
  if (remove_build_dir && result.status != RunStatus::kSessionLost) (void)run_step(std::move(remove), Step::kRemove);
  return result;
}

Status RunSteps(Policy policy, SandboxHooks* hooks, int cancel_fd, const std::function<void(const StepRunner&)>& steps,
                LiveOutput* live) {
  // Each exec's payload is handed to this process by a helper that exits (SessionSandbox::Start needs it).
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
    return Status::Errno("prctl(PR_SET_CHILD_SUBREAPER)").Wrap("starting the sandbox for the compile step");
  auto session = SessionSandbox::Start(std::move(policy), hooks);
  if (!session.ok()) return session.status().Wrap("starting the sandbox for the compile step");
  (*session)->WordExecVerdictsAsRun();
  (*session)->PassSealedStdin();  // the session ends with this run, and every process in it
  (*session)->EndExecsWhole();    // and a step's processes with the step (a case's daemon does not reach the next)
  steps([&](Executor step, Step kind) {
    return (*session)->Exec(std::move(step), cancel_fd, {}, kind == Step::kProgram ? live : nullptr);
  });
  (*session)->Terminate("the run ended");
  return OkStatus();
}

Result RunCompiledProgram(Program program, Policy policy, SandboxHooks* hooks, int cancel_fd, LiveOutput* live) {
  Result result;
  Status started = RunSteps(
      std::move(policy), hooks, cancel_fd,
      [&](const StepRunner& run_step) {
        result = RunProgram(std::move(program), run_step, /*remove_build_dir=*/false);  // the sandbox's /tmp goes too
      },
      live);
  if (!started.ok()) {
    result = Result{};
    result.status = RunStatus::kSetupError;
    result.reason = started.message();
  } else if (hooks) {
    hooks->OnFinished(result);  // e.g. the egress proxy's refusals and traffic, as a plain run's Sandbox::Run gives them
  }
  return result;
}

nlohmann::json ExecRequest(const Program& program, bool repl) {
  nlohmann::json request = ExecutorToJson(program.run);
  request["op"] = "exec";
  request["repl"] = repl;
  if (program.compile) {
    request["compile"] = ExecutorToJson(*program.compile);
    request["build_dir"] = program.build_dir;
  }
  return request;
}

StatusOr<Program> ProgramFromExecRequest(const nlohmann::json& request) {
  Program program;
  try {
    program.run = ExecutorFromJson(request);
    if (request.contains("compile")) {
      program.compile = ExecutorFromJson(request.at("compile"));
      program.build_dir = request.at("build_dir").get<std::string>();
      if (!program.build_dir.starts_with(std::string(kBuildRoot) + "/") ||
          program.build_dir.find("/..") != std::string::npos)
        return Status::Error(fmt::format("malformed exec request: build_dir must be below {}", kBuildRoot));
    }
  } catch (const std::exception& e) {
    return Status::Error(fmt::format("malformed exec request: {}", e.what()));
  }
  return program;
}

std::chrono::milliseconds ProgramTimeout(const Program& program) {
  return program.run.wall_timeout + (program.compile ? program.compile->wall_timeout : std::chrono::milliseconds(0));
}

}  // namespace nsbox::cli
