// Agent flows end to end: the agent loop against the scripted provider (both wire formats), running real code in the
// local and nsbox runtimes.
#include <atomic>
#include <fstream>
#include <regex>
#include <thread>

#include <catch2/catch.hpp>

#include "src/agent/agent_loop.h"
#include "src/agent/tools.h"
#include "src/runtime/local_runtime.h"
#include "src/runtime/nsbox_runtime.h"
#include "tests/agent/agent_test_support.h"

using namespace nsbox;
using namespace nsbox::agent;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

const char* const kPrimePrompt = "What is the 1000th prime number? Verify by computing it.";

struct FlowRun {
  AgentOutcome outcome;
  std::chrono::milliseconds elapsed{0};
};

std::unique_ptr<runtime::SandboxRuntime> MakeTestRuntime(const std::string& name) {
  if (name == "local") return std::make_unique<runtime::LocalRuntime>();
  return std::make_unique<runtime::NsboxRuntime>();  // $NSBOX_BIN
}

// Whether this flow can run here; a flow on the nsbox runtime needs a working nsbox.
bool RuntimeReady(const std::string& runtime_name, const std::string& test_name) {
  if (runtime_name != "nsbox") return true;
  if (auto why = testing::NsboxRuntimeUnavailable()) {
    testing::NoteSkip(test_name + " [nsbox runtime]", *why);
    return false;
  }
  return true;
}

FlowRun RunFlow(const testing::FakeProviderServer& server, const std::string& provider_name,
                runtime::SandboxRuntime& rt, const std::string& prompt,
                const std::function<void(AgentConfig&)>& tweak = {}, const std::string& api_key = "") {
  ProviderConfig pc;
  pc.provider = provider_name;
  pc.base_url = server.BaseUrl(provider_name);
  pc.api_key = api_key.empty() ? testing::FakeProviderServer::Key(provider_name) : api_key;
  pc.system_prompt = SystemPrompt();
  pc.tools = CodeTools();
  auto provider = MakeProvider(pc);
  REQUIRE(provider.ok());
  AgentConfig config;
  config.run_timeout = 60s;
  config.tool_timeout = 20s;
  config.initial_backoff = 100ms;
  if (tweak) tweak(config);
  auto start = Clock::now();
  FlowRun run;
  run.outcome = RunAgent(**provider, rt, config, prompt);
  run.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return run;
}

// The content of every tool result the provider received, in order (both wire formats).
std::vector<std::string> ToolResultsSent(const json& requests) {
  std::vector<std::string> out;
  if (requests.empty()) return out;
  for (const auto& m : requests.back()["body"]["messages"]) {
    if (m["role"] == "tool") out.push_back(m["content"]);
    if (m["role"] == "user" && m["content"].is_array())
      for (const auto& b : m["content"]) out.push_back(b["content"]);
  }
  return out;
}

}  // namespace

TEST_CASE("the 1000th prime question is answered with 7919 computed by a real run") {
  testing::FakeProviderServer server;
  for (std::string provider : {"anthropic", "openai"}) {
    for (std::string rt_name : {"local", "nsbox"}) {
      DYNAMIC_SECTION(provider << " on the " << rt_name << " runtime") {
        if (!RuntimeReady(rt_name, "the 1000th prime question [" + provider + "]")) continue;
        auto rt = MakeTestRuntime(rt_name);
        FlowRun run = RunFlow(server, provider, *rt, kPrimePrompt);
        INFO(run.outcome.error);
        REQUIRE(run.outcome.end == AgentEnd::kAnswered);
        CHECK(run.outcome.answer == "The 1000th prime number is 7919 (I computed it by running the code).");
        CHECK(run.outcome.model_calls == 2);
        CHECK(run.outcome.tool_calls == 1);
        // The 7919 came from the program's stdout, as the provider received it.
        auto results = ToolResultsSent(server.Requests());
        REQUIRE(results.size() == 1);
        CHECK(results[0] == "exit_code: 0\nstdout:\n7919\nstderr: (empty)\n");
        CHECK(server.Problems().empty());
      }
    }
  }
}

TEST_CASE("a failing script is fixed after the model reads its traceback") {
  testing::FakeProviderServer server;
  for (std::string provider : {"anthropic", "openai"}) {
    for (std::string rt_name : {"local", "nsbox"}) {
      DYNAMIC_SECTION(provider << " on the " << rt_name << " runtime") {
        if (!RuntimeReady(rt_name, "a failing script is fixed [" + provider + "]")) continue;
        auto rt = MakeTestRuntime(rt_name);
        FlowRun run = RunFlow(server, provider, *rt, "Mean of my numbers? [scenario:fix]");
        INFO(run.outcome.error);
        REQUIRE(run.outcome.end == AgentEnd::kAnswered);
        CHECK(run.outcome.answer == "After fixing the typo, the mean is 18.0.");
        CHECK(run.outcome.model_calls == 3);
        auto results = ToolResultsSent(server.Requests());
        REQUIRE(results.size() == 2);
        CHECK(results[0].rfind("exit_code: 1\n", 0) == 0);
        CHECK(results[0].find("NameError: name 'numbrs' is not defined") != std::string::npos);
        CHECK(server.Problems().empty());
      }
    }
  }
}

TEST_CASE("an infinite loop is ended by the tool time-out and the model is told") {
  testing::FakeProviderServer server;
  for (std::string provider : {"anthropic", "openai"}) {
    for (std::string rt_name : {"local", "nsbox"}) {
      DYNAMIC_SECTION(provider << " on the " << rt_name << " runtime") {
        if (!RuntimeReady(rt_name, "an infinite loop is ended [" + provider + "]")) continue;
        auto rt = MakeTestRuntime(rt_name);
        FlowRun run = RunFlow(server, provider, *rt, "Spin forever [scenario:loop]",
                              [](AgentConfig& c) { c.tool_timeout = 1500ms; });
        INFO(run.outcome.error);
        REQUIRE(run.outcome.end == AgentEnd::kAnswered);
        CHECK(run.outcome.answer.rfind("The program never finished; the sandbox reported status: timeout", 0) == 0);
        CHECK(run.elapsed < 40s);  // not the default tool time-out's 60 s
        auto results = ToolResultsSent(server.Requests());
        REQUIRE(results.size() == 1);
        CHECK(results[0].rfind("exit_code: 124\nstatus: timeout", 0) == 0);
        CHECK(server.Problems().empty());
      }
    }
  }
}

TEST_CASE("an output flood reaches the model clipped to the budget, head and tail kept") {
  testing::FakeProviderServer server;
  for (std::string provider : {"anthropic", "openai"}) {
    for (std::string rt_name : {"local", "nsbox"}) {
      DYNAMIC_SECTION(provider << " on the " << rt_name << " runtime") {
        if (!RuntimeReady(rt_name, "an output flood is clipped [" + provider + "]")) continue;
        auto rt = MakeTestRuntime(rt_name);
        FlowRun run = RunFlow(server, provider, *rt, "Print a lot [scenario:flood]",
                              [](AgentConfig& c) { c.tool_output_budget_bytes = 4096; });
        INFO(run.outcome.error);
        REQUIRE(run.outcome.end == AgentEnd::kAnswered);
        INFO(run.outcome.answer);
        std::smatch m;
        std::regex pattern("it was (\\d+) bytes as I received it and its last line was (\\d+)");
        REQUIRE(std::regex_search(run.outcome.answer, m, pattern));
        CHECK(std::stoul(m[1]) < 4096 + 400);
        CHECK(m[2] == "199999");
        CHECK(run.outcome.answer.find("bytes of stdout cut here") != std::string::npos);
        CHECK(server.Problems().empty());
      }
    }
  }
}

TEST_CASE("a 429 is retried after its retry-after and the run then succeeds") {
  testing::FakeProviderServer server;
  for (std::string provider : {"anthropic", "openai"}) {
    for (std::string rt_name : {"local", "nsbox"}) {
      DYNAMIC_SECTION(provider << " on the " << rt_name << " runtime") {
        if (!RuntimeReady(rt_name, "a 429 is retried [" + provider + "]")) continue;
        auto rt = MakeTestRuntime(rt_name);
        FlowRun run = RunFlow(server, provider, *rt, "Six times seven [scenario:ratelimit] " + provider + rt_name);
        INFO(run.outcome.error);
        REQUIRE(run.outcome.end == AgentEnd::kAnswered);
        CHECK(run.outcome.answer == "6 * 7 = 42");
        CHECK(run.outcome.http_requests == 3);
        CHECK(run.outcome.tool_calls == 1);  // the retry did not run the code again
        CHECK(run.elapsed >= 1s);             // retry-after: 1 was honoured
        CHECK(server.Problems().empty());
      }
    }
  }
}

TEST_CASE("the model's control characters reach the log as \\xNN, not as terminal escape sequences") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  std::vector<std::string> lines;
  FlowRun run = RunFlow(server, "anthropic", rt, "x [scenario:escape]",
                        [&](AgentConfig& c) { c.log = [&](const std::string& line) { lines.push_back(line); }; });
  CHECK(run.outcome.end == AgentEnd::kAnswered);
  std::string all;
  for (const auto& line : lines) all += line + "\n";
  INFO(all);
  CHECK(all.find("model: look \\x1b]0;pwned\\x07 here") != std::string::npos);
  CHECK(all.find('\x1b') == std::string::npos);
}

TEST_CASE("a rejected API key (401) ends the run saying so, without retries") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  for (std::string provider : {"anthropic", "openai"}) {
    DYNAMIC_SECTION(provider) {
      char path[] = "/tmp/nsbox-transcript-XXXXXX";
      int fd = mkstemp(path);
      REQUIRE(fd >= 0);
      close(fd);
      FlowRun run = RunFlow(
          server, provider, rt, kPrimePrompt, [&](AgentConfig& c) { c.transcript_path = path; }, "wrong-key-sk-0123");
      std::ifstream in(path);
      std::string transcript((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      unlink(path);
      CHECK(run.outcome.end == AgentEnd::kAuthError);
      CHECK(run.outcome.error.rfind("API key rejected by " + provider + " (HTTP 401)", 0) == 0);
      // The server's message echoes the key (OpenAI's does): it is redacted in the error and the transcript.
      CHECK(run.outcome.error.find("wrong-key-sk-0123") == std::string::npos);
      CHECK(transcript.find("wrong-key-sk-0123") == std::string::npos);
      if (provider == "openai")
        CHECK(run.outcome.error.find("Incorrect API key provided: [redacted]") != std::string::npos);
      // A key found in "[redacted]" itself: the replacement went on for ever.
      FlowRun odd = RunFlow(server, provider, rt, kPrimePrompt, {}, "redacted");
      CHECK(odd.outcome.end == AgentEnd::kAuthError);
      CHECK(run.outcome.error.find(provider == "anthropic" ? "Check ANTHROPIC_API_KEY" : "Check OPENAI_API_KEY") !=
            std::string::npos);
      CHECK(run.outcome.http_requests == 1);
      CHECK(run.outcome.tool_calls == 0);
      CHECK(AgentExitCode(run.outcome.end) == 2);
    }
  }
}

TEST_CASE("several tool calls in one turn are all run and answered together, up to 16; the rest are not run") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  struct Turn {
    const char* prompt;
    const char* answer;
    int tool_calls;
  };
  for (const Turn& turn : {Turn{"Two at once [scenario:parallel]", "from python and from bash", 2},
                           Turn{"Twenty at once [scenario:many]", "ran 16, not run 4 of 20", 16}}) {
    for (std::string provider : {"anthropic", "openai"}) {
      DYNAMIC_SECTION(provider << ": " << turn.prompt) {
        FlowRun run = RunFlow(server, provider, rt, turn.prompt);
        INFO(run.outcome.error);
        REQUIRE(run.outcome.end == AgentEnd::kAnswered);
        CHECK(run.outcome.answer == turn.answer);
        CHECK(run.outcome.tool_calls == turn.tool_calls);
        CHECK(server.Problems().empty());
      }
    }
  }
}

TEST_CASE("a tool_use whose input is not an object is an error for the model and goes back as an empty input") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun run = RunFlow(server, "anthropic", rt, "x [scenario:stringinput]");
  INFO(run.outcome.error);
  REQUIRE(run.outcome.end == AgentEnd::kAnswered);  // the API refuses a history with a string input
  CHECK(run.outcome.answer == "told: error: the tool input was not a JSON object");
  CHECK(server.Problems().empty());
}

TEST_CASE("a conversation grown past 32 MiB ends the run before it is sent") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun run = RunFlow(server, "anthropic", rt, "x [scenario:bloat]");
  CHECK(run.outcome.end == AgentEnd::kProviderError);
  CHECK_THAT(run.outcome.error, Catch::Matches("the conversation is \\d+ bytes, more than the 33554432 bytes "
                                               "\\(32 MiB\\) a request may carry"));
  CHECK(run.outcome.model_calls == 3);  // 12, 24 and then 36 MiB of history
}

TEST_CASE("a key the provider echoes past the one-line clip is redacted whole, not cut into a prefix") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  for (std::string provider : {"anthropic", "openai"}) {
    const std::string key = testing::FakeProviderServer::Key(provider);
    FlowRun run = RunFlow(server, provider, rt, "x [scenario:echokey]");
    CHECK(run.outcome.end == AgentEnd::kProviderError);
    INFO(run.outcome.error);
    CHECK(run.outcome.error.find(key.substr(0, 6)) == std::string::npos);
    CHECK(run.outcome.error.find("xxxx") != std::string::npos);
    // In a 200's error object, and quoted by the parse error of a body that is not JSON.
    for (const char* scenario : {"x [scenario:echokey200]", "x [scenario:echokeyjson]"}) {
      FlowRun echoed = RunFlow(server, provider, rt, scenario);
      INFO(scenario << ": " << echoed.outcome.error);
      CHECK(echoed.outcome.end == AgentEnd::kMalformed);
      CHECK(echoed.outcome.error.find(key.substr(0, 6)) == std::string::npos);
    }
  }
}

TEST_CASE("a refusal and an error object in a 200 are reported with their words") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun refused = RunFlow(server, "openai", rt, "x [scenario:refusal]");
  CHECK(refused.outcome.end == AgentEnd::kMalformed);
  CHECK(refused.outcome.error == "the model refused to answer: I cannot help with that.");
  for (std::string provider : {"anthropic", "openai"}) {
    FlowRun run = RunFlow(server, provider, rt, "x [scenario:error200]");
    CHECK(run.outcome.end == AgentEnd::kMalformed);
    CHECK_THAT(run.outcome.error, Catch::EndsWith("an error object in a 200 response: overloaded_error: Overloaded, "
                                                  "try later"));
  }
}

TEST_CASE("a repeated tool call id is answered from memory, never run twice") {
  testing::FakeProviderServer server;
  for (std::string provider : {"anthropic", "openai"}) {
    DYNAMIC_SECTION(provider) {
      runtime::LocalRuntime rt;  // keeps files between calls, so a second run would count 2
      FlowRun run = RunFlow(server, provider, rt, "Count runs [scenario:repeat]");
      INFO(run.outcome.error);
      REQUIRE(run.outcome.end == AgentEnd::kAnswered);
      CHECK(run.outcome.answer ==
            "second answer: This tool call id was already executed; it was not run again. Its result was: | runs: 1");
      CHECK(server.Problems().empty());
    }
  }
}

TEST_CASE("tool arguments the model got wrong are explained back to it") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun run = RunFlow(server, "openai", rt, "Bad call [scenario:badargs]");
  REQUIRE(run.outcome.end == AgentEnd::kAnswered);
  CHECK(run.outcome.answer == "told: error: execute_code needs a string \"language\" argument");
}

TEST_CASE("a malformed response ends the run with an error naming what is missing") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun a = RunFlow(server, "anthropic", rt, "x [scenario:malformed]");
  CHECK(a.outcome.end == AgentEnd::kMalformed);
  CHECK(a.outcome.error == "malformed Anthropic response: no \"content\" array");
  FlowRun o = RunFlow(server, "openai", rt, "x [scenario:malformed]");
  CHECK(o.outcome.end == AgentEnd::kMalformed);
  CHECK(o.outcome.error == "malformed OpenAI response: no \"choices\" array with a choice in it");
}

TEST_CASE("a response nested too deep to copy safely is malformed, not a crash") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  for (const char* provider : {"anthropic", "openai"}) {
    FlowRun run = RunFlow(server, provider, rt, "x [scenario:deep]");
    CHECK(run.outcome.end == AgentEnd::kMalformed);
    CHECK(run.outcome.error.find("nests deeper than 128 levels") != std::string::npos);
  }
}

TEST_CASE("5xx answers are retried with backoff") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun run = RunFlow(server, "anthropic", rt, kPrimePrompt + std::string(" [scenario:flaky]"));
  // The flaky prompt is not the prime prompt, so the model simply answers once it gets through.
  REQUIRE(run.outcome.end == AgentEnd::kAnswered);
  CHECK(run.outcome.http_requests == 3);
}

TEST_CASE("a retry-after beyond the run's time-out gives up at once, saying why") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun run = RunFlow(server, "openai", rt, "x [scenario:overloaded]", [](AgentConfig& c) { c.run_timeout = 30s; });
  CHECK(run.outcome.end == AgentEnd::kTimeout);
  CHECK(run.outcome.error ==
        "openai (HTTP 429: rate_limit_error: come back in an hour), and waiting 3600000 ms to retry "
        "would pass the run's time-out");
  CHECK(run.elapsed < 20s);  // gave up at once: neither the hour nor the run's 30 s
}

TEST_CASE("the turn time-out ends a model call that hangs") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun run = RunFlow(server, "anthropic", rt, "x [scenario:slow]", [](AgentConfig& c) { c.turn_timeout = 1s; });
  CHECK(run.outcome.end == AgentEnd::kTimeout);
  CHECK(run.outcome.error == "the model did not answer within the turn time-out of 1s (--turn-timeout)");
}

TEST_CASE("the run time-out is the tightest limit on a tool call") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun run = RunFlow(server, "anthropic", rt, "Spin forever [scenario:loop]", [](AgentConfig& c) {
    c.run_timeout = 2s;
    c.tool_timeout = 60s;
  });
  // The loop is cut by the run's deadline; the run then ends as a time-out, not after 60 s.
  CHECK(run.outcome.end == AgentEnd::kTimeout);
  CHECK(run.elapsed < 30s);
}

TEST_CASE("max steps ends a model that never stops calling tools") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  FlowRun run = RunFlow(server, "anthropic", rt, "Again [scenario:forever]", [](AgentConfig& c) { c.max_steps = 3; });
  CHECK(run.outcome.end == AgentEnd::kMaxSteps);
  CHECK(run.outcome.error == "the model gave no final answer within 3 steps (--max-steps)");
  CHECK(run.outcome.tool_calls == 2);  // the third step's call is not run: its result could never be read
  CHECK(run.outcome.model_calls == 3);
  CHECK(server.Problems().empty());
}

TEST_CASE("a runtime that cannot run code at all ends the run after three failed calls") {
  testing::FakeProviderServer server;
  runtime::NsboxRuntimeOptions options;
  options.nsbox_bin = "/nonexistent/nsbox";
  runtime::NsboxRuntime rt(options);
  FlowRun run = RunFlow(server, "openai", rt, "Again [scenario:forever]");
  CHECK(run.outcome.end == AgentEnd::kRuntimeError);
  CHECK(run.outcome.error.rfind("the nsbox runtime could not run code: starting nsbox session create: "
                                "posix_spawn(/nonexistent/nsbox): No such file or directory (ENOENT)", 0) == 0);
  CHECK(run.outcome.tool_calls == 3);
  CHECK(AgentExitCode(run.outcome.end) == 125);
}

TEST_CASE("cancellation stops a running tool call and the run at once") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(1500ms);
    cancel = true;
  });
  FlowRun run =
      RunFlow(server, "openai", rt, "Spin forever [scenario:loop]", [&](AgentConfig& c) { c.cancel = &cancel; });
  canceller.join();
  CHECK(run.outcome.end == AgentEnd::kCancelled);
  CHECK(AgentExitCode(run.outcome.end) == 130);
  CHECK(run.elapsed < 30s);  // not the tool time-out's 60 s
}

TEST_CASE("the transcript has every request, response and tool call as JSONL, and no API key") {
  testing::FakeProviderServer server;
  runtime::LocalRuntime rt;
  char path[] = "/tmp/nsbox-transcript-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  FlowRun run = RunFlow(server, "anthropic", rt, kPrimePrompt, [&](AgentConfig& c) { c.transcript_path = path; });
  REQUIRE(run.outcome.end == AgentEnd::kAnswered);
  std::ifstream in(path);
  std::vector<std::string> kinds;
  std::string all;
  json last;
  for (std::string line; std::getline(in, line);) {
    all += line;
    last = json::parse(line);
    kinds.push_back(last["kind"]);
  }
  CHECK(last["outcome"] == "answered");
  unlink(path);
  CHECK(kinds == std::vector<std::string>{"start", "request", "response", "tool_call", "tool_result", "request",
                                          "response", "end"});
  CHECK(all.find("test-anthropic-key") == std::string::npos);
  CHECK(all.find("x-api-key: [redacted]") != std::string::npos);
  CHECK(all.find("7919") != std::string::npos);
}
