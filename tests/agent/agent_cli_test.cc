// The `nsbox agent` verb as a user runs it ($NSBOX_BIN): the answer on stdout, exit codes, key errors, and the sandbox
// ended on Ctrl-C and time-out.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include <catch2/catch.hpp>

#include "src/runtime/subprocess.h"
#include "tests/agent/agent_test_support.h"

using namespace nsbox;
using namespace nsbox::runtime;
using namespace std::chrono_literals;

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// Runs argv (after an optional wrapper) with a clean environment plus the given variables.
CliRun RunCli(std::vector<std::string> argv, const std::vector<std::string>& env) {
  SubprocessSpec spec;
  spec.argv = std::move(argv);
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"};
  spec.env.insert(spec.env.end(), env.begin(), env.end());
  spec.deadline = std::chrono::steady_clock::now() + 120s;
  auto outcome = RunSubprocess(spec);
  REQUIRE(outcome.ok());
  return {outcome->exited ? outcome->exit_code : 128 + outcome->signal, outcome->stdout_data, outcome->stderr_data};
}

std::string NsboxBin() {
  const char* bin = getenv("NSBOX_BIN");
  return bin ? bin : "";
}

bool CliReady(const std::string& test_name) {
  if (NsboxBin().empty() || access(NsboxBin().c_str(), X_OK) != 0) {
    testing::NoteSkip(test_name, "NSBOX_BIN is not set to an nsbox binary");
    return false;
  }
  return true;
}

std::vector<std::string> ReadLogLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// An empty file of this test's own under /tmp; the test removes it.
std::string TempFile() {
  char path[] = "/tmp/nsbox-agent-cli-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  return path;
}

const char* const kPrime = "What is the 1000th prime number? Verify by computing it.";

}  // namespace

TEST_CASE("nsbox agent prints the answer computed in the default nsbox runtime and exits 0") {
  if (!CliReady("nsbox agent default runtime")) return;
  if (auto why = testing::NsboxRuntimeUnavailable()) return testing::NoteSkip("nsbox agent default runtime", *why);
  testing::FakeProviderServer server;
  CliRun run = RunCli(
      {NsboxBin(), "agent", "--provider", "openai", kPrime},
      {"OPENAI_API_KEY=test-openai-key", "OPENAI_BASE_URL=" + server.BaseUrl("openai"), "NSBOX_BIN=" + NsboxBin()});
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out == "The 1000th prime number is 7919 (I computed it by running the code).\n");
  CHECK(run.err.empty());
}

TEST_CASE("nsbox agent fails with 125 when its answer cannot be written") {
  if (!CliReady("nsbox agent answer to a full disk")) return;
  if (auto why = testing::NsboxRuntimeUnavailable())
    return testing::NoteSkip("nsbox agent answer to a full disk", *why);
  testing::FakeProviderServer server;
  // /dev/full: every write fails with ENOSPC; the answer, the run's whole product, would be lost without a word.
  CliRun run = RunCli(
      {"/bin/sh", "-c", "exec \"$0\" agent --provider openai \"$1\" > /dev/full", NsboxBin(), kPrime},
      {"OPENAI_API_KEY=test-openai-key", "OPENAI_BASE_URL=" + server.BaseUrl("openai"), "NSBOX_BIN=" + NsboxBin()});
  INFO(run.err);
  CHECK(run.exit_code == 125);
  CHECK(run.err == "nsbox agent: writing the answer: No space left on device (ENOSPC)\n");
}

TEST_CASE("nsbox agent --runtime local warns loudly that nothing is sandboxed") {
  if (!CliReady("nsbox agent --runtime local")) return;
  testing::FakeProviderServer server;
  CliRun run = RunCli({NsboxBin(), "agent", "--runtime", "local", "--base-url", server.BaseUrl("anthropic"), kPrime},
                      {"ANTHROPIC_API_KEY=test-anthropic-key"});
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("7919") != std::string::npos);
  CHECK(run.err.find("WARNING: --runtime local runs the model's code directly on this host, WITHOUT ANY SANDBOX") !=
        std::string::npos);
}

TEST_CASE("nsbox agent says the API key was rejected and exits 2") {
  if (!CliReady("nsbox agent key rejected")) return;
  testing::FakeProviderServer server;
  CliRun run = RunCli({NsboxBin(), "agent", "--runtime", "local", "--base-url", server.BaseUrl("anthropic"), kPrime},
                      {"ANTHROPIC_API_KEY=sk-wrong"});
  CHECK(run.exit_code == 2);
  CHECK(run.out.empty());
  CHECK(run.err.find("nsbox agent: API key rejected by anthropic (HTTP 401): authentication_error: invalid x-api-key. "
                     "Check ANTHROPIC_API_KEY.") != std::string::npos);
}

TEST_CASE("nsbox agent without any key or endpoint says which variable to set") {
  if (!CliReady("nsbox agent without key")) return;
  CliRun run = RunCli({NsboxBin(), "agent", "hello"}, {});
  CHECK(run.exit_code == 2);
  CHECK(run.err ==
        "nsbox agent: no API key: set ANTHROPIC_API_KEY (Anthropic) or OPENAI_API_KEY (OpenAI), or give "
        "--base-url (or OPENAI_BASE_URL) for an OpenAI-compatible server that needs no key\n");
  // A provider chosen by name is told its own variable.
  CliRun openai = RunCli({NsboxBin(), "agent", "--provider", "openai", "hello"}, {});
  CHECK(openai.exit_code == 2);
  CHECK(openai.err == "nsbox agent: OPENAI_API_KEY is not set (or give --base-url for a server that needs no key)\n");
}

TEST_CASE("nsbox agent takes run's sandbox options: --workspace binds the directory the model's code reads") {
  if (!CliReady("nsbox agent --workspace")) return;
  if (auto why = testing::NsboxRuntimeUnavailable()) return testing::NoteSkip("nsbox agent --workspace", *why);
  char dir[] = "/tmp/nsbox-agent-ws-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  REQUIRE(chmod(dir, 0777) == 0);
  { std::ofstream(std::string(dir) + "/marker.txt") << "from-the-host"; }
  testing::FakeProviderServer server;
  CliRun run = RunCli(
      {NsboxBin(), "agent", "--provider", "openai", "--workspace", dir, "--memory", "256M", "--pids", "64", "--network",
       "none", "Read it [scenario:workspace]"},
      {"OPENAI_API_KEY=test-openai-key", "OPENAI_BASE_URL=" + server.BaseUrl("openai"), "NSBOX_BIN=" + NsboxBin()});
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out == "the workspace says: from-the-host /workspace\n");
  std::string rm = std::string("rm -rf ") + dir;
  CHECK(system(rm.c_str()) == 0);
}

TEST_CASE("nsbox agent checks sandbox options as session create does, and refuses them for other runtimes") {
  if (!CliReady("nsbox agent sandbox options")) return;
  CliRun bad = RunCli({NsboxBin(), "agent", "--memory", "lots", "hello"}, {"ANTHROPIC_API_KEY=x"});
  CHECK(bad.exit_code == 125);
  CHECK(bad.err.rfind("nsbox agent: --memory: invalid size 'lots'", 0) == 0);
  CliRun rootfs = RunCli({NsboxBin(), "agent", "--rootfs", "/nonexistent-root", "hello"}, {"ANTHROPIC_API_KEY=x"});
  CHECK(rootfs.exit_code == 125);
  CHECK(rootfs.err.find("--rootfs '/nonexistent-root': no such directory") != std::string::npos);
  CliRun local = RunCli({NsboxBin(), "agent", "--runtime", "local", "--cpus", "0.5", "hello"}, {"ANTHROPIC_API_KEY=x"});
  CHECK(local.exit_code == 125);
  CHECK(local.err == "nsbox agent: --cpus is an nsbox sandbox option; --runtime local does not take it\n");
}

TEST_CASE("nsbox agent rejects a bad duration with a one-line error") {
  if (!CliReady("nsbox agent bad duration")) return;
  CliRun run = RunCli({NsboxBin(), "agent", "--timeout", "soon", "hello"}, {"ANTHROPIC_API_KEY=x"});
  CHECK(run.exit_code == 125);
  CHECK(run.err.rfind("nsbox agent: --timeout: ", 0) == 0);
}

TEST_CASE("Ctrl-C (or a hang-up) ends nsbox agent with 130 and removes its sandbox session") {
  if (!CliReady("Ctrl-C ends nsbox agent")) return;
  const char* signal_name = GENERATE("INT", "HUP");
  INFO("SIG" << signal_name);
  testing::FakeProviderServer server;
  const std::string log = TempFile();
  // The stand-in nsbox has sessions and logs create/exec/rm; the signal arrives once the loop's exec spins (a shell
  // waits for its line in the log, at most 30 s).
  CliRun run = RunCli({"/bin/sh", "-c",
                       "\"$0\" agent --provider anthropic --base-url \"$1\" 'Spin forever [scenario:loop]' & pid=$!; "
                       "i=0; until grep -q '^exec ' \"$FAKE_NSBOX_LOG\" 2>/dev/null || [ $i -ge 600 ]; do sleep 0.05; "
                       "i=$((i+1)); done; kill -\"$2\" $pid; wait $pid",
                       NsboxBin(), server.BaseUrl("anthropic"), signal_name},
                      {"ANTHROPIC_API_KEY=test-anthropic-key",
                       "NSBOX_BIN=" + testing::SourcePath("tests/agent/fake_nsbox.py"), "FAKE_NSBOX_LOG=" + log});
  CHECK(run.exit_code == 130);
  CHECK(run.err == "nsbox agent: interrupted\n");
  auto lines = ReadLogLines(log);
  unlink(log.c_str());
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].rfind("create ", 0) == 0);
  CHECK(lines[2] == "rm " + lines[0].substr(7, lines[0].find(' ', 7) - 7));
}

TEST_CASE("the run time-out ends nsbox agent with 124 and removes its sandbox session") {
  if (!CliReady("run time-out ends nsbox agent")) return;
  testing::FakeProviderServer server;
  const std::string log = TempFile();
  CliRun run = RunCli({NsboxBin(), "agent", "--timeout", "5s", "--base-url", server.BaseUrl("anthropic"),
                       "Spin forever [scenario:loop]"},
                      {"ANTHROPIC_API_KEY=test-anthropic-key",
                       "NSBOX_BIN=" + testing::SourcePath("tests/agent/fake_nsbox.py"), "FAKE_NSBOX_LOG=" + log});
  CHECK(run.exit_code == 124);
  CHECK(run.err == "nsbox agent: the run's time-out of 5s (--timeout) passed\n");
  auto lines = ReadLogLines(log);
  unlink(log.c_str());
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.back().rfind("rm ", 0) == 0);
}

TEST_CASE("nsbox agent refuses a model response over its size limit with one line and exit 1") {
  if (!CliReady("nsbox agent huge response")) return;
  testing::FakeProviderServer server;
  CliRun run = RunCli({NsboxBin(), "agent", "--runtime", "local", "--base-url", server.BaseUrl("anthropic"),
                       "Answer at length [scenario:huge]"},
                      {"ANTHROPIC_API_KEY=test-anthropic-key"});
  CHECK(run.exit_code == 1);
  CHECK(run.out.empty());
  // After the --runtime local warning, one line.
  CHECK_THAT(run.err, Catch::EndsWith("\nnsbox agent: POST " + server.BaseUrl("anthropic") +
                                      "/v1/messages: the response body is larger than nsbox's limit of 32 MiB\n"));
}

TEST_CASE("nsbox agent refuses an empty base URL, given or in the environment, instead of using the public API") {
  if (!CliReady("nsbox agent empty base URL")) return;
  CliRun flag = RunCli({NsboxBin(), "agent", "--base-url", "", "hello"}, {"ANTHROPIC_API_KEY=x"});
  CHECK(flag.exit_code == 125);
  CHECK(flag.err ==
        "nsbox agent: --base-url is empty: give the endpoint's URL, or leave the option out for the public API\n");
  CliRun anthropic = RunCli({NsboxBin(), "agent", "hello"}, {"ANTHROPIC_API_KEY=x", "ANTHROPIC_BASE_URL="});
  CHECK(anthropic.exit_code == 125);
  CHECK(anthropic.err ==
        "nsbox agent: ANTHROPIC_BASE_URL is set but empty: give the endpoint's URL, or unset it for the public API\n");
  CliRun openai = RunCli({NsboxBin(), "agent", "hello"}, {"OPENAI_API_KEY=x", "OPENAI_BASE_URL="});
  CHECK(openai.exit_code == 125);
  CHECK(openai.err ==
        "nsbox agent: OPENAI_BASE_URL is set but empty: give the endpoint's URL, or unset it for the public API\n");
  CliRun no_host = RunCli({NsboxBin(), "agent", "--base-url", "http://", "hello"}, {"ANTHROPIC_API_KEY=x"});
  CHECK(no_host.exit_code == 125);
  CHECK(no_host.err == "nsbox agent: base URL \"http://\" names no host\n");
}

TEST_CASE("nsbox agent --verbose prints the code's output to stderr as it runs, before the result line") {
  if (!CliReady("nsbox agent --verbose output")) return;
  if (auto why = testing::NsboxRuntimeUnavailable()) return testing::NoteSkip("nsbox agent --verbose output", *why);
  testing::FakeProviderServer server;
  CliRun run = RunCli(
      {NsboxBin(), "agent", "--provider", "openai", "--verbose", kPrime},
      {"OPENAI_API_KEY=test-openai-key", "OPENAI_BASE_URL=" + server.BaseUrl("openai"), "NSBOX_BIN=" + NsboxBin()});
  INFO(run.err);
  CHECK(run.exit_code == 0);
  // The program's own line, raw (the log lines all start with "nsbox agent: "), before the call's result line.
  const size_t output = run.err.find("\n7919\n");
  const size_t result = run.err.find("nsbox agent: result: ");
  CHECK(output != std::string::npos);
  CHECK(result != std::string::npos);
  CHECK(output < result);
}

TEST_CASE("nsbox agent --verbose shows the code's control characters as \\xNN; a piped answer keeps them") {
  if (!CliReady("nsbox agent --verbose escapes")) return;
  if (auto why = testing::NsboxRuntimeUnavailable()) return testing::NoteSkip("nsbox agent --verbose escapes", *why);
  testing::FakeProviderServer server;
  CliRun run = RunCli(
      {NsboxBin(), "agent", "--provider", "openai", "--verbose", "x [scenario:escapeout]"},
      {"OPENAI_API_KEY=test-openai-key", "OPENAI_BASE_URL=" + server.BaseUrl("openai"), "NSBOX_BIN=" + NsboxBin()});
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.err.find("\\x1b]0;TITLE\\x07 ok") != std::string::npos);
  CHECK(run.err.find('\x1b') == std::string::npos);
  // stdout is a pipe here: the answer is data, as the model wrote it (a terminal would get it escaped).
  CHECK(run.out == "it said \x1b]0;TITLE\x07 ok\n");
}

TEST_CASE("nsbox agent keeps a base URL's password out of --verbose and the transcript") {
  if (!CliReady("nsbox agent URL credentials")) return;
  testing::FakeProviderServer server;
  const std::string transcript = TempFile();
  std::string url = server.BaseUrl("anthropic");
  url.insert(url.find("//") + 2, "user:s3cr3t@");
  CliRun run = RunCli({NsboxBin(), "agent", "--runtime", "local", "--verbose", "--transcript", transcript, "--base-url",
                       url, kPrime},
                      {"ANTHROPIC_API_KEY=test-anthropic-key"});
  std::ifstream in(transcript);
  std::string logged((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(transcript.c_str());
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.err.find("user:[redacted]@127.0.0.1") != std::string::npos);
  CHECK(run.err.find("s3cr3t") == std::string::npos);
  CHECK(logged.find("\"url\":\"http://user:[redacted]@127.0.0.1") != std::string::npos);
  CHECK(logged.find("s3cr3t") == std::string::npos);
  // A server that echoes the credentials (curl sends them as Basic auth) in its error message.
  std::string echoing = server.BaseUrl("anthropic");
  echoing.insert(echoing.find("//") + 2, "user:long-s3cr3t-password@");
  CliRun echoed = RunCli({NsboxBin(), "agent", "--runtime", "local", "--verbose", "--transcript", transcript,
                          "--base-url", echoing, "x [scenario:echoauth]"},
                         {"ANTHROPIC_API_KEY=test-anthropic-key"});
  std::ifstream again(transcript);
  std::string logged_again((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  unlink(transcript.c_str());
  CHECK(echoed.exit_code == 1);
  CHECK(echoed.err.find("no account for [redacted]") != std::string::npos);
  CHECK(echoed.err.find("s3cr3t") == std::string::npos);
  CHECK(logged_again.find("s3cr3t") == std::string::npos);
}

TEST_CASE("nsbox agent fails with 125 when its transcript cannot be opened or written") {
  if (!CliReady("nsbox agent transcript failure")) return;
  testing::FakeProviderServer server;
  CliRun missing = RunCli({NsboxBin(), "agent", "--runtime", "local", "--transcript", "/nonexistent/t", "--base-url",
                           server.BaseUrl("anthropic"), kPrime},
                          {"ANTHROPIC_API_KEY=test-anthropic-key"});
  CHECK(missing.exit_code == 125);
  CHECK_THAT(
      missing.err,
      Catch::EndsWith("\nnsbox agent: open(/nonexistent/t) for the transcript: No such file or directory (ENOENT)\n"));
  // /dev/full: opened fine, every write fails with ENOSPC; the run must not answer as if the transcript were kept.
  CliRun full = RunCli({NsboxBin(), "agent", "--runtime", "local", "--transcript", "/dev/full", "--base-url",
                        server.BaseUrl("anthropic"), kPrime},
                       {"ANTHROPIC_API_KEY=test-anthropic-key"});
  CHECK(full.exit_code == 125);
  CHECK(full.out.empty());
  CHECK_THAT(full.err,
             Catch::EndsWith("\nnsbox agent: writing the transcript /dev/full: No space left on device (ENOSPC)\n"));
}
