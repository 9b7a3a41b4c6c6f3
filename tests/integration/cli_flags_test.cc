// Integration: the Docker-style flags (--workdir, --env KEY, --env-file), an unknown option named as such, a binary
// without its data told where data is looked for, and inputs that must be refused rather than half-read (empty values,
// SRC:DST:ro, NUL bytes, a FIFO with no writer).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

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
  CHECK(bad.err == "nsbox run: --env-file " + file + " line 2 '=bad': expected KEY=VALUE or KEY (a name without " +
                       "spaces or control characters)\n");
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

TEST_CASE("the program's first word ends nsbox's options: later words that name one are the program's",
          "[integration][options]") {
  // Without --, CLI11 took every word naming an option of nsbox's, wherever it stood: `echo --json` printed nsbox's
  // result, `echo --memory 64M` set a limit and printed an empty line.
  auto json = RunNsboxRaw({"run", "/bin/echo", "hi", "--json"});
  CHECK(json.exit_code == 0);
  CHECK(json.out == "hi --json\n");
  auto memory = RunNsboxRaw({"run", "--timeout", "10s", "/bin/echo", "--memory", "64M", "--workdir", "/tmp"});
  CHECK(memory.exit_code == 0);
  CHECK(memory.out == "--memory 64M --workdir /tmp\n");
  auto short_options = RunNsboxRaw({"run", "/bin/sh", "-c", "echo $0", "-x"});
  CHECK(short_options.exit_code == 0);
  CHECK(short_options.out == "-x\n");
  // nsbox's options before the program are nsbox's, their values too (even one that looks like a word).
  auto before = RunNsboxRaw({"run", "--json", "--workdir", "/tmp", "/bin/pwd"});
  CHECK(before.exit_code == 0);
  CHECK(nlohmann::json::parse(before.out)["stdout"] == "/tmp\n");
  // A word in brackets is a word: CLI11 read "[a, b]" as a list of two.
  auto brackets = RunNsboxRaw({"run", "--", "/usr/bin/python3", "-c", "[print(x) for x in 'ab']"});
  CHECK(brackets.out == "a\nb\n");
  auto words = RunNsboxRaw({"run", "/bin/echo", "[a, b]", "[c]", "\x1fz"});
  CHECK(words.out == "[a, b] [c] \x1fz\n");
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
  // A --json after the program's first word is the program's: nsbox's refusal is the plain line.
  auto programs = RunProcess({NsboxBinary(), "run", "/bin/echo", "--json"}, spawn);
  CHECK(programs.exit_code == 125);
  CHECK(programs.out.empty());
  CHECK(programs.err.find("refusing the data directory " + dir) != std::string::npos);
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
  CHECK(r.err.find("the default seccomp profile: unknown seccomp profile \"default\": no file " + empty +
                   "/seccomp-profiles/default.json") != std::string::npos);
  CHECK(r.err.find("--profile") == std::string::npos);  // not given: not named
  CHECK(r.err.find("from $NSBOX_DATADIR when set, else ") != std::string::npos);
  CHECK(r.err.find("set NSBOX_DATADIR to a directory that holds them") != std::string::npos);
  auto lang =
      RunProcess({dir + "/nsbox", "run", "--profile", "/nonexistent.json", "--lang", "python", "--code", "1"}, spawn);
  CHECK(lang.exit_code == 125);
  CHECK(lang.err.find("--profile: ") != std::string::npos);  // given: named
  std::filesystem::remove_all(dir);
}

TEST_CASE("an empty value is refused, naming the option, never read as the option left out", "[integration][options]") {
  // `--workspace "$UNSET"` would otherwise run with a tmpfs and lose what the program writes; `--cases ""` would judge
  // nothing and exit 0.
  for (const char* option : {"--workspace", "--cases", "--memory", "--stdin", "--workdir", "--bind"}) {
    auto r = RunNsboxRaw({"run", option, "", "--", "/bin/true"});
    INFO(option << ": " << r.err);
    CHECK(r.exit_code == 125);
    CHECK(r.err == std::string("nsbox: ") + option + ": an empty value (leave the option out instead)\n");
  }
  // Written --option= too: the next argument is not taken for its value.
  auto equals = RunNsboxRaw({"run", "--workspace=", "/tmp", "--", "/bin/true"});
  CHECK(equals.exit_code == 125);
  CHECK(equals.err == "nsbox: --workspace: an empty value (leave the option out instead)\n");
  CHECK(RunNsboxRaw({"run", "--env=", "--", "/usr/bin/env"}).exit_code == 125);
  // The command's own arguments may be empty, and so may a program's code.
  auto args = RunNsboxRaw({"run", "--", "/bin/echo", "", "x"});
  CHECK(args.exit_code == 0);
  CHECK(args.out == " x\n");
  CHECK(RunNsboxRaw({"run", "--lang", "sh", "--code", ""}).exit_code == 0);
}

TEST_CASE("a Docker-style SRC:DST:ro is refused, not bound writable at \"DST:ro\"", "[integration][options]") {
  const std::string dir = MakeTempDir();
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);
  auto r = RunNsboxRaw({"run", "--bind", dir + ":/data:ro", "--", "/bin/sh", "-c", "echo x > '/data:ro/f'"});
  CHECK(r.exit_code == 125);
  CHECK(r.err.find("more than one ':'") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/f"));
  CHECK(RunNsboxRaw({"run", "--ro-bind", dir + ":", "--", "/bin/true"}).exit_code == 125);
  // An escaped ':' is part of a path, as before.
  const std::string colon = dir + "/a:b";
  REQUIRE(::mkdir(colon.c_str(), 0755) == 0);
  auto escaped = RunNsboxRaw({"run", "--ro-bind", dir + "/a\\:b:/data", "--", "/bin/ls", "-d", "/data"});
  CHECK(escaped.exit_code == 0);
  CHECK(escaped.out == "/data\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("--network-limit 0 is refused: the proxy would read it as no limit", "[integration][options]") {
  auto r = RunNsboxRaw({"run", "--network", "allow=example.test", "--network-limit", "0", "--", "/bin/true"});
  CHECK(r.exit_code == 125);
  CHECK(r.err.find("--network-limit 0") != std::string::npos);
}

TEST_CASE("a NUL byte in an --env-file line is refused, not cut off there", "[integration][options]") {
  const std::string dir = MakeTempDir();
  const std::string file = dir + "/env";
  std::ofstream(file) << std::string("A=1\0B=2\n", 8);
  auto r = RunNsboxRaw({"run", "--env-file", file, "--", "/usr/bin/env"});
  CHECK(r.exit_code == 125);
  CHECK(r.err.find("holds a NUL byte") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("--file from a FIFO: read once a writer comes; one that never comes is refused, not waited for forever",
          "[integration][options]") {
  const std::string dir = MakeTempDir();
  const std::string fifo = dir + "/code";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A writer half a second late: the code is read and run.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::ofstream(fifo) << "echo from the fifo\n";
  });
  auto late = RunNsboxRaw({"run", "--lang", "sh", "--file", fifo});
  writer.join();
  CHECK(late.exit_code == 0);
  CHECK(late.out == "from the fifo\n");
  // No writer at all: open() must not block; after a bounded wait, a one-line refusal.
  auto never = RunNsboxRaw({"run", "--lang", "sh", "--file", fifo});
  CHECK(never.exit_code == 125);
  CHECK(never.err.find("is a FIFO nothing wrote to within") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("output a verb could not write (a full disk) is an error, exit 125, not a silent success",
          "[integration][options]") {
  for (const char* verb :
       {"profile check strict", "image ls --json", "doctor --json", "--help", "run --help", "--version"}) {
    auto r = RunProcess({"/bin/sh", "-c", NsboxBinary() + " " + verb + " > /dev/full"});
    INFO(verb << ": " << r.err);
    CHECK(r.exit_code == 125);
    CHECK(r.err.find("No space left on device") != std::string::npos);
  }
}

TEST_CASE("--pids takes decimal digits only: 010 is not octal 8, 0x10 not 16", "[integration][options]") {
  for (const char* value : {"010", "0x10", "-1", "1e3"}) {
    auto r = RunNsboxRaw({"run", "--pids", value, "--", "/bin/true"});
    INFO(value << ": " << r.err);
    CHECK(r.exit_code == 125);
    CHECK(r.err.find("is not a number of processes") != std::string::npos);
  }
}

TEST_CASE("CLI11's own parse errors are said in nsbox's words, naming the verb", "[integration][options]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      // Was "--memory: At Most 1 required but received 2".
      {{"run", "--memory", "1G", "--memory", "2G", "--", "/bin/true"},
       "nsbox: run: --memory given 2 times (give it once)\n"},
      // Was "The following argument was not expected: extra".
      {{"doctor", "extra"}, "nsbox: doctor: unexpected argument 'extra' (see nsbox doctor --help)\n"},
      // Was "--jobs: 1 required UINT missing".
      {{"batch", "jobs.jsonl", "--jobs"}, "nsbox: batch: --jobs: its value is missing\n"},
      // Was "session is required".
      {{"exec"}, "nsbox: exec: session is required (see nsbox exec --help)\n"},
      // Was "The following argument was not expected: --bogus" (mcp hands its options to session create).
      {{"mcp", "--memory", "1G", "--bogus"}, "nsbox mcp: unknown option '--bogus' (see nsbox mcp --help)\n"},
      {{"mcp", "--memory", "1G", "--memory", "2G"}, "nsbox mcp: --memory given 2 times (give it once)\n"},
  };
  for (const auto& [args, said] : cases) {
    auto r = RunNsboxRaw(args);
    INFO(args[0] << ": " << r.err);
    CHECK(r.exit_code == 125);
    CHECK(r.err == said);
  }
}

TEST_CASE("command-line mistakes are one line naming the word with its control bytes escaped",
          "[integration][options]") {
  // A failure of the run itself names the program as given, escaped: a newline in argv forged a second line.
  auto missing = RunNsboxRaw({"run", "--", "/no/such\nnsbox: ok: forged"});
  CHECK(missing.exit_code == 127);
  CHECK(missing.err ==
        "nsbox: setup_error: sandbox setup failed at execve(/no/such\\nnsbox: ok: forged): No such file "
        "or directory (ENOENT)\n");
  auto bogus = RunNsboxRaw({"--bogus"});
  CHECK(bogus.exit_code == 125);
  CHECK(bogus.err.starts_with("nsbox: unknown option '--bogus' (options come after the command: run, "));
  // CLI11's own conversion errors quote the value as given; a terminal must not get its escape sequences.
  auto owner = RunNsboxRaw({"session", "create", "--end-with-pid", "\x1b]0;x\x07"});
  CHECK(owner.exit_code == 125);
  CHECK(owner.err ==
        "nsbox: session create: --end-with-pid: '\\x1b]0;x\\x07' is not a whole number it takes (decimal digits, in "
        "its range)\n");
  auto cpus = RunNsboxRaw({"run", "--cpus", "1\x1b[31m", "--", "/bin/true"});
  CHECK(cpus.exit_code == 125);
  CHECK(cpus.err == "nsbox: --cpus: '1\\x1b[31m' is not a number of CPUs (a decimal such as 1.5)\n");
  // A plain decimal only: CLI11 took hexadecimal (0x10 CPUs), exponents and a leading blank.
  for (const char* odd : {"0x10", "0x1p-8", " 2", "1e3", "5.", "inf"}) {
    auto r = RunNsboxRaw({"run", "--cpus", odd, "--", "/bin/true"});
    INFO(odd << ": " << r.err);
    CHECK(r.exit_code == 125);
    CHECK(r.err.find("is not a number of CPUs (a decimal such as 1.5)") != std::string::npos);
  }
  auto command = RunNsboxRaw({"ru\x1b[2Jn"});
  CHECK(command.exit_code == 125);
  CHECK(command.err.starts_with("nsbox: unknown command 'ru\\x1b[2Jn' (commands: "));
  // A case's name comes from the cases file: the text report shows it escaped too.
  char path[] = "/tmp/nsbox-cases-name-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string line = "{\"expected_stdout\": \"x\", \"name\": \"\\u001b]0;title\\u0007\"}\n";
  REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  ::close(fd);
  auto cases = RunNsboxRaw({"run", "--cases", path, "--", "/bin/cat"});
  ::unlink(path);
  CHECK(cases.out ==
        "\\x1b]0;title\\x07: FAILED (ok): wrong output: it ends before line 1, expected \"x\"\n"
        "0/1 passed\n");
}
