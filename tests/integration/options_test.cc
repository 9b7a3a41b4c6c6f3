// Integration: bad options and inputs: each gets one line on stderr, nothing on stdout (a setup_error object with
// --json), and exit code 125, before any sandbox is made.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "nsbox_config.h"
#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

void CheckOneLineError(const std::vector<std::string>& args, const std::string& expected_fragment) {
  auto r = RunNsboxRaw(args);
  INFO("nsbox " << [&] {
    std::string s;
    for (const auto& a : args) s += a.substr(0, 40) + " ";
    return s;
  }() << "\nstderr: " << r.err);
  CHECK(r.exit_code == 125);
  CHECK(r.out.empty());
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.ends_with("\n"));
  CHECK(r.err.find(expected_fragment) != std::string::npos);
}

}  // namespace

TEST_CASE("an unknown flag is a one-line error, exit 125", "[integration][options]") {
  CheckOneLineError({"run", "--frobnicate", "--", "/bin/true"}, "--frobnicate");
}

TEST_CASE("a bad size is a one-line error, exit 125", "[integration][options]") {
  CheckOneLineError({"run", "--output-limit", "12Q", "--", "/bin/true"}, "--output-limit");
  CheckOneLineError({"run", "--tmpfs-size", "lots", "--", "/bin/true"}, "--tmpfs-size");
}

TEST_CASE("an output limit above 64M is refused: nsbox would hold it outside every cgroup", "[integration][options]") {
  // nsbox keeps both streams' head and tail in its own memory, and copies them into the JSON result.
  CheckOneLineError({"run", "--output-limit", "1G", "--", "/bin/true"}, "--output-limit");
  CheckOneLineError({"agent", "--output-limit", "65M", "hello"}, "--output-limit");
}

TEST_CASE("a limit the kernel would refuse is a one-line error before any sandbox, exit 125",
          "[integration][options]") {
  CheckOneLineError({"run", "--pids", "4194305", "--", "/bin/true"}, "pids limit must be at most 4194304");
  CheckOneLineError({"run", "--pids", "0", "--", "/bin/true"}, "pids limit must be at least 2");
  CheckOneLineError({"run", "--pids", "1", "--", "/bin/true"}, "pids limit must be at least 2");
  CheckOneLineError({"run", "--pids", "-1", "--", "/bin/true"}, "--pids");
  CheckOneLineError({"run", "--dangerously-run-without-limits", "--memory", "64M", "--", "/bin/true"},
                    "--memory sets a limit, and --dangerously-run-without-limits asks for none");
  CheckOneLineError({"run", "--pids", "5", "--dangerously-run-without-limits", "--", "/bin/true"},
                    "--pids sets a limit");
  CheckOneLineError({"run", "--memory", "1K", "--", "/bin/true"}, "memory limit must be at least");
  CheckOneLineError({"run", "--cpus", "0", "--", "/bin/true"}, "cpus must be a number above 0");
  CheckOneLineError({"run", "--cpus", "5000", "--", "/bin/true"}, "cpus must be at most 4096");
}

TEST_CASE("a unit that is not known is quoted as given, and each message names its option once",
          "[integration][options]") {
  CheckOneLineError({"run", "--memory", "1X", "--", "/bin/true"}, "--memory: invalid size '1X': unknown unit 'X'");
  CheckOneLineError({"run", "--timeout", "5Q", "--", "/bin/true"}, "unknown unit 'Q'");
  auto r = RunNsboxRaw({"run", "--network", "allow=", "--", "/bin/true"});
  CHECK(r.err == "nsbox run: --network 'allow=': empty domain in the allow list\n");
}

TEST_CASE("a bad duration is a one-line error, exit 125", "[integration][options]") {
  CheckOneLineError({"run", "--timeout", "forever", "--", "/bin/true"}, "--timeout");
  CheckOneLineError({"run", "--timeout", "-5s", "--", "/bin/true"}, "--timeout");
}

TEST_CASE("a missing rootfs is a one-line error, exit 125", "[integration][options]") {
  CheckOneLineError({"run", "--rootfs", "/nonexistent/root", "--", "/bin/true"}, "/nonexistent/root");
}

TEST_CASE("an unknown language is a one-line error naming the known ones, exit 125", "[integration][options]") {
  CheckOneLineError({"run", "--lang", "cobol", "--code", "x"}, "unknown language 'cobol'");
}

TEST_CASE("an interpreter missing from the root filesystem is a one-line error, exit 125", "[integration][options]") {
  TempDir root;
  root.Write("bin/busybox", "");  // a root with /bin but no python
  CheckOneLineError({"run", "--rootfs", root.path(), "--lang", "python", "--code", "print(1)"}, "interpreter");
}

TEST_CASE("a --file larger than 16 MiB is a one-line error, exit 125", "[integration][options]") {
  TempDir dir;
  std::string big = dir.Write("big.py", std::string((16 << 20) + 1, '#'));
  CheckOneLineError({"run", "--lang", "python", "--file", big}, "larger than");
}

TEST_CASE("a missing --file, bind source or --stdin file is a one-line error, exit 125", "[integration][options]") {
  CheckOneLineError({"run", "--lang", "python", "--file", "/nonexistent.py"}, "/nonexistent.py");
  CheckOneLineError({"run", "--ro-bind", "/nonexistent/src:/x", "--", "/bin/true"}, "/nonexistent/src");
  CheckOneLineError({"run", "--stdin", "/nonexistent/in", "--", "/bin/true"}, "/nonexistent/in");
  CheckOneLineError({"run", "--stdin", "/tmp", "--", "/bin/true"}, "--stdin: /tmp is a directory");
}

TEST_CASE("contradictory or missing program options are one-line errors, exit 125", "[integration][options]") {
  CheckOneLineError({"run", "--code", "print(1)"}, "--lang");
  CheckOneLineError({"run"}, "nothing to run");
  CheckOneLineError({"run", "--lang", "python", "--code", "1", "--", "/bin/true"}, "not both");
  // A bare KEY is the host's value (Docker's -e KEY); an empty key is an error.
  CheckOneLineError({"run", "--env", "=VALUE", "--", "/bin/true"}, "expected KEY=VALUE or KEY");
  // The working directory is named when it is not there (or not a directory), as every other path is.
  CheckOneLineError(
      {"run", "--workdir", "/nonexistent-dir", "--", "/bin/true"},
      "openat2(working directory /nonexistent-dir, RESOLVE_NO_MAGICLINKS): No such file or directory (ENOENT)");
  CheckOneLineError({"run", "--workdir", "/etc/passwd", "--", "/bin/true"}, "(working directory /etc/passwd, ");
  // A loop of root's links is a loop, not a link "not made by root".
  char loops[] = "/tmp/nsbox-link-loop-XXXXXX";
  REQUIRE(::mkdtemp(loops) != nullptr);
  const std::string loop = std::string(loops) + "/loop1";
  REQUIRE(::symlink("loop2", loop.c_str()) == 0);
  REQUIRE(::symlink("loop1", (std::string(loops) + "/loop2").c_str()) == 0);
  if (::geteuid() == 0) {
    CheckOneLineError({"run", "--workspace", loop, "--", "/bin/true"}, "Too many levels of symbolic links (ELOOP)");
    CheckOneLineError({"run", "--bind", loop + ":/x", "--", "/bin/true"}, "Too many levels of symbolic links (ELOOP)");
  }
  std::filesystem::remove_all(loops);
  // A name with a newline would show in `env` as a variable of its own ("B=1").
  CheckOneLineError({"run", "--env", "A\nB=1", "--", "/usr/bin/env"}, "'A\\nB=1': expected KEY=VALUE or KEY");
  CheckOneLineError({"run", "--env", "A\x1b[2J=1", "--", "/usr/bin/env"}, "a name without spaces or control");
  CheckOneLineError({"run", "--network", "bridge", "--", "/bin/true"}, "--network");
  CheckOneLineError({"run", "--bind", "/tmp:relative/dst", "--", "/bin/true"}, "absolute");
  CheckOneLineError({"run", "--ro-bind", "/tmp:/", "--", "/bin/true"}, "would replace the sandbox's whole root");
  CheckOneLineError({"run", "--ro-bind", "/tmp:/x", "--bind", "/usr:/x/", "--", "/bin/true"}, "'/x' is given twice");
}

TEST_CASE("--version and --help succeed", "[integration][options]") {
  auto version = RunNsboxRaw({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.out.starts_with("nsbox "));
  auto help = RunNsboxRaw({"run", "--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("--timeout") != std::string::npos);
}

TEST_CASE("after repeatable options, the command's own dash arguments following -- belong to the command",
          "[integration][options]") {
  TempDir dir;
  auto r = RunNsboxJson({"--env", "A=1", "--ro-bind", "/usr:/y", "--bind", dir.path() + ":/z", "--", "/bin/sh", "-c",
                         "echo \"$A\" -n"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "1 -n\n");
}

TEST_CASE("a bind source or destination holding ':' is written with \\:, and a literal backslash as \\\\",
          "[integration][options]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);  // the sandbox user opens the bind source
  const std::string odd = dir.path() + "/data:2026\\x";  // a ':' and a backslash in one directory name
  REQUIRE(::mkdir(odd.c_str(), 0755) == 0);
  {
    std::ofstream f(odd + "/file");
    f << "inside\n";
  }
  std::string escaped;
  for (char c : odd) {
    if (c == ':' || c == '\\') escaped += '\\';
    escaped += c;
  }
  // SRC:DST with the source escaped, then the destination holding a ':' of its own.
  auto r = RunNsboxJson({"--ro-bind", escaped + ":/mnt/a\\:b", "--", "/bin/sh", "-c", "cat '/mnt/a:b/file'"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "inside\n");
  // SRC alone: bound at its own path, ':' and all.
  auto same = RunNsboxJson({"--ro-bind", escaped, "--", "/bin/cat", odd + "/file"});
  INFO(same.Describe());
  REQUIRE(same.status() == "ok");
  CHECK(same.out() == "inside\n");
  // Unescaped, the first ':' still ends the source: a source that does not exist is named in the error; and a
  // second unescaped ':' is refused (Docker's SRC:DST:ro must not become a bind at "DST:ro").
  CheckOneLineError({"run", "--ro-bind", dir.path() + "/data:/x", "--", "/bin/true"},
                    "bind source '" + dir.path() + "/data'");
  CheckOneLineError({"run", "--ro-bind", odd + ":/x", "--", "/bin/true"}, "more than one ':'");
}

TEST_CASE("nsbox mcp checks the sandbox options it passes through before it serves, exit 125",
          "[integration][options]") {
  // Said once at start-up, not by each tool call (which once took a bad option for a binary without sessions).
  CheckOneLineError({"mcp", "--frobnicate"}, "--frobnicate");
  CheckOneLineError({"mcp", "--ro-bind", "/nonexistent/src:/x"}, "/nonexistent/src");
  CheckOneLineError({"mcp", "--memory", "1K"}, "memory limit");
  CheckOneLineError({"mcp", "--idle-timeout", "soon"}, "--idle-timeout");
  // Good options pass: the server starts, reads the end of its stdin and ends.
  auto ok = RunNsboxRaw({"mcp", "--memory", "256M", "--network", "none", "--idle-timeout", "5m"});
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("with --json, a bad option or input still gives one setup_error object on stdout", "[integration][options]") {
  // A caller that parses stdout as the result must not get nothing: the line on stderr is said as well.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"run", "--json", "--cpus", "0", "--", "/bin/true"},
           {"run", "--json", "--frobnicate", "--", "/bin/true"},
           {"run", "--json", "--timeout", "0", "--", "/bin/true"},
           {"run", "--json", "--rootfs", "/nonexistent/root", "--", "/bin/true"},
           // A step of the sandbox's own set-up (inside it, after the clone): stderr said nothing.
           {"run", "--json", "--workdir", "/nonexistent", "--", "/bin/true"},
           {"run", "--json", "--lang", "cobol", "--code", "x"},
           {"exec", "no-such-session", "--json", "--", "/bin/true"}}) {
    auto r = RunNsboxRaw(args);
    INFO(args[2] << " " << args[3] << "\nstdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.exit_code == 125);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    auto json = nlohmann::json::parse(r.out, nullptr, false);
    REQUIRE(json.is_object());
    CHECK(json.value("status", "") == "setup_error");
    CHECK(json.value("exit_code", 0) == -1);
    CHECK(!json.value("reason", "").empty());
    CHECK(r.err.find(json.value("reason", "")) != std::string::npos);
  }
  // After "--", --json is the program's argument, not nsbox's.
  auto r = RunNsboxRaw({"run", "--frobnicate", "--", "/bin/echo", "--json"});
  CHECK(r.exit_code == 125);
  CHECK(r.out.empty());
}

TEST_CASE("an empty command is a one-line error; an empty --code is an empty program", "[integration][options]") {
  CheckOneLineError({"run", "--", ""}, "the command after -- is an empty string");
  CheckOneLineError({"run", "--lang", "python", "--code", "", "--file", "/dev/null"},
                    "give --code or --file, not both");
  auto empty = RunNsboxJson({"--lang", "python", "--code", ""});
  INFO(empty.Describe());
  CHECK(empty.status() == "ok");
}

namespace {

// A copy of the source tree's data (rootfs/, seccomp-profiles/) in a fresh directory under /tmp, mode 0755.
struct DataCopy {
  std::filesystem::path dir;
  DataCopy() {
    char tmpl[] = "/tmp/nsbox-data-copy-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ::chmod(dir.c_str(), 0755);
    for (const char* sub : {"rootfs", "seccomp-profiles"})
      std::filesystem::copy(std::filesystem::path(NSBOX_SOURCE_DIR) / sub, dir / sub,
                            std::filesystem::copy_options::recursive);
  }
  ~DataCopy() { std::filesystem::remove_all(dir); }
};

}  // namespace

TEST_CASE("a data directory others can write is refused before any sandbox: one line naming it, exit 125",
          "[integration][options]") {
  DataCopy data;
  SpawnOptions with_data;
  with_data.extra_env["NSBOX_DATADIR"] = data.dir.string();
  // The same copy, trusted, runs: what is refused below is the mode alone.
  auto trusted = RunNsboxRaw({"run", "--lang", "python", "--code", "print(6*7)"}, with_data);
  INFO("stderr: " << trusted.err);
  CHECK(trusted.exit_code == 0);
  CHECK(trusted.out == "42\n");

  ::chmod(data.dir.c_str(), 0777);
  auto refused = RunNsboxRaw({"run", "--lang", "python", "--code", "print(6*7)"}, with_data);
  INFO("stderr: " << refused.err);
  CHECK(refused.exit_code == 125);
  CHECK(refused.out.empty());
  CHECK(std::count(refused.err.begin(), refused.err.end(), '\n') == 1);
  CHECK_THAT(refused.err, Catch::Contains("refusing the data directory " + data.dir.string()) &&
                              Catch::Contains("is writable by others (mode 0777)"));
  // doctor reports it instead of refusing to start.
  auto doctor = RunNsboxRaw({"doctor", "--json"}, with_data);
  auto report = nlohmann::json::parse(doctor.out);
  bool reported = false;
  for (const auto& check : report.at("checks"))
    if (check.at("id") == "rootfs.host")
      reported = check.at("status") == "fail" &&
                 check.at("detail").get<std::string>().find("is writable by others") != std::string::npos;
  CHECK(reported);
  CHECK(doctor.exit_code == 1);
}

TEST_CASE("a group-writable $NSBOX_PROFILES_DIR is refused: one line naming it, exit 125", "[integration][options]") {
  DataCopy data;
  std::filesystem::path profiles = data.dir / "seccomp-profiles";
  ::chmod(profiles.c_str(), 0775);
  SpawnOptions with_profiles;
  with_profiles.extra_env["NSBOX_PROFILES_DIR"] = profiles.string();
  auto r = RunNsboxRaw({"run", "--", "/bin/true"}, with_profiles);
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 125);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_THAT(r.err,
             Catch::Contains("refusing the seccomp profiles directory ($NSBOX_PROFILES_DIR) " + profiles.string()) &&
                 Catch::Contains("writable by its group"));
}

TEST_CASE("root of a user namespace that cannot map the sandbox's host uid is refused, saying so",
          "[integration][options]") {
  if (::geteuid() != 0) return;  // unshare -Ur maps the caller as root alone: the same for anyone, shown as root's
  auto r = RunProcess(
      {"/usr/bin/unshare", "-Ur", NsboxBinary(), "run", "--dangerously-run-without-limits", "--", "/bin/true"});
  INFO(r.err);
  CHECK(r.exit_code == 125);
  CHECK_THAT(r.err, Catch::Contains("Operation not permitted (EPERM); host uid 65534 is not mapped in this "
                                    "process's user namespace"));
}
