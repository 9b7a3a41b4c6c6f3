// Integration: compiled languages in nsbox run (C, C++, Go on the host view): the compile step's figures, a failed
// compile as compile_error with its diagnostics and exit code 123, the compile step's own time-out and memory limit
// (--compile-memory) apart from the program's (--memory), a missing compiler named with the image template that has
// it.
#include <unistd.h>

#include <algorithm>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

bool HostHas(const char* path) { return ::access(path, X_OK) == 0; }

}  // namespace

TEST_CASE("C: hello world is compiled, then run with its own exit code and the compile step's figures",
          "[integration][compiled]") {
  auto r = RunNsboxJson({"--lang", "c", "--code",
                         "#include <stdio.h>\nint main(void) { printf(\"hello %d\\n\", 6 * 7); return 3; }"});
  INFO(r.Describe());
  CHECK(r.status() == "exit");
  CHECK(r.exit_code() == 3);
  CHECK(r.process.exit_code == 3);
  CHECK(r.out() == "hello 42\n");
  REQUIRE(r.json.contains("compile"));
  const auto& compile = r.json["compile"];
  CHECK(compile["status"] == "ok");
  CHECK(compile["exit_code"] == 0);
  CHECK(compile["cpu_ms"].get<int64_t>() > 0);
  CHECK(compile["peak_memory_bytes"].get<uint64_t>() > r.json["peak_memory_bytes"].get<uint64_t>());
  // --memory not given: the program's limit is run's 512M default (the compile step's is the table's 1G).
  CHECK(r.json["limits"]["memory_max_bytes"] == 512ull << 20);
}

TEST_CASE("C++: a compile error is compile_error with the compiler's diagnostics; the program never runs",
          "[integration][compiled]") {
  auto raw = RunNsboxRaw({"run", "--lang", "cpp", "--code", "#include <cstdio>\nint main() { puts(\"ran\"); return not_declared; }"});
  CHECK(raw.exit_code == 123);
  CHECK(raw.out.find("ran") == std::string::npos);
  CHECK(raw.err.find("not_declared") != std::string::npos);
  CHECK(raw.err.find("nsbox: compile_error: compile error: /usr/bin/g++ exited with 1") != std::string::npos);

  auto r = RunNsboxJson({"--memory", "600M", "--lang", "cpp", "--code", "int main() { return not_declared; }"});
  INFO(r.Describe());
  CHECK(r.process.exit_code == 123);
  CHECK(r.status() == "compile_error");
  CHECK(r.exit_code() == -1);
  CHECK(r.err().find("main.cpp:1") != std::string::npos);
  CHECK(r.json["wall_ms"] == 0);  // the program's figures: it never ran
  CHECK(r.json["compile"]["status"] == "exit");
  CHECK(r.json["compile"]["exit_code"] == 1);
  // After a compile error the limits are the compile step's: the table's 1G (--memory 600M is the program's).
  CHECK(r.json["limits"]["memory_max_bytes"] == 1ull << 30);
}

TEST_CASE("a compiler past --compile-timeout is compile_error with compile.status timeout", "[integration][compiled]") {
  // 1 ms: less than any compiler's start, so the step's own limit (not the program's --timeout) ends it.
  auto r = RunNsboxJson({"--timeout", "30s", "--compile-timeout", "1ms", "--lang", "c", "--code", "int main(void) { return 0; }"});
  INFO(r.Describe());
  CHECK(r.process.exit_code == 123);
  CHECK(r.status() == "compile_error");
  CHECK(r.json["compile"]["status"] == "timeout");
  CHECK(r.json.value("reason", "").starts_with("compile step timeout: "));
}

TEST_CASE("compile options are checked: --compile-timeout needs a compiled language", "[integration][compiled]") {
  auto raw = RunNsboxRaw({"run", "--compile-timeout", "5s", "--lang", "python", "--code", "print(1)"});
  CHECK(raw.exit_code == 125);
  CHECK(raw.err == "nsbox run: --compile-timeout: language 'python' has no compile step\n");
  raw = RunNsboxRaw({"run", "--compile-timeout", "soon", "--lang", "c", "--code", "int main(void) { return 0; }"});
  CHECK(raw.exit_code == 125);
  CHECK(raw.err.find("--compile-timeout") != std::string::npos);
}

TEST_CASE("Go: a program with goroutines compiles and runs under the default seccomp profile",
          "[integration][compiled]") {
  if (!HostHas("/usr/bin/go")) {
    RecordSkip("integration", "Go", "the host has no /usr/bin/go (tools/setup --tests installs golang-go)");
    return;
  }
  auto r = RunNsboxJson({"--lang", "go", "--code",
                         "package main\nimport \"fmt\"\nfunc main() {\n  c := make(chan int)\n"
                         "  for i := 1; i <= 4; i++ { go func(n int) { c <- n * n }(i) }\n"
                         "  s := 0\n  for i := 0; i < 4; i++ { s += <-c }\n  fmt.Println(\"sum\", s)\n}\n"});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "sum 30\n");
  CHECK(r.json["compile"]["status"] == "ok");
  CHECK(r.json["denied_syscalls"].empty());
}

TEST_CASE("a compiler missing from the root is a one-line error naming it and the template that has it",
          "[integration][compiled]") {
  // An empty root: whatever toolchains the host has, this one has none.
  char root[] = "/tmp/nsbox-empty-root-XXXXXX";
  REQUIRE(::mkdtemp(root) != nullptr);
  auto raw = RunNsboxRaw({"run", "--rootfs", root, "--lang", "rust", "--code", "fn main() {}"});
  ::rmdir(root);
  CHECK(raw.exit_code == 125);
  CHECK(raw.err == std::string("nsbox run: language 'rust': compiler /usr/bin/rustc is not in the root filesystem (") +
                       root + "); the image template 'rust' has it (nsbox image build rust, then --rootfs rust)\n");
}

TEST_CASE("a compiler past --compile-memory is compile_error with compile.status oom, whatever --memory says",
          "[integration][compiled]") {
  const auto groups_before = NsboxGroups();
  // g++ with <iostream> needs about 70 MB; its driver survives the OOM kill of cc1plus and exits 1 by itself. (A C
  // hello world's cc1 charges less than 16M here: its pages are mostly the page cache's, charged elsewhere.) 8M, well
  // under what cc1plus allocates: at 16M, with its text pages charged to the group, it could thrash on them (on cgroup
  // v1 pages reclaimed and read again count as progress, so no OOM comes) until its time-out.
  auto r = RunNsboxJson(
      {"--memory", "1G", "--compile-memory", "8M", "--lang", "cpp", "--code", "#include <iostream>\nint main() {}\n"});
  INFO(r.Describe());
  CHECK(r.process.exit_code == 123);
  CHECK(r.status() == "compile_error");
  CHECK(r.json["compile"]["status"] == "oom");
  CHECK(r.json.value("reason", "").starts_with("compile step oom: "));
  CHECK(r.json.value("reason", "").find("--compile-memory") != std::string::npos);
  CHECK(r.json["limits"]["memory_max_bytes"] == 8ull << 20);  // the compile step's own limit held
  // --memory alone no longer limits the compiler: 16M is the program's, the compile step has the table's 1G.
  auto fits = RunNsboxJson({"--memory", "16M", "--lang", "cpp", "--code", "#include <iostream>\nint main() {}\n"});
  INFO(fits.Describe());
  CHECK(fits.status() == "ok");
  CHECK(fits.json["compile"]["status"] == "ok");
  CHECK(fits.json["limits"]["memory_max_bytes"] == 16ull << 20);
  CHECK(NsboxGroups() == groups_before);
}

TEST_CASE("a program past --memory is oom although the compile step's memory is larger", "[integration][compiled]") {
  const auto groups_before = NsboxGroups();
  // 300 MiB touched page by page (volatile: the compiler may not drop it), against the program's 128M.
  auto r = RunNsboxJson({"--memory", "128M", "--lang", "c", "--code",
                         "#include <stdlib.h>\n#include <string.h>\nint main(void) { for (int i = 0; i < 300; i++) { "
                         "volatile char *p = malloc(1 << 20); if (!p) return 9; memset((char *)p, 1, 1 << 20); } "
                         "return 0; }\n"});
  INFO(r.Describe());
  CHECK(r.status() == "oom");
  CHECK(r.process.exit_code == 137);
  CHECK(r.json.value("reason", "") == "killed by the OOM killer: the memory limit of 134217728 bytes was reached");
  CHECK(r.json["compile"]["status"] == "ok");
  CHECK(r.json["limits"]["memory_max_bytes"] == 128ull << 20);
  CHECK(r.json["peak_memory_bytes"].get<uint64_t>() <= 130ull << 20);  // the program's own peak, under its limit
  CHECK(r.json["compile"]["peak_memory_bytes"].get<uint64_t>() > 0);
  CHECK(NsboxGroups() == groups_before);
}

TEST_CASE("--compile-memory is checked: a bad size, an interpreted language, no limits at all",
          "[integration][compiled]") {
  auto raw = RunNsboxRaw({"run", "--compile-memory", "foo", "--lang", "c", "--code", "int main(void) { return 0; }"});
  CHECK(raw.exit_code == 125);
  CHECK(raw.err.starts_with("nsbox run: --compile-memory: invalid size 'foo'"));
  CHECK(std::count(raw.err.begin(), raw.err.end(), '\n') == 1);
  raw = RunNsboxRaw({"run", "--compile-memory", "0", "--lang", "c", "--code", "int main(void) { return 0; }"});
  CHECK(raw.exit_code == 125);
  CHECK(raw.err == "nsbox run: --compile-memory: must be at least 4M\n");
  // Below a sandbox's smallest memory limit the step could not start: said as such, not as a failed start.
  raw = RunNsboxRaw({"run", "--compile-memory", "64K", "--lang", "c", "--code", "int main(void) { return 0; }"});
  CHECK(raw.exit_code == 125);
  CHECK(raw.err == "nsbox run: --compile-memory: must be at least 4M\n");
  raw = RunNsboxRaw({"run", "--compile-memory", "64M", "--lang", "python", "--code", "print(1)"});
  CHECK(raw.exit_code == 125);
  CHECK(raw.err == "nsbox run: --compile-memory: language 'python' has no compile step\n");
  raw = RunNsboxRaw({"run", "--dangerously-run-without-limits", "--compile-memory", "64M", "--lang", "c", "--code",
                     "int main(void) {}"});
  CHECK(raw.exit_code == 125);
  CHECK(raw.err == "nsbox run: --compile-memory: --dangerously-run-without-limits sets no memory limits\n");
}

TEST_CASE("a compiled program's own outcomes keep run's verdicts: a crash, a time-out, a memory bomb",
          "[integration][compiled]") {
  auto crash = RunNsboxJson({"--lang", "c", "--code", "#include <signal.h>\nint main(void) { raise(SIGSEGV); }\n"});
  INFO(crash.Describe());
  CHECK(crash.status() == "signal");
  CHECK(crash.process.exit_code == 139);
  CHECK(crash.json["compile"]["status"] == "ok");

  auto loop = RunNsboxJson({"--timeout", "300ms", "--lang", "c", "--code", "int main(void) { for (;;) {} }\n"});
  INFO(loop.Describe());
  CHECK(loop.status() == "timeout");
  CHECK(loop.process.exit_code == 124);
  CHECK(loop.json.value("reason", "") ==
        "wall-clock time limit of 300 ms exceeded; every process of the sandbox was killed");

  auto bomb = RunNsboxJson({"--memory", "64M", "--lang", "c", "--code",
                            "#include <stdlib.h>\n#include <string.h>\n"
                            "int main(void) { for (;;) { char *p = malloc(1 << 20); if (!p) return 9; "
                            "memset(p, 1, 1 << 20); } }\n"});
  INFO(bomb.Describe());
  CHECK(bomb.status() == "oom");
  CHECK(bomb.process.exit_code == 137);
  CHECK(bomb.json.value("reason", "") == "killed by the OOM killer: the memory limit of 67108864 bytes was reached");
  CHECK(bomb.json["compile"]["status"] == "ok");  // gcc's 30 MB fit in the same 64M
}

TEST_CASE("Go: a package that is not main compiles to nothing runnable: compile_error, not setup_error",
          "[integration][compiled]") {
  if (!HostHas("/usr/bin/go")) {
    RecordSkip("integration", "Go library", "the host has no /usr/bin/go (tools/setup --tests installs golang-go)");
    return;
  }
  auto r = RunNsboxJson({"--lang", "go", "--code", "package foo\nfunc F() {}\n"});
  INFO(r.Describe());
  CHECK(r.process.exit_code == 123);
  CHECK(r.status() == "compile_error");
  CHECK_THAT(r.json["reason"].get<std::string>(),
             Catch::StartsWith("compile step made no program: the compiler succeeded, but /tmp/nsbox-build/") &&
                 Catch::Contains("(EACCES); is the code a program (package main, a main function)?"));
  CHECK(r.json["compile"]["status"] == "ok");
}

TEST_CASE("a source that cannot be written to the build directory is setup_error, not the compiler's error",
          "[integration][compiled]") {
  // A /tmp too small for it: cat's "No space left on device" was reported as "gcc exited with 1", gcc never having run.
  std::string code = "int main(void) { return 0; }\n";
  while (code.size() < (3u << 20)) code += "/* padding padding padding padding padding padding padding padding */\n";
  const std::string file = "/tmp/nsbox-compiled-test-" + std::to_string(::getpid()) + "-big.c";
  std::ofstream(file) << code;
  auto r = RunNsboxJson({"--tmpfs-size", "1M", "--lang", "c", "--file", file});
  ::unlink(file.c_str());
  INFO(r.Describe());
  CHECK(r.process.exit_code == 125);
  CHECK(r.status() == "setup_error");
  CHECK_THAT(r.json["reason"].get<std::string>(),
             Catch::StartsWith("compile step: the source could not be written to the build directory: ") &&
                 Catch::Contains("No space left on device"));
}

TEST_CASE("a compiler stopped by the pids limit is compile_error whose reason names that limit",
          "[integration][compiled]") {
  // g++ forks cc1plus, as, collect2 and ld: three processes are not enough. Which fork fails first (the compile
  // step's shell's, g++'s) and so the exit code vary.
  auto r = RunNsboxJson({"--pids", "3", "--lang", "cpp", "--code", "int main() {}"});
  INFO(r.Describe());
  CHECK(r.status() == "compile_error");
  CHECK_THAT(r.json["reason"].get<std::string>(),
             Catch::StartsWith("compile step stopped by the pids limit: /usr/bin/g++ exited with ") &&
                 Catch::Contains(" after the limit of 3 processes and threads was reached; give the sandbox more "
                                 "(--pids)"));
  CHECK(r.json["limits"]["pids_limit_hit"] == true);
}

// Debian's tsc has no @types/node: without nsbox's declarations, require, process and "fs" were compile errors, and a
// file without import or export was a global script whose `const name` clashed with the DOM lib's own.
// The program step's figure was the largest process's resident size, which for a payload forked from the supervisor
// starts at the supervisor's own: every small C program reported the same 4 MiB, and three children were one.
TEST_CASE("a compiled program's peak_memory_bytes is its group's peak, children included, as a run's is",
          "[integration][compiled]") {
  // Each child holds its 100 MiB until all three hold theirs (a barrier of two pipes, not a sleep).
  auto r = RunNsboxJson({"--lang", "c", "--code",
                         "#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n#include <sys/wait.h>\n"
                         "int main(void) {\n  int ready[2], go[2];\n  if (pipe(ready) || pipe(go)) return 2;\n"
                         "  for (int i = 0; i < 3; i++)\n    if (fork() == 0) {\n"
                         "      close(go[1]);\n      close(ready[0]);\n"
                         "      volatile char *p = malloc(100 << 20);\n      memset((char *)p, 1, 100 << 20);\n"
                         "      long s = 0;\n      for (long j = 0; j < (100 << 20); j += 4096) s += p[j];\n"
                         "      char c = 1;\n      if (write(ready[1], &c, 1) != 1) _exit(3);\n"
                         "      while (read(go[0], &c, 1) > 0) {}\n      _exit(s == 0);\n    }\n"
                         "  close(ready[1]);\n  char c;\n  for (int n = 0; n < 3; n++)\n"
                         "    if (read(ready[0], &c, 1) != 1) return 4;\n"
                         "  close(go[1]);\n  int status, failed = 0;\n"
                         "  while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status);\n"
                         "  return failed;\n}\n"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  const uint64_t peak = r.json.value("peak_memory_bytes", uint64_t{0});
  CHECK(peak >= 300ull << 20);
  CHECK(peak < 400ull << 20);
}

TEST_CASE("TypeScript reads its input as Node programs do, and common top-level names compile",
          "[integration][compiled]") {
  if (!HostHas("/usr/bin/tsc")) {
    RecordSkip("integration", "TypeScript input",
               "the host has no /usr/bin/tsc (tools/setup --tests installs node-typescript)");
    return;
  }
  SpawnOptions input;
  input.stdin_data = "3\n1 2 3\n";
  const std::vector<std::pair<std::string, std::string>> programs = {
      {"import * as fs from 'fs';\nconst data: string = fs.readFileSync(0, 'utf8');\n"
       "const [n, ...xs] = data.trim().split(/\\s+/).map(Number);\nconsole.log(n, xs.reduce((a, b) => a + b, 0));\n",
       "3 6\n"},
      {"import fs from 'fs';\nconst name = 'lines';\nlet status = fs.readFileSync('/dev/stdin', 'utf8').split('\\n');\n"
       "console.log(name, status.length);\n",
       "lines 3\n"},
      {"const rl = require('readline').createInterface({ input: process.stdin });\nconst lines: string[] = [];\n"
       "rl.on('line', (line) => lines.push(line));\nrl.on('close', () => console.log(lines.length));\n",
       "2\n"},
      {"let input = '';\nprocess.stdin.on('data', (chunk: Buffer) => (input += chunk));\n"
       "process.stdin.on('end', () => console.log(Number(input.split('\\n')[0]) * 2));\n",
       "6\n"},
      // ES2022's library, which the Node that runs it has: at, Object.hasOwn, replaceAll.
      {"const a = [1, 2, 3];\nconsole.log(a.at(-1), Object.hasOwn({ x: 1 }, 'x'), 'a-b-c'.replaceAll('-', ''));\n",
       "3 true abc\n"},
  };
  for (const auto& [code, expected] : programs) {
    auto r = RunNsboxJson({"--lang", "typescript", "--stdin", "-", "--code", code}, input);
    INFO(code << "\n" << r.Describe());
    CHECK(r.status() == "ok");
    CHECK(r.out() == expected);
  }
  // Types are still checked.
  auto wrong = RunNsboxJson(
      {"--lang", "typescript", "--code", "const n: number = process.argv.length;\nconst s: string = n;\n"});
  CHECK(wrong.status() == "compile_error");
  CHECK_THAT(wrong.out(), Catch::Contains("error TS2322"));
}

TEST_CASE("a Java program whose class is not Main runs: its file takes the public class's name",
          "[integration][compiled]") {
  if (!HostHas("/usr/bin/javac")) {
    RecordSkip("integration", "Java class names",
               "the host has no /usr/bin/javac (tools/setup --tests installs default-jdk-headless)");
    return;
  }
  SpawnOptions input;
  input.stdin_data = "21\n";
  auto solution = RunNsboxJson({"--lang", "java", "--stdin", "-", "--code",
                                "import java.util.Scanner;\npublic class Solution {\n"
                                "  public static void main(String[] args) {\n"
                                "    System.out.println(new Scanner(System.in).nextInt() * 2); } }\n"},
                               input);
  INFO(solution.Describe());
  CHECK(solution.status() == "ok");
  CHECK(solution.out() == "42\n");
  // No public class: the one with main runs, beside a helper class.
  auto plain =
      RunNsboxJson({"--lang", "java", "--code",
                    "class Helper { static int f() { return 7; } }\n"
                    "class Program { public static void main(String[] a) { System.out.println(Helper.f()); } }\n"});
  INFO(plain.Describe());
  CHECK(plain.status() == "ok");
  CHECK(plain.out() == "7\n");
}

// V8 stops at the heap nsbox gave it (--max-old-space-size) with its own message and SIGABRT, before the OOM killer:
// that was a "signal" verdict, while the same program's bigger arrays were "oom".
TEST_CASE("node that fills the heap sized from --memory is oom, with the runtime's words in the reason",
          "[integration][compiled]") {
  auto r = RunNsboxJson({"--memory", "256M", "--lang", "node", "--code",
                         "const m = new Map();\nfor (let i = 0; ; i++) m.set(i, [i, i + 1, i + 2]);\n"});
  INFO(r.Describe());
  CHECK(r.status() == "oom");
  CHECK(r.process.exit_code == 137);
  CHECK_THAT(r.json.value("reason", ""),
             Catch::StartsWith("the runtime's heap, sized from the memory limit of 268435456 bytes, was full "
                               "(\"JavaScript heap out of memory\" in stderr)"));
  // Without a memory limit no heap is sized, and the words are the program's own.
  auto words = RunNsboxJson({"--dangerously-run-without-limits", "--lang", "node", "--code",
                             "console.error('JavaScript heap out of memory'); process.exit(3);\n"});
  CHECK(words.status() == "exit");
}

TEST_CASE("Java and Node collect garbage within --memory: heaps sized from it and not from the host's RAM",
          "[integration][compiled]") {
  // 100 MB kept and gigabytes of garbage: a heap sized from the host's RAM grows past 256M before it collects.
  auto node = RunNsboxJson({"--memory", "256M", "--lang", "node", "--code",
                            "const keep = [];\nfor (let i = 0; i < 100; i++) keep.push(new Array(1 << 17).fill(i));\n"
                            "let s = 0;\nfor (let i = 0; i < 2000; i++) s += new Array(1 << 17).fill(i).length;\n"
                            "console.log('kept', keep.length);\n"});
  INFO(node.Describe());
  CHECK(node.status() == "ok");
  CHECK(node.out() == "kept 100\n");
  if (!HostHas("/usr/bin/javac")) {
    RecordSkip("integration", "Java heap",
               "the host has no /usr/bin/javac (tools/setup --tests installs default-jdk-headless)");
    return;
  }
  auto java = RunNsboxJson(
      {"--memory", "256M", "--lang", "java", "--code",
       "public class Main { public static void main(String[] a) {\n"
       "  java.util.List<byte[]> keep = new java.util.ArrayList<>();\n"
       "  for (int i = 0; i < 150; i++) keep.add(new byte[1 << 20]);\n"
       "  long sum = 0; for (int i = 0; i < 3000; i++) sum += new byte[1 << 20].length;\n"
       "  System.out.println(keep.size() + \" \" + Runtime.getRuntime().maxMemory() / (1 << 20)); } }\n"});
  INFO(java.Describe());
  CHECK(java.status() == "ok");
  CHECK_THAT(java.out(), Catch::StartsWith("150 1"));  // a max heap of about 185 MiB (-Xmx192m less a survivor space)
}
