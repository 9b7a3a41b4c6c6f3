// Unit: the language table's compile entries (ParseLanguage), the two-step plan (PlanCompiledProgram), the exec
// request that carries it, RunProgram's verdicts against scripted steps (no sandbox), and the table file's reuse.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "src/cli/compiled_program.h"
#include "src/cli/java_class.h"
#include "src/cli/languages.h"
#include "src/cli/test_cases.h"

using nlohmann::json;
using namespace nsbox;
using namespace nsbox::cli;
using namespace std::chrono_literals;

namespace {

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

const json kTable = json::parse(R"({
  "comment": "x",
  "python": {"argv": ["/usr/bin/python3"], "file": "m.py"},
  "c": {"compile": {"argv": ["/usr/bin/gcc", "-o", "main", "main.c"], "source": "main.c", "output": "main",
                    "env": {"CACHE": "{build}/cache"}, "timeout": "20s", "memory": "1G"},
        "argv": ["{output}", "--flag"], "template": "gcc"},
  "java": {"compile": {"argv": ["/usr/bin/javac", "{java_class}.java"], "source": "{java_class}.java",
                       "output": "{java_class}.class"},
           "argv": ["/usr/bin/java", "-cp", "{build}", "{java_class}"]},
  "c99": {"alias": "c"}
})");

Language C() {
  auto lang = ParseLanguage(kTable, "c99");
  REQUIRE(lang.ok());
  return *lang;
}

Result Finished(RunStatus status, int exit_code, int64_t wall_ms) {
  Result r;
  r.status = status;
  r.exit_code = exit_code;
  r.wall_ms = wall_ms;
  r.cpu_ms = wall_ms / 2;
  r.peak_memory_bytes = 100 << 20;
  r.reason = "as scripted";
  return r;
}

// A StepRunner that answers each step from a script and records what it was asked to run.
struct ScriptedSteps {
  std::vector<std::pair<Step, Executor>> asked;
  Result compile_result, program_result;
  StepRunner Runner() {
    return [this](Executor ex, Step step) {
      asked.emplace_back(step, ex);
      if (step == Step::kCompile) return compile_result;
      if (step == Step::kProgram) return program_result;
      return Finished(RunStatus::kOk, 0, 1);
    };
  }
};

Program PlannedC() {
  Executor program;
  program.code = "int main() {}";
  program.env = {{"PATH", "/usr/bin"}};
  program.stdin_fd = 7;
  program.wall_timeout = 2s;
  return PlanCompiledProgram(C(), program, std::string(kBuildRoot) + "/abc", 20s);
}

// The plan of `code` in `lang`, in a build directory of the tests'.
Program PlanCode(const Language& lang, const std::string& code) {
  Executor program;
  program.code = code;
  Program p = PlanCompiledProgram(lang, program, std::string(kBuildRoot) + "/t", 20s);
  REQUIRE(p.compile.has_value());
  return p;
}

// The compile step's argv after the shell's own arguments, the build directory and the code's path: the source's
// name, the language's files (a count, then names and texts), the compiler.
std::vector<std::string> AfterBuildDir(const Program& p) {
  return std::vector<std::string>(p.compile->argv.begin() + 6, p.compile->argv.end());
}

}  // namespace

TEST_CASE("a compiled entry parses with its compile step; aliases resolve to it", "[languages]") {
  Language c = C();
  CHECK(c.name == "c");
  REQUIRE(c.compile.has_value());
  CHECK(c.compile->argv == std::vector<std::string>{"/usr/bin/gcc", "-o", "main", "main.c"});
  CHECK(c.compile->source == "main.c");
  CHECK(c.compile->timeout == 20s);
  CHECK(c.compile->memory_bytes == 1ull << 30);
  CHECK(c.image_template == "gcc");
  auto java = ParseLanguage(kTable, "java");
  REQUIRE(java.ok());
  CHECK(java->compile->timeout == 30s);  // the defaults
  CHECK(java->compile->memory_bytes == 512ull << 20);
  auto python = ParseLanguage(kTable, "python");
  REQUIRE(python.ok());
  CHECK_FALSE(python->compile.has_value());
}

TEST_CASE("bad compile entries are refused with the language and the field named", "[languages]") {
  auto parse = [](const char* entry) {
    json table = {{"x", json::parse(entry)}};
    auto lang = ParseLanguage(table, "x");
    REQUIRE_FALSE(lang.ok());
    return lang.status().message();
  };
  CHECK(parse(R"({"compile": {"argv": ["gcc"], "source": "a.c", "output": "a"}, "argv": ["{output}"]})") ==
        "language 'x': compile.argv[0] must be an absolute path");
  CHECK(parse(R"({"compile": {"argv": ["/cc"], "source": "../a.c", "output": "a"}, "argv": ["{output}"]})") ==
        "language 'x': compile.source and compile.output must be plain file names");
  CHECK(parse(R"({"compile": {"argv": ["/cc"], "source": "a.c", "output": "a"}, "argv": ["main"]})") ==
        "language 'x': argv[0] must be {output} or an absolute path");
  CHECK_THAT(parse(R"({"compile": {"argv": ["/cc"], "source": "a.c", "output": "a", "timeout": "soon"},
                       "argv": ["{output}"]})"),
             Catch::StartsWith("language 'x': compile.timeout: "));
  CHECK_THAT(parse(R"({"compile": {"argv": ["/cc"], "output": "a"}, "argv": ["{output}"]})"),
             Catch::StartsWith("language 'x': \"compile\" needs \"argv\" (an array of strings), \"source\""));
  for (const char* file : {"../d.ts", "a.c", ".nsbox-code", ""})
    CHECK(parse(fmt::format(R"({{"compile": {{"argv": ["/cc"], "source": "a.c", "output": "a", "files": {{"{}": "x"}}}},
                                 "argv": ["{{output}}"]}})",
                            file)
                    .c_str()) ==
          fmt::format("language 'x': compile.files: '{}' must be a plain file name other than the source's and the "
                      "output's",
                      file));
  CHECK_THAT(parse(R"({"compile": {"argv": ["/cc"], "source": "a.c", "output": "a", "files": {"d.ts": 1}},
                       "argv": ["{output}"]})"),
             Catch::Contains("\"files\" (objects of strings)"));
}

TEST_CASE("a language's files are written beside the source, before the compiler runs", "[languages]") {
  json table = {{"ts", json::parse(R"({"compile": {"argv": ["/usr/bin/tsc", "main.ts", "g.d.ts"], "source": "main.ts",
                                                   "output": "main.js", "files": {"g.d.ts": "declare var x: any;\n",
                                                                                  "h.d.ts": "it's \"quoted\" $HOME"}},
                                       "argv": ["/usr/bin/node", "{output}"]})")}};
  auto ts = ParseLanguage(table, "ts");
  REQUIRE(ts.ok());
  Program p = PlanCode(*ts, "console.log(x);");
  CHECK(AfterBuildDir(p) == std::vector<std::string>{"main.ts", "2", "g.d.ts", "declare var x: any;\n", "h.d.ts",
                                                     "it's \"quoted\" $HOME", "/usr/bin/tsc", "main.ts", "g.d.ts"});
  // The shell writes them as they are (run here outside any sandbox, in a directory of the test's own).
  char dir[] = "/tmp/nsbox-lang-test-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string build = std::string(dir) + "/build", code = std::string(dir) + "/code";
  { std::ofstream(code) << "console.log(x);"; }
  std::vector<std::string> argv = p.compile->argv;
  argv[4] = build;
  argv[5] = code;
  argv.resize(argv.size() - 3);
  argv.insert(argv.end(), {"/bin/sh", "-c", "cat main.ts g.d.ts h.d.ts"});
  std::string command;
  for (const auto& arg : argv) command += "'" + ReplaceAll(arg, "'", "'\\''") + "' ";
  FILE* out = ::popen(command.c_str(), "r");
  REQUIRE(out != nullptr);
  std::string seen;
  char buf[256];
  for (size_t n; (n = fread(buf, 1, sizeof buf, out)) > 0;) seen.append(buf, n);
  CHECK(::pclose(out) == 0);
  CHECK(seen == "console.log(x);declare var x: any;\nit's \"quoted\" $HOME");
  std::filesystem::remove_all(dir);
}

// Each of these escaped as nlohmann's own exception: `nsbox batch` ended with no result at all, and the API blamed the
// client ("bad value: [json.exception.type_error.302] ...").
TEST_CASE("a malformed language entry is an error naming the language and the field, not an exception", "[languages]") {
  auto parse = [](const char* table_text, const char* name = "x") {
    auto lang = ParseLanguage(json::parse(table_text), name);
    REQUIRE_FALSE(lang.ok());
    CHECK(lang.status().kind() != nsbox::ErrorKind::kNotFound);
    return lang.status().message();
  };
  CHECK(parse(R"({"x": {"alias": 5}})") == "language 'x': \"alias\" must be a string");
  CHECK(parse(R"({"y": {"alias": "x"}, "x": {"alias": ["z"]}})", "y") == "language 'x': \"alias\" must be a string");
  CHECK(parse(R"({"x": {"argv": "/bin/sh", "file": "a"}})") == "language 'x': \"argv\" must be an array of strings");
  CHECK(parse(R"({"x": {"argv": ["/bin/sh"]}})") == "language 'x': no \"file\"");
  CHECK(parse(R"({"x": {"argv": ["/bin/sh"], "file": "a", "env": {"A": 1}}})") ==
        "language 'x': \"env\" must be an object of strings");
  CHECK(parse(R"({"x": {"argv": ["/bin/sh"], "file": "a", "template": 3}})") ==
        "language 'x': \"template\" must be a string");
  CHECK(parse(R"({"x": {"argv": ["{output}"], "compile": "gcc"}})") == "language 'x': \"compile\" must be an object");
  CHECK(parse(R"([1])") == "the language table is not a JSON object");
  auto unknown = ParseLanguage(json::parse(R"({"x": {"alias": "y"}})"), "cobol");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().kind() == nsbox::ErrorKind::kNotFound);
}

TEST_CASE("the plan: the compiler gets the code in the build directory, the program its input", "[languages]") {
  Program p = PlannedC();
  const std::string dir = std::string(kBuildRoot) + "/abc";
  CHECK(p.build_dir == dir);
  REQUIRE(p.compile.has_value());
  const Executor& compile = *p.compile;
  // The sealed code is argv's code_path entry; the shell writes it to the source file and execs the compiler.
  REQUIRE(compile.argv.size() == 12);
  CHECK(compile.argv[0] == "/bin/sh");
  CHECK(std::vector<std::string>(compile.argv.begin() + 4, compile.argv.end()) ==
        std::vector<std::string>{dir, compile.code_path, "main.c", "0", "/usr/bin/gcc", "-o", "main", "main.c"});
  CHECK(compile.code == "int main() {}");
  CHECK(compile.env.at("CACHE") == dir + "/cache");
  CHECK(compile.env.at("PATH") == "/usr/bin");
  CHECK(compile.stdin_fd == -1);
  CHECK(compile.wall_timeout == 20s);

  const Executor& run = p.run;
  CHECK(run.argv == std::vector<std::string>{dir + "/main", "--flag"});
  CHECK(run.code.empty());
  CHECK(run.code_path.empty());
  CHECK(run.env.count("CACHE") == 0);  // the compiler's environment is the compiler's
  CHECK(run.stdin_fd == 7);
  CHECK(run.wall_timeout == 2s);
  CHECK(ProgramTimeout(p) == 22s);
  CHECK(NewBuildDir().starts_with(std::string(kBuildRoot) + "/"));
  CHECK(NewBuildDir() != NewBuildDir());
}

TEST_CASE("{java_class}: a Java program's file and class are named after its public class, or its main's",
          "[languages]") {
  auto java = ParseLanguage(kTable, "java");
  REQUIRE(java.ok());
  Program p = PlanCode(
      *java, "import java.util.*;\npublic final class Solution {\n  public static void main(String[] a) {}\n}\n");
  CHECK(AfterBuildDir(p) == std::vector<std::string>{"Solution.java", "0", "/usr/bin/javac", "Solution.java"});
  CHECK(p.run.argv.back() == "Solution");

  // The public top-level type wins; comments, strings, text blocks, char literals and nested types do not count.
  CHECK(JavaMainClass("// public class Fake\n/* public class Fake2 */ class Helper {}\n"
                      "public class Answer { static String s = \"public class Nope {\"; char c = '{';\n"
                      "  static String t = \"\"\"\n public class Block { \"\"\";\n"
                      "  public static class Inner { public static void main(String[] a) {} } }") == "Answer");
  // Without one: the first top-level type with a static main (an instance main() or a nested one is not it).
  CHECK(JavaMainClass("class A { void main() {} static class N { public static void main(String[] a) {} } }\n"
                      "interface I {}\nclass Runner { public static void main(String... args) {} }") == "Runner");
  CHECK(JavaMainClass("class Main { public static void main(String[] a) {} }") == "Main");
  // Nothing to go by, a class literal, a name outside ASCII: Main, and javac says what it wants.
  CHECK(JavaMainClass("") == "Main");
  CHECK(JavaMainClass("class A { Object o = String.class; }") == "Main");
  CHECK(JavaMainClass("public class Clas\xc3\xa9 { public static void main(String[] a) {} }") == "Main");
  // Unterminated comments and strings end the scan without reading past the text.
  CHECK(JavaMainClass("public class Open { /* never closed") == "Open");
  CHECK(JavaMainClass("class X { String s = \"never closed") == "Main");
  // A name longer than a file name may be keeps Main (javac then names the file it wants).
  CHECK(JavaMainClass("public class " + std::string(251, 'A') + " {}") == "Main");
  CHECK(JavaMainClass("public class " + std::string(200, 'A') + " {}") == std::string(200, 'A'));
}

TEST_CASE("{heap_mib} in the language's arguments becomes three quarters of the memory limit or goes",
          "[languages]") {
  Executor ex;
  ex.argv = {"/usr/bin/java", "-Xmx{heap_mib}m", "-cp", "x", "Main", "user-{heap_mib}"};
  ex.env = {{"USER_VAR", "{heap_mib}"}};
  Executor limited = ex;
  SizeHeap(limited, 256ull << 20, 5);
  CHECK(limited.argv == std::vector<std::string>{"/usr/bin/java", "-Xmx192m", "-cp", "x", "Main", "user-{heap_mib}"});
  CHECK(limited.env.at("USER_VAR") == "{heap_mib}");  // the user's words stay as written
  Executor tiny = ex;
  SizeHeap(tiny, 8ull << 20, 5);  // never below 16 MiB
  CHECK(tiny.argv[1] == "-Xmx16m");
  Executor unlimited = ex;
  SizeHeap(unlimited, std::nullopt, 5);
  CHECK(unlimited.argv == std::vector<std::string>{"/usr/bin/java", "-cp", "x", "Main", "user-{heap_mib}"});
  // FinishProgram sizes a language's program only: a plain command is the user's, left alone.
  Executor command;
  command.argv = {"/bin/echo", "a{heap_mib}b"};
  CHECK(FinishProgram(std::nullopt, command, {}, 100ull << 20).run.argv[1] == "a{heap_mib}b");
  CHECK(FinishProgram(std::nullopt, command, {}, std::nullopt).run.argv.size() == 2);
}

TEST_CASE("the exec request carries both steps, and a build directory outside /tmp/nsbox-build is refused",
          "[languages]") {
  Program p = PlannedC();
  json request = ExecRequest(p, false);
  CHECK(request["op"] == "exec");
  auto back = ProgramFromExecRequest(request);
  REQUIRE(back.ok());
  REQUIRE(back->compile.has_value());
  CHECK(back->compile->argv == p.compile->argv);
  CHECK(back->compile->code == p.compile->code);
  CHECK(back->compile->wall_timeout == 20s);
  CHECK(back->run.argv == p.run.argv);
  CHECK(back->build_dir == p.build_dir);
  request["build_dir"] = "/workspace";
  auto refused = ProgramFromExecRequest(request);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() == "malformed exec request: build_dir must be below /tmp/nsbox-build");
  Program interpreted;
  interpreted.run.argv = {"/usr/bin/python3"};
  CHECK_FALSE(ExecRequest(interpreted, true).contains("compile"));
}

TEST_CASE("RunProgram: a compiled program's result is its own, with the compile step's figures", "[languages]") {
  ScriptedSteps steps;
  steps.compile_result = Finished(RunStatus::kOk, 0, 400);
  steps.program_result = Finished(RunStatus::kExit, 3, 5);
  Result r = RunProgram(PlannedC(), steps.Runner(), /*remove_build_dir=*/true);
  CHECK(r.status == RunStatus::kExit);
  CHECK(r.exit_code == 3);
  CHECK(r.wall_ms == 5);
  json compile = GetExtra(r, "compile");
  CHECK(compile == json{{"status", "ok"}, {"exit_code", 0}, {"wall_ms", 400}, {"cpu_ms", 200},
                        {"peak_memory_bytes", 100 << 20}});
  REQUIRE(steps.asked.size() == 3);
  CHECK(steps.asked[0].first == Step::kCompile);
  CHECK(steps.asked[1].first == Step::kProgram);
  CHECK(steps.asked[2].first == Step::kRemove);
  CHECK(steps.asked[2].second.argv == std::vector<std::string>{"/bin/rm", "-rf", "--", PlannedC().build_dir});
}

TEST_CASE("RunProgram: a failed compile is compile_error, exit code 123, and the program is never run",
          "[languages]") {
  ScriptedSteps steps;
  steps.compile_result = Finished(RunStatus::kExit, 1, 300);
  steps.compile_result.stderr_data = "main.c:1: error: expected ';'\n";
  Result r = RunProgram(PlannedC(), steps.Runner(), /*remove_build_dir=*/false);
  CHECK(r.status == RunStatus::kCompileError);
  CHECK(std::string(RunStatusName(r.status)) == "compile_error");
  CHECK(r.ShellExitCode() == 123);
  CHECK(r.exit_code == -1);
  CHECK(r.wall_ms == 0);
  CHECK(r.stderr_data == "main.c:1: error: expected ';'\n");
  CHECK(r.reason == "compile error: /usr/bin/gcc exited with 1; its diagnostics are in stderr and stdout");
  CHECK(GetExtra(r, "compile")["exit_code"] == 1);
  REQUIRE(steps.asked.size() == 1);  // no program, and no removal asked for
  CHECK(ResultFromJson(ResultToJson(r)).status == RunStatus::kCompileError);
}

TEST_CASE("RunProgram: a compiler stopped by its limits says so; a setup failure stays a setup error",
          "[languages]") {
  ScriptedSteps steps;
  steps.compile_result = Finished(RunStatus::kOom, -1, 900);
  steps.compile_result.signal = 9;
  steps.compile_result.reason = "killed: out of memory (limit 1.0G)";
  Result oom = RunProgram(PlannedC(), steps.Runner(), false);
  CHECK(oom.status == RunStatus::kCompileError);
  CHECK(oom.signal == 0);
  CHECK(oom.reason == "compile step oom: killed: out of memory (limit 1.0G)");
  CHECK(GetExtra(oom, "compile")["status"] == "oom");

  // g++ outlives its cc1plus's OOM kill and exits 1: the cgroup's OOM count during the step says what happened.
  steps.compile_result = Finished(RunStatus::kExit, 1, 200);
  steps.compile_result.limits = LimitsReport{};
  steps.compile_result.limits->oom_kills = 1;
  Result driver = RunProgram(PlannedC(), steps.Runner(), false);
  CHECK(driver.status == RunStatus::kCompileError);
  CHECK_THAT(driver.reason, Catch::StartsWith("compile step oom: a process of the compiler was killed"));
  CHECK(GetExtra(driver, "compile")["status"] == "oom");

  steps.asked.clear();
  steps.compile_result = Finished(RunStatus::kSetupError, -1, 0);
  steps.compile_result.reason = "execve(/bin/sh): ENOENT";
  Result setup = RunProgram(PlannedC(), steps.Runner(), true);
  CHECK(setup.status == RunStatus::kSetupError);
  CHECK(setup.reason == "compile step: execve(/bin/sh): ENOENT");
  CHECK(steps.asked.size() == 2);  // compile, then the removal; never the program
}

TEST_CASE("the table file is parsed again only when its text changes", "[languages]") {
  char dir_template[] = "/tmp/nsbox-languages-test-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template, path = dir + "/languages.json";
  auto write = [&](const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write(R"({"sh": {"argv": ["/bin/sh"], "file": "a.sh"}})");
  auto first = LoadLanguageTable(path);
  REQUIRE(first.ok());
  auto again = LoadLanguageTable(path);
  REQUIRE(again.ok());
  CHECK(again->get() == first->get());  // the same parse, not a new one
  // The same length, another text: the change is seen (no reliance on timestamps).
  write(R"({"sh": {"argv": ["/bin/sh"], "file": "b.sh"}})");
  auto changed = LoadLanguageTable(path);
  REQUIRE(changed.ok());
  CHECK((**changed)["sh"]["file"] == "b.sh");
  write(R"({"sh": )");
  auto broken = LoadLanguageTable(path);
  REQUIRE_FALSE(broken.ok());
  CHECK_THAT(broken.status().message(), Catch::Matchers::Contains("malformed language table"));
  ::unlink(path.c_str());
  auto missing = LoadLanguageTable(path);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Matchers::Contains("loading the language table"));
  ::rmdir(dir.c_str());
}

TEST_CASE("a wrong output's reason shows where the first differing line parts, bytes that are not text escaped",
          "[cases]") {
  CHECK(FirstDifference("6\n", "7\n") == "wrong output: line 1 is \"6\", expected \"7\"");
  CHECK(FirstDifference("a\n", "a\nb\n") == "wrong output: it ends before line 2, expected \"b\"");
  CHECK(FirstDifference("a\nb\n", "a\n") == "wrong output: line 2 is \"b\", expected no more lines");
  // A byte that is not UTF-8 against the replacement character it would be shown as: they look different.
  CHECK(FirstDifference("\xff\n", "\xef\xbf\xbd\n") == "wrong output: line 1 is \"\\xff\", expected \"\xef\xbf\xbd\"");
  CHECK(FirstDifference("say \"hi\"\tnow\n", "say \"hi\" now\n") ==
        "wrong output: line 1 is \"say \\\"hi\\\"\\tnow\", expected \"say \\\"hi\\\" now\" (from byte 9)");
  // A window that would start or end inside a character moves to the character's edge: nothing valid shows as \x.
  std::string e_acute_40;
  for (int i = 0; i < 40; ++i) e_acute_40 += "\xc3\xa9";
  const std::string reason =
      FirstDifference(e_acute_40 + "aX" + e_acute_40 + "\n", e_acute_40 + "aY" + e_acute_40 + "\n");
  CHECK(reason.find("\\x") == std::string::npos);
  CHECK(reason.find("(from byte 82)") != std::string::npos);
  // A difference past the first 80 bytes of a long line is shown, with 20 bytes before it.
  const std::string head(100, 'x');
  CHECK(FirstDifference(head + "1" + std::string(100, 'y') + "\n", head + "2\n") ==
        "wrong output: line 1 is ...\"" + std::string(20, 'x') + "1" + std::string(59, 'y') + "\"..., expected ...\"" +
            std::string(20, 'x') + "2\" (from byte 101)");
}
