// Languages for --lang: read from the data file rootfs/languages.json installed with nsbox.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"

namespace nsbox::cli {

// The most program text --code or --file may hold (MCP's and the agent's code too: they run it through --file -).
inline constexpr size_t kMaxCodeBytes = 16 << 20;

// A compiled language's compile step: the compiler runs in the build directory (CompiledProgram says which), on the
// code written there as `source`, and leaves `output` there.
struct CompileSpec {
  std::vector<std::string> argv;  // the compiler and its arguments, argv[0] an absolute path in the root
  std::string source;             // the code's file name in the build directory ("main.c", "Main.java")
  std::string output;             // what the compiler makes there ("main"), {output} in the run argv
  std::map<std::string, std::string> env;  // added to the program's environment for the compiler only
  // Files written beside the source before the compiler runs, name -> text (TypeScript's declarations of Node's
  // globals, which Debian's tsc lacks).
  std::map<std::string, std::string> files;
  std::chrono::milliseconds timeout{30'000};
  uint64_t memory_bytes = 0;  // what the compiler needs: the compile step's own memory limit (--compile-memory)
};

struct Language {
  std::string name;
  // Interpreted: the interpreter and its fixed arguments; the code file is appended. Compiled: the program's argv,
  // in which {build} is the build directory and {output} the compiler's output in it.
  std::vector<std::string> argv;
  std::string file;  // interpreted: the code file's name in /workspace
  std::map<std::string, std::string> env;
  std::optional<CompileSpec> compile;
  std::string image_template;  // the image template (rootfs/templates/) whose root has the toolchain
  // What the runtime writes to stderr when the heap nsbox sized ({heap_mib}) is full: Executor::heap_exhausted_text.
  std::string heap_exhausted;
};

// The entry `requested` of a parsed table, aliases followed (pure: the unit tests give their own tables).
StatusOr<Language> ParseLanguage(const nlohmann::json& table, const std::string& requested);
StatusOr<Language> LookupLanguage(const std::string& name);
// The table file at `path`, parsed; the last parse is kept and reused while the file's text stays the same.
StatusOr<std::shared_ptr<const nlohmann::json>> LoadLanguageTable(const std::string& path);
std::vector<std::string> LanguageNames();
// The table's languages without their aliases ("python", not "python3"), sorted by name: what a tool
// description offers a model.
std::vector<std::string> CanonicalLanguageNames();

}  // namespace nsbox::cli
