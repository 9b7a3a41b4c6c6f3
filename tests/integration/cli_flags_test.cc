// Integration: the Docker-style flags (--workdir, --env KEY, --env-file), an unknown option named as such, and a
// binary without its data told where data is looked for.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

std::string MakeTempDir() {
  char dir[] = "/tmp/nsbox-cli-flags-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  return dir;
}

}  // namespace

TEST_CASE("--workdir sets the program's working directory; a relative one is refused", "[integration][options]") {
  auto r = RunNsboxJson({"--workdir", "/tmp", "--", "/bin/pwd"});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "/tmp\n");
  auto relative = RunNsboxRaw({"run", "--workdir", "tmp", "--", "/bin/pwd"});
  CHECK(relative.exit_code == 125);
  CHECK(relative.err == "nsbox run: --workdir 'tmp': expected an absolute path\n");
}

TEST_CASE("--env KEY passes the host's value, --env-file sets lines, and --env wins over the file",
          "[integration][options]") {
  const std::string dir = MakeTempDir();
  const std::string file = dir + "/vars.env";
  std::ofstream(file) << "# a comment\n\nFROM_FILE=one two\nOVERRIDDEN=file\nFROM_HOST_VIA_FILE\n  INDENTED=yes\r\n";
  SpawnOptions spawn;
  spawn.extra_env = {{"NSBOX_TEST_HOST_VAR", "host value"}, {"FROM_HOST_VIA_FILE", "also host"}};
  auto r = RunNsboxJson({"--env-file", file, "--env", "OVERRIDDEN=flag", "--env", "NSBOX_TEST_HOST_VAR", "--env",
                         "NSBOX_TEST_UNSET_VAR", "--", "/bin/sh", "-c",
                         "echo \"$FROM_FILE|$OVERRIDDEN|$NSBOX_TEST_HOST_VAR|$FROM_HOST_VIA_FILE|$INDENTED|"
                         "${NSBOX_TEST_UNSET_VAR-unset}\""},
                        spawn);
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "one two|flag|host value|also host|yes|unset\n");
  std::ofstream(file) << "GOOD=1\n=bad\n";
  auto bad = RunNsboxRaw({"run", "--env-file", file, "--", "/bin/true"});
  CHECK(bad.exit_code == 125);
  CHECK(bad.err == "nsbox run: --env-file " + file + " line 2 '=bad': expected KEY=VALUE or KEY\n");
  auto missing = RunNsboxRaw({"run", "--env-file", dir + "/none", "--", "/bin/true"});
  CHECK(missing.exit_code == 125);
  CHECK(missing.err.find("--env-file: open(" + dir + "/none)") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an unknown option before -- is named, with the nearest known one", "[integration][options]") {
  auto r = RunNsboxRaw({"run", "--memroy", "1G", "--", "true"});
  CHECK(r.exit_code == 125);
  CHECK(r.err == "nsbox: run: unknown option '--memroy'; did you mean --memory? (see nsbox run --help)\n");
  auto far = RunNsboxRaw({"session", "create", "--nope"});
  CHECK(far.exit_code == 125);
  CHECK(far.err == "nsbox: session create: unknown option '--nope' (see nsbox session create --help)\n");
  // After --, the command's own options are its business.
  auto command = RunNsboxJson({"--", "/bin/echo", "--memroy"});
  CHECK(command.out() == "--memroy\n");
}

TEST_CASE("a refused data directory still gives run --json its one setup_error result", "[integration][options]") {
  const std::string dir = MakeTempDir();
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);  // anyone could change what nsbox would read from it
  SpawnOptions spawn;
  spawn.extra_env = {{"NSBOX_DATADIR", dir}};
  auto r = RunProcess({NsboxBinary(), "run", "--json", "--", "/bin/true"}, spawn);
  CHECK(r.exit_code == 125);
  CHECK(r.err.find("refusing the data directory " + dir) != std::string::npos);
  auto result = nlohmann::json::parse(r.out);
  CHECK(result["status"] == "setup_error");
  CHECK(result["reason"].get<std::string>().find("refusing the data directory " + dir) != std::string::npos);
  // Without --json: the same line, and nothing on stdout.
  auto plain = RunProcess({NsboxBinary(), "run", "--", "/bin/true"}, spawn);
  CHECK(plain.exit_code == 125);
  CHECK(plain.out.empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a binary without its data says where data is looked for and names NSBOX_DATADIR", "[integration][options]") {
  const std::string dir = MakeTempDir();
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  std::filesystem::copy_file(NsboxBinary(), dir + "/nsbox");
  const std::string empty = dir + "/data";
  REQUIRE(::mkdir(empty.c_str(), 0755) == 0);
  SpawnOptions spawn;
  spawn.extra_env = {{"NSBOX_DATADIR", empty}};
  auto r = RunProcess({dir + "/nsbox", "run", "--", "/bin/true"}, spawn);
  INFO(r.err);
  CHECK(r.exit_code == 125);
  CHECK(r.err.find("unknown seccomp profile \"default\": no file " + empty + "/seccomp-profiles/default.json") !=
        std::string::npos);
  CHECK(r.err.find("from $NSBOX_DATADIR when set, else ") != std::string::npos);
  CHECK(r.err.find("set NSBOX_DATADIR to a directory that holds them") != std::string::npos);
  auto lang =
      RunProcess({dir + "/nsbox", "run", "--profile", "/nonexistent.json", "--lang", "python", "--code", "1"}, spawn);
  CHECK(lang.exit_code == 125);
  std::filesystem::remove_all(dir);
}
