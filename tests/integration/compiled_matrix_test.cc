// Integration: the per-language matrix of issue 29, for every language of rootfs/languages.json on the host view:
// hello world (with no denied system call under the default seccomp profile), a compile error with its diagnostics,
// a runtime error with its exit code, an infinite loop ending as timeout, a memory bomb as oom (Java: from its
// OutOfMemoryError), and for the compiled languages the compile step's own time-out. A toolchain missing from the
// host fails its cases: tools/setup --tests installs every one.
#include <unistd.h>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

// One language's programs and what each must end as. The programs are small: rustc, javac and tsc take most of the
// matrix's time, once per case.
struct MatrixLanguage {
  std::string name;
  std::vector<std::string> toolchain;  // what the host view needs (executables), for the failure message
  std::string packages;                // the Debian packages that have them (tools/setup --tests)
  bool compiled = false;

  std::string hello;  // prints kMatrixHello, computing 42 at run time

  // Invalid code, with the error on line 2 or 3. Interpreted: the interpreter's own parse error and exit code.
  // Compiled: the compiler's (compile.exit_code), and the result is compile_error.
  std::string compile_error;
  int compile_error_exit = 0;
  std::string diagnostic;             // names the error's file and line
  bool diagnostic_on_stdout = false;  // tsc writes its errors to stdout
  std::string ran_before_error;       // what the code printed before the error (a shell runs line by line)

  std::string runtime_error;                // prints "before\n", then fails
  std::string runtime_status;               // "exit" or "signal"
  int runtime_exit_code = -1;               // the result's exit_code ("exit")
  int runtime_signal = 0;                   // the result's signal ("signal")
  std::vector<std::string> runtime_stderr;  // what the runtime says about it

  std::string infinite_loop;
  std::string memory_bomb;  // keeps allocating and touching 1 MB blocks
  // --memory for the bomb, in MiB: 64, or more for a compiler that needs more. Until the compile step has its own
  // memory limit the sandbox's one limit is both steps', so it must hold the compile (rustc's about 170M, tsc's
  // 160M, javac's 65M measured here) with room to spare, and the bomb still ends as oom above it.
  uint64_t bomb_memory_mib = 64;
  // A runtime whose heap nsbox holds under --memory ({heap_mib}) ends the bomb itself, with this in stderr, before the
  // OOM killer would, and the verdict is oom all the same; empty: the OOM killer ends it.
  std::string bomb_heap_error;
};

constexpr const char* kMatrixHello = "hello 42\n";

std::vector<MatrixLanguage> MatrixLanguages() {
  std::vector<MatrixLanguage> all;
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "python";
    l.toolchain = {"/usr/bin/python3"};
    l.packages = "python3";
    l.hello = "print('hello', 6 * 7)\n";
    l.compile_error = "print('before')\ndef f(:\n    pass\n";
    l.compile_error_exit = 1;
    l.diagnostic = "line 2";
    l.runtime_error = "print('before')\n1 / 0\n";
    l.runtime_status = "exit";
    l.runtime_exit_code = 1;
    l.runtime_stderr = {"line 2", "ZeroDivisionError: division by zero"};
    l.infinite_loop = "while True:\n    pass\n";
    l.memory_bomb = "keep = []\nwhile True:\n    keep.append(b'x' * (1 << 20))\n";
  }
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "bash";
    l.toolchain = {"/bin/bash"};
    l.packages = "bash";
    l.hello = "echo hello $((6 * 7))\n";
    l.compile_error = "echo before\nif then fi\n";
    l.compile_error_exit = 2;
    l.diagnostic = ": line 2: syntax error near unexpected token `then'";
    l.ran_before_error = "before\n";
    l.runtime_error = "echo before\nno_such_command_matrix\n";
    l.runtime_status = "exit";
    l.runtime_exit_code = 127;
    l.runtime_stderr = {": line 2: no_such_command_matrix: command not found"};
    l.infinite_loop = "while :; do :; done\n";
    l.memory_bomb = "s=x\nwhile :; do s=\"$s$s\"; done\n";
  }
  {
    // The same programs as bash's (POSIX sh): dash's messages name the line as ": 2:".
    MatrixLanguage l = all.back();
    l.name = "sh";
    l.toolchain = {"/bin/sh"};
    l.packages = "dash";
    l.diagnostic = ": 2: Syntax error: \"then\" unexpected";
    l.runtime_stderr = {": 2: no_such_command_matrix: not found"};
    all.push_back(std::move(l));
  }
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "node";
    l.toolchain = {"/usr/bin/node"};
    l.packages = "nodejs";
    l.hello = "console.log('hello', 6 * 7);\n";
    l.compile_error = "console.log('before');\nlet = = 1;\n";
    l.compile_error_exit = 1;
    l.diagnostic = ":2\n";
    l.runtime_error = "console.log('before');\nnotDefinedMatrix();\n";
    l.runtime_status = "exit";
    l.runtime_exit_code = 1;
    l.runtime_stderr = {":2", "ReferenceError: notDefinedMatrix is not defined"};
    l.infinite_loop = "for (;;) {}\n";
    l.memory_bomb = "const keep = [];\nfor (;;) keep.push(new Uint8Array(1 << 20).fill(1));\n";
  }
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "c";
    l.toolchain = {"/usr/bin/gcc"};
    l.packages = "gcc";
    l.compiled = true;
    l.hello = "#include <stdio.h>\nint main(void) { printf(\"hello %d\\n\", 6 * 7); return 0; }\n";
    l.compile_error = "int main(void) {\n  return undeclared_matrix;\n}\n";
    l.compile_error_exit = 1;
    l.diagnostic = "main.c:2:10: error: \xE2\x80\x98undeclared_matrix\xE2\x80\x99 undeclared";
    // x86-64 traps an integer division by zero: SIGFPE. Both operands volatile: the division happens at run time
    // (gcc turns 1 / x into a comparison, which does not trap).
    l.runtime_error =
        "#include <stdio.h>\nint main(void) {\n  volatile int n = 7, zero = 0;\n  puts(\"before\");\n"
        "  fflush(stdout);\n  return n / zero;\n}\n";
    l.runtime_status = "signal";
    l.runtime_signal = 8;
    l.infinite_loop = "int main(void) { volatile unsigned n = 0; for (;;) n = n + 1; }\n";
    l.memory_bomb =
        "#include <stdlib.h>\n#include <string.h>\n"
        "int main(void) { for (;;) { char *p = malloc(1 << 20); if (!p) return 9; memset(p, 1, 1 << 20); } }\n";
  }
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "cpp";
    l.toolchain = {"/usr/bin/g++"};
    l.packages = "g++";
    l.compiled = true;
    l.hello = "#include <cstdio>\nint main() { std::printf(\"hello %d\\n\", 6 * 7); }\n";
    l.compile_error = "int main() {\n  return undeclared_matrix;\n}\n";
    l.compile_error_exit = 1;
    l.diagnostic = "main.cpp:2:10: error: \xE2\x80\x98undeclared_matrix\xE2\x80\x99 was not declared in this scope";
    l.runtime_error =
        "#include <cstdio>\n#include <stdexcept>\n"
        "int main() { std::puts(\"before\"); std::fflush(stdout); throw std::runtime_error(\"boom\"); }\n";
    l.runtime_status = "signal";
    l.runtime_signal = 6;  // std::terminate aborts
    l.runtime_stderr = {"terminate called after throwing an instance of 'std::runtime_error'", "what():  boom"};
    l.infinite_loop = "int main() { volatile unsigned n = 0; for (;;) n = n + 1; }\n";
    // <cstring> only: g++ with <string> and <vector> needs about as much as the bomb's 64M.
    l.memory_bomb =
        "#include <cstring>\n"
        "int main() { for (;;) { char* p = new char[1 << 20]; std::memset(p, 1, 1 << 20); } }\n";
  }
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "go";
    l.toolchain = {"/usr/bin/go"};
    l.packages = "golang-go";
    l.compiled = true;
    l.hello = "package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"hello\", 6*7) }\n";
    l.compile_error = "package main\nfunc main() {\n\tprintln(undeclaredMatrix)\n}\n";
    l.compile_error_exit = 2;
    l.diagnostic = "./main.go:3:10: undefined: undeclaredMatrix";
    // An index the compiler cannot check: the runtime's bounds check panics, exit status 2.
    l.runtime_error =
        "package main\nimport (\"fmt\"; \"os\")\nfunc main() {\n\tfmt.Println(\"before\")\n"
        "\ta := []int{1}\n\tfmt.Println(a[len(os.Args)+4])\n}\n";
    l.runtime_status = "exit";
    l.runtime_exit_code = 2;
    l.runtime_stderr = {"panic: runtime error: index out of range [5] with length 1", "main.go:6"};
    l.infinite_loop = "package main\nfunc main() {\n\tfor {\n\t}\n}\n";
    l.memory_bomb =
        "package main\nfunc main() {\n\tvar keep [][]byte\n\tfor {\n\t\tb := make([]byte, 1<<20)\n"
        "\t\tfor i := range b {\n\t\t\tb[i] = 1\n\t\t}\n\t\tkeep = append(keep, b)\n\t}\n}\n";
    l.bomb_memory_mib = 128;  // go build: about 50M
  }
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "rust";
    l.toolchain = {"/usr/bin/rustc"};
    l.packages = "rustc";
    l.compiled = true;
    l.hello = "fn main() {\n    println!(\"hello {}\", 6 * 7);\n}\n";
    l.compile_error = "fn main() {\n    println!(\"{}\", undeclared_matrix);\n}\n";
    l.compile_error_exit = 1;
    l.diagnostic = "--> main.rs:2:20";
    l.runtime_error =
        "fn main() {\n    println!(\"before\");\n    let v = vec![1];\n"
        "    println!(\"{}\", v[std::env::args().count() + 4]);\n}\n";
    l.runtime_status = "exit";
    l.runtime_exit_code = 101;  // a panic
    l.runtime_stderr = {"index out of bounds: the len is 1 but the index is 5", "main.rs:4"};
    l.infinite_loop = "fn main() {\n    loop {}\n}\n";
    l.memory_bomb =
        "fn main() {\n    let mut keep: Vec<Vec<u8>> = Vec::new();\n"
        "    loop {\n        keep.push(vec![1u8; 1 << 20]);\n    }\n}\n";
    l.bomb_memory_mib = 384;
  }
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "java";
    l.toolchain = {"/usr/bin/javac", "/usr/bin/java"};
    l.packages = "default-jdk-headless";
    l.compiled = true;
    l.hello =
        "public class Main {\n  public static void main(String[] args) {\n"
        "    System.out.println(\"hello \" + 6 * 7);\n  }\n}\n";
    l.compile_error =
        "public class Main {\n  public static void main(String[] args) {\n"
        "    System.out.println(undeclaredMatrix);\n  }\n}\n";
    l.compile_error_exit = 1;
    l.diagnostic = "Main.java:3: error: cannot find symbol";
    l.runtime_error =
        "public class Main {\n  public static void main(String[] args) {\n"
        "    System.out.println(\"before\");\n    int[] a = new int[1];\n"
        "    System.out.println(a[args.length + 5]);\n  }\n}\n";
    l.runtime_status = "exit";
    l.runtime_exit_code = 1;  // an uncaught exception
    l.runtime_stderr = {"java.lang.ArrayIndexOutOfBoundsException: Index 5 out of bounds for length 1",
                        "at Main.main(Main.java:5)"};
    l.infinite_loop = "public class Main {\n  public static void main(String[] args) {\n    while (true) {}\n  }\n}\n";
    // The JVM sees no cgroup in the sandbox; -Xmx{heap_mib}m holds its heap to three quarters of --memory, so the
    // bomb ends as a container-aware JVM's would: an OutOfMemoryError, not the OOM killer.
    l.bomb_heap_error = "java.lang.OutOfMemoryError: Java heap space";
    l.memory_bomb =
        "import java.util.ArrayList;\npublic class Main {\n  public static void main(String[] args) {\n"
        "    ArrayList<byte[]> keep = new ArrayList<>();\n    for (;;) keep.add(new byte[1 << 20]);\n"
        "  }\n}\n";
    l.bomb_memory_mib = 256;
  }
  {
    MatrixLanguage& l = all.emplace_back();
    l.name = "typescript";
    l.toolchain = {"/usr/bin/tsc", "/usr/bin/node"};
    l.packages = "node-typescript";
    l.compiled = true;
    l.hello = "const answer: number = 6 * 7;\nconsole.log('hello', answer);\n";
    l.compile_error = "console.log('before');\nconst n: number = 'not a number';\n";
    l.compile_error_exit = 2;
    l.diagnostic = "main.ts(2,7): error TS2322: Type 'string' is not assignable to type 'number'.";
    l.diagnostic_on_stdout = true;
    l.runtime_error = "console.log('before');\nconst o = JSON.parse('null') as { f: () => void };\no.f();\n";
    l.runtime_status = "exit";
    l.runtime_exit_code = 1;
    l.runtime_stderr = {"TypeError: Cannot read properties of null (reading 'f')", "main.js:"};
    l.infinite_loop = "for (;;) {}\n";
    l.memory_bomb = "const keep: Uint8Array[] = [];\nfor (;;) keep.push(new Uint8Array(1 << 20).fill(1));\n";
    l.bomb_memory_mib = 384;
  }
  return all;
}

const MatrixLanguage& Matrix(const std::string& name) {
  static const std::vector<MatrixLanguage> all = MatrixLanguages();
  for (const auto& lang : all)
    if (lang.name == name) return lang;
  FAIL("no matrix entry for language " << name);
  throw std::logic_error("unreachable");
}

// A missing toolchain is a failure, not a skip: tools/setup --tests installs every one.
void RequireToolchain(const MatrixLanguage& lang) {
  for (const auto& path : lang.toolchain)
    if (::access(path.c_str(), X_OK) != 0)
      FAIL("the host has no " << path << " for --lang " << lang.name << " (tools/setup --tests installs "
                              << lang.packages << ")");
}

NsboxResult RunMatrix(const MatrixLanguage& lang, const std::string& code, std::vector<std::string> options = {}) {
  RequireToolchain(lang);
  options.insert(options.end(), {"--lang", lang.name, "--code", code});
  return RunNsboxJson(options);
}

void CheckCompiledOk(const MatrixLanguage& lang, const NsboxResult& r) {
  if (!lang.compiled) {
    CHECK_FALSE(r.json.contains("compile"));
    return;
  }
  REQUIRE(r.json.contains("compile"));
  CHECK(r.json["compile"]["status"] == "ok");
  CHECK(r.json["compile"]["exit_code"] == 0);
}

void MatrixHelloWorld(const MatrixLanguage& lang) {
  auto r = RunMatrix(lang, lang.hello);
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.process.exit_code == 0);
  CHECK(r.exit_code() == 0);
  CHECK(r.out() == kMatrixHello);
  CHECK(r.err() == "");
  // The default seccomp profile is enough for the toolchain and the program: nothing was denied in either step.
  REQUIRE(r.json.contains("denied_syscalls"));
  CHECK(r.json["denied_syscalls"].empty());
  CheckCompiledOk(lang, r);
}

void MatrixCompileError(const MatrixLanguage& lang) {
  auto r = RunMatrix(lang, lang.compile_error);
  INFO(r.Describe());
  const std::string diagnostics = lang.diagnostic_on_stdout ? r.out() : r.err();
  CHECK(diagnostics.find(lang.diagnostic) != std::string::npos);
  if (lang.compiled) {
    CHECK(r.status() == "compile_error");
    CHECK(r.process.exit_code == 123);
    CHECK(r.exit_code() == -1);  // the program never ran
    CHECK(r.out().find("before") == std::string::npos);
    CHECK(r.json.value("reason", "") == "compile error: " + lang.toolchain[0] + " exited with " +
                                            std::to_string(lang.compile_error_exit) +
                                            "; its diagnostics are in stderr and stdout");
    REQUIRE(r.json.contains("compile"));
    CHECK(r.json["compile"]["status"] == "exit");
    CHECK(r.json["compile"]["exit_code"] == lang.compile_error_exit);
  } else {
    // The interpreter's own verdict on the code, before (python, node) or when (a shell) it reaches the line.
    CHECK(r.status() == "exit");
    CHECK(r.exit_code() == lang.compile_error_exit);
    CHECK(r.process.exit_code == lang.compile_error_exit);
    CHECK(r.out() == lang.ran_before_error);
    CHECK_FALSE(r.json.contains("compile"));
  }
}

void MatrixRuntimeError(const MatrixLanguage& lang) {
  auto r = RunMatrix(lang, lang.runtime_error);
  INFO(r.Describe());
  CHECK(r.status() == lang.runtime_status);
  CHECK(r.out() == "before\n");
  if (lang.runtime_status == "signal") {
    CHECK(r.json["signal"] == lang.runtime_signal);
    CHECK(r.process.exit_code == 128 + lang.runtime_signal);
  } else {
    CHECK(r.exit_code() == lang.runtime_exit_code);
    CHECK(r.process.exit_code == lang.runtime_exit_code);
  }
  for (const auto& said : lang.runtime_stderr) CHECK(r.err().find(said) != std::string::npos);
  CheckCompiledOk(lang, r);
}

void MatrixInfiniteLoop(const MatrixLanguage& lang) {
  // --timeout is the program's alone: the compile step (rustc, javac, tsc take longer than this) has its own.
  auto r = RunMatrix(lang, lang.infinite_loop, {"--timeout", "300ms"});
  INFO(r.Describe());
  CHECK(r.status() == "timeout");
  CHECK(r.process.exit_code == 124);
  CHECK(r.json.value("reason", "") ==
        "wall-clock time limit of 300 ms exceeded; every process of the sandbox was killed");
  CheckCompiledOk(lang, r);
}

void MatrixMemoryBomb(const MatrixLanguage& lang) {
  auto r = RunMatrix(lang, lang.memory_bomb, {"--memory", std::to_string(lang.bomb_memory_mib) + "M"});
  INFO(r.Describe());
  const uint64_t limit = lang.bomb_memory_mib << 20;
  if (!lang.bomb_heap_error.empty()) {
    CHECK(r.status() == "oom");
    CHECK(r.exit_code() == 1);  // the runtime's own
    CHECK(r.process.exit_code == 137);
    CHECK(r.err().find(lang.bomb_heap_error) != std::string::npos);
    CHECK(r.json["limits"]["memory_max_bytes"] == limit);
    CHECK(r.json["limits"]["oom_kills"] == 0);
    CHECK_THAT(r.json.value("reason", ""),
               Catch::StartsWith("the runtime's heap, sized from the memory limit of " + std::to_string(limit) +
                                 " bytes, was full (\"" + lang.bomb_heap_error + "\" in stderr)"));
    CheckCompiledOk(lang, r);
    return;
  }
  CHECK(r.status() == "oom");
  CHECK(r.process.exit_code == 137);
  CHECK(r.json["limits"]["memory_max_bytes"] == limit);
  CHECK(r.json.value("reason", "") ==
        "killed by the OOM killer: the memory limit of " + std::to_string(limit) + " bytes was reached");
  CheckCompiledOk(lang, r);
}

void MatrixCompileTimeout(const MatrixLanguage& lang) {
  // 1 ms: less than any compiler's start, so the step's own limit ends it while the program's --timeout is 30 s.
  auto r = RunMatrix(lang, lang.hello, {"--timeout", "30s", "--compile-timeout", "1ms"});
  INFO(r.Describe());
  CHECK(r.status() == "compile_error");
  CHECK(r.process.exit_code == 123);
  CHECK(r.out() == "");  // the program never ran
  CHECK(r.json.value("reason", "") ==
        "compile step timeout: wall-clock time limit of 1 ms exceeded; every process of the sandbox was killed");
  REQUIRE(r.json.contains("compile"));
  CHECK(r.json["compile"]["status"] == "timeout");
}

}  // namespace

// Each language's cases, one TEST_CASE each, tagged with the language: `integration_tests '[matrix][rust]'`.
#define NSBOX_MATRIX_CASES(LANG)                                                                         \
  TEST_CASE(LANG ": hello world runs under the default seccomp profile with no denied system call",      \
            "[integration][compiled][matrix][" LANG "]") {                                               \
    MatrixHelloWorld(Matrix(LANG));                                                                      \
  }                                                                                                      \
  TEST_CASE(LANG ": a compile error reports the diagnostics naming the line",                            \
            "[integration][compiled][matrix][" LANG "]") {                                               \
    MatrixCompileError(Matrix(LANG));                                                                    \
  }                                                                                                      \
  TEST_CASE(LANG ": a runtime error keeps its exit code", "[integration][compiled][matrix][" LANG "]") { \
    MatrixRuntimeError(Matrix(LANG));                                                                    \
  }                                                                                                      \
  TEST_CASE(LANG ": an infinite loop ends as timeout", "[integration][compiled][matrix][" LANG "]") {    \
    MatrixInfiniteLoop(Matrix(LANG));                                                                    \
  }                                                                                                      \
  TEST_CASE(LANG ": a memory bomb ends as oom or its runtime's heap error",                              \
            "[integration][compiled][matrix][" LANG "]") {                                                \
    MatrixMemoryBomb(Matrix(LANG));                                                                      \
  }

#define NSBOX_MATRIX_COMPILE_STEP_CASES(LANG)                                           \
  TEST_CASE(LANG ": the compile step's own --compile-timeout ends it as compile_error", \
            "[integration][compiled][matrix][" LANG "]") {                              \
    MatrixCompileTimeout(Matrix(LANG));                                                 \
  }

NSBOX_MATRIX_CASES("python")
NSBOX_MATRIX_CASES("bash")
NSBOX_MATRIX_CASES("sh")
NSBOX_MATRIX_CASES("node")
NSBOX_MATRIX_CASES("c")
NSBOX_MATRIX_CASES("cpp")
NSBOX_MATRIX_CASES("go")
NSBOX_MATRIX_CASES("rust")
NSBOX_MATRIX_CASES("java")
NSBOX_MATRIX_CASES("typescript")
NSBOX_MATRIX_COMPILE_STEP_CASES("c")
NSBOX_MATRIX_COMPILE_STEP_CASES("cpp")
NSBOX_MATRIX_COMPILE_STEP_CASES("go")
NSBOX_MATRIX_COMPILE_STEP_CASES("rust")
NSBOX_MATRIX_COMPILE_STEP_CASES("java")
NSBOX_MATRIX_COMPILE_STEP_CASES("typescript")

#undef NSBOX_MATRIX_CASES
#undef NSBOX_MATRIX_COMPILE_STEP_CASES
