// Integration: what goes in and out besides stdout: --stdin FILE and -, --lang with --code/--file/--file -,
// --workspace (and the code file's removal), --ro-bind and --bind, --env.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("stdin defaults to /dev/null", "[integration][io]") {
  SpawnOptions spawn;
  spawn.stdin_data = "should not arrive\n";
  auto r = RunNsboxJson({"--", "/bin/cat"}, spawn);
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "");
}

TEST_CASE("--stdin FILE feeds the file, --stdin - feeds nsbox's stdin", "[integration][io]") {
  TempDir dir;
  std::string file = dir.Write("input", "from a file\n");
  auto r = RunNsboxJson({"--stdin", file, "--", "/bin/cat"});
  INFO(r.Describe());
  CHECK(r.out() == "from a file\n");
  SpawnOptions spawn;
  spawn.stdin_data = "from a pipe\n";
  auto piped = RunNsboxJson({"--stdin", "-", "--", "/bin/cat"}, spawn);
  INFO(piped.Describe());
  CHECK(piped.out() == "from a pipe\n");
}

TEST_CASE("--lang runs --code, --file and --file - through the language's interpreter", "[integration][io]") {
  auto code = RunNsboxJson({"--lang", "python", "--code", "print(2**100)"});
  CHECK(code.out() == "1267650600228229401496703205376\n");
  TempDir dir;
  std::string file = dir.Write("script.sh", "echo \"$0\"; echo from-file\n");
  auto from_file = RunNsboxJson({"--lang", "bash", "--file", file});
  INFO(from_file.Describe());
  CHECK(from_file.out() == "/workspace/.nsbox-main.sh\nfrom-file\n");
  SpawnOptions spawn;
  spawn.stdin_data = "print('from stdin')\n";
  auto from_stdin = RunNsboxJson({"--lang", "python3", "--file", "-"}, spawn);
  INFO(from_stdin.Describe());
  CHECK(from_stdin.out() == "from stdin\n");
}

TEST_CASE("node runs where it is installed", "[integration][io]") {
  if (::access("/usr/bin/node", X_OK) != 0) {
    RecordSkip("integration_tests", "node runs where it is installed", "/usr/bin/node is not installed on this host");
    return;
  }
  auto r = RunNsboxJson({"--lang", "node", "--code", "console.log(6 * 7)"});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "42\n");
}

TEST_CASE("--workspace binds a host directory read-write and the code file is removed afterwards", "[integration][io]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  dir.Write("input.txt", "hello\n");
  auto r = RunNsboxJson({"--workspace", dir.path(), "--lang", "sh", "--code",
                         "ls -A /workspace | sort | tr '\\n' ' '; tr a-z A-Z < input.txt > output.txt"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == ".nsbox-main.sh input.txt ");
  CHECK(Slurp(dir.path() + "/output.txt") == "HELLO\n");
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/.nsbox-main.sh"));
  struct stat st;
  REQUIRE(::stat((dir.path() + "/output.txt").c_str(), &st) == 0);
  CHECK(st.st_uid == 65534);  // written by the sandbox user, an unprivileged host uid
}

TEST_CASE("the code file is removed from --workspace after a failure and a time-out too", "[integration][io]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  auto failed = RunNsboxJson({"--workspace", dir.path(), "--lang", "python", "--code", "raise SystemExit(4)"});
  CHECK(failed.status() == "exit");
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/.nsbox-main.py"));
  auto timed_out = RunNsboxJson({"--workspace", dir.path(), "--timeout", "300ms", "--lang", "python", "--code",
                                 "import time; time.sleep(10)"});
  CHECK(timed_out.status() == "timeout");
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/.nsbox-main.py"));
}

TEST_CASE("--ro-bind is readable and read-only; --bind is writable and visible on the host", "[integration][io]") {
  TempDir ro, rw;
  ro.Write("data", "read me\n");
  REQUIRE(::chmod(ro.path().c_str(), 0755) == 0);
  REQUIRE(::chmod(rw.path().c_str(), 0777) == 0);
  auto r = RunPython(R"(
print(open("/data/ro/data").read().strip(), err(open, "/data/ro/new", "w"), err(open, "/mnt/rw/new", "w"))
open("/mnt/rw/new", "w").write("written\n")
)",
                     {"--ro-bind", ro.path() + ":/data/ro", "--bind", rw.path() + ":/mnt/rw"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "read me EROFS ok\n");
  CHECK(Slurp(rw.path() + "/new") == "written\n");
}

TEST_CASE("--ro-bind of a single file without a destination appears at the same path", "[integration][io]") {
  TempDir dir;
  std::string file = dir.Write("single.txt", "single\n");
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  auto r = RunNsboxJson({"--ro-bind", file, "--", "/bin/cat", file});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "single\n");
}
