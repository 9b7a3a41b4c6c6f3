// The `nsbox agent` verb: a prompt in, an LLM that runs real code in a SandboxRuntime, the final answer out.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/executor.h"
#include "sandbox/spec/units.h"
#include "src/agent/agent_loop.h"
#include "src/agent/provider.h"
#include "src/agent/tools.h"
#include "src/cli/commands.h"
#include "src/cli/sandbox_options.h"
#include "src/runtime/runtime_factory.h"

namespace nsbox::cli {

namespace {

// Set by SIGINT/SIGTERM/SIGHUP (a closed terminal); the loop, the HTTP client and the runtime poll it and wind down,
// and the runtime's session is removed on the way out.
std::atomic<bool> g_agent_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

// A second Ctrl-C leaves at once; the session still ends by itself (its --max-lifetime).
void OnSignal(int) {
  if (g_agent_interrupted.exchange(true)) _exit(130);
}

struct AgentOptions {
  std::string provider;
  std::string model;
  std::string base_url;
  bool base_url_given = false;  // even as '': not the same as left out
  std::string runtime = "nsbox";
  int max_steps = 10;
  std::string timeout = "10m";
  std::string turn_timeout = "3m";
  std::string tool_timeout = "60s";
  std::string output_budget = "16K";
  std::string output_limit = "1M";
  std::string transcript;
  bool verbose = false;
  std::string prompt;
  SandboxOptions sandbox;                 // parsed by the parser run and session create use
  std::vector<std::string> sandbox_args;  // those given, handed to `session create`
};

std::string Env(const std::string& name) {
  const char* value = getenv(name.c_str());
  return value ? value : "";
}

int Fail(const std::string& message, int code) {
  fmt::print(stderr, "nsbox agent: {}\n", message);
  return code;
}

int RunAgentCommand(const AgentOptions& o) {
  // Checked as `nsbox session create` checks them, once, before any model is asked.
  if (!o.sandbox_args.empty() && o.runtime != "nsbox")
    return Fail(
        fmt::format("{} is an nsbox sandbox option; --runtime {} does not take it", o.sandbox_args.front(), o.runtime),
        kExitNsboxFailure);
  if (Status s = CheckSessionCreateArgs(o.sandbox_args, "nsbox agent"); !s.ok())
    return Fail(InCliTerms(s.message()), kExitNsboxFailure);
  agent::AgentConfig config;
  config.max_steps = o.max_steps;
  struct Duration {
    const std::string& text;
    const char* flag;
    std::chrono::milliseconds* out;
  };
  for (const Duration& d : {Duration{o.timeout, "--timeout", &config.run_timeout},
                            Duration{o.turn_timeout, "--turn-timeout", &config.turn_timeout},
                            Duration{o.tool_timeout, "--tool-timeout", &config.tool_timeout}}) {
    auto parsed = ParseDuration(d.text);
    if (!parsed.ok()) return Fail(fmt::format("{}: {}", d.flag, parsed.status().message()), kExitNsboxFailure);
    *d.out = *parsed;
  }
  auto budget = ParseSize(o.output_budget);
  if (!budget.ok()) return Fail("--output-budget: " + budget.status().message(), kExitNsboxFailure);
  config.tool_output_budget_bytes = *budget;
  auto limit = ParseSize(o.output_limit);
  if (!limit.ok()) return Fail("--output-limit: " + limit.status().message(), kExitNsboxFailure);
  if (std::string why = CheckOutputLimit(*limit); !why.empty())
    return Fail("--output-limit: " + why, kExitNsboxFailure);
  config.sandbox_output_limit_bytes = *limit;
  config.transcript_path = o.transcript;
  config.cancel = &g_agent_interrupted;
  if (o.verbose) config.log = [](const std::string& line) { fmt::print(stderr, "nsbox agent: {}\n", line); };
  // The code's own output as it runs (the nsbox runtime streams it; the result line follows), its control characters
  // shown, not acted on: the code is the model's, the terminal the operator's.
  if (o.verbose)
    config.tool_output = [](int, std::string_view text) { fmt::print(stderr, "{}", agent::TerminalSafe(text)); };

  // Provider: the flag, else the one whose key is set.
  std::string provider = o.provider;
  if (provider.empty())
    provider = !Env("ANTHROPIC_API_KEY").empty() ? "anthropic"
               : (!Env("OPENAI_API_KEY").empty() || !Env("OPENAI_BASE_URL").empty()) ? "openai"
                                                                                     : "anthropic";
  agent::ProviderConfig provider_config;
  provider_config.provider = provider;
  provider_config.model = o.model;
  auto base_url = agent::ChooseBaseUrl(provider, o.base_url_given ? std::optional(o.base_url) : std::nullopt,
                                       getenv(agent::BaseUrlVariable(provider).c_str()));
  if (!base_url.ok()) return Fail(base_url.status().message(), kExitNsboxFailure);
  provider_config.base_url = *base_url;
  provider_config.api_key = Env(agent::ApiKeyVariable(provider));
  provider_config.system_prompt = agent::SystemPrompt();
  provider_config.tools = agent::CodeTools();
  // A local OpenAI-compatible server may need no key; the public endpoints always do.
  if (provider_config.api_key.empty() && provider_config.base_url.empty())
    return Fail(o.provider.empty()
                    ? std::string("no API key: set ANTHROPIC_API_KEY (Anthropic) or OPENAI_API_KEY (OpenAI), or give "
                                  "--base-url (or OPENAI_BASE_URL) for an OpenAI-compatible server that needs no key")
                    : fmt::format("{} is not set (or give --base-url for a server that needs no key)",
                                  agent::ApiKeyVariable(provider)),
                agent::AgentExitCode(agent::AgentEnd::kAuthError));
  auto made_provider = agent::MakeProvider(provider_config);
  if (!made_provider.ok()) return Fail(made_provider.status().message(), kExitNsboxFailure);

  if (o.runtime == "local")
    fmt::print(stderr, "nsbox agent: WARNING: --runtime local runs the model's code directly on this host, "
                       "WITHOUT ANY SANDBOX; use it only for trusted work\n");
  runtime::RuntimeConfig runtime_config;
  // The session also ends by itself shortly after the run's time-out, even if nsbox is SIGKILLed.
  runtime_config.max_lifetime = config.run_timeout + std::chrono::seconds(60);
  runtime_config.log = config.log;
  runtime_config.sandbox_args = o.sandbox_args;
  auto made_runtime = runtime::MakeRuntime(o.runtime, runtime_config);
  if (!made_runtime.ok()) return Fail(made_runtime.status().message(), kExitNsboxFailure);
  std::unique_ptr<runtime::SandboxRuntime> sandbox = std::move(*made_runtime);

  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (config.log)
    config.log(fmt::format("provider {} at {}, model {}, runtime {}", provider,
                           agent::RedactUrl((*made_provider)->url()), (*made_provider)->model(), sandbox->name()));
  agent::AgentOutcome outcome = agent::RunAgent(**made_provider, *sandbox, config, o.prompt);
  // The conversation is over however it ended: end its sandbox now, before printing.
  sandbox->close();
  if (outcome.end == agent::AgentEnd::kAnswered) {
    // The answer is the run's whole product: one that cannot be written (a full disk) fails the run.
    // To a terminal its control characters are shown, not acted on (an answer may carry an escape sequence the code
    // printed: a new window title, a clipboard write); to a file or a pipe it goes as the model wrote it.
    const std::string answer = ::isatty(1) ? agent::TerminalSafe(outcome.answer) : outcome.answer;
    if (int err = WriteAll(1, answer + "\n"); err != 0)
      return Fail(fmt::format("writing the answer: {} ({})", std::strerror(err), ErrnoName(err)), kExitNsboxFailure);
    return 0;
  }
  return Fail(outcome.error, agent::AgentExitCode(outcome.end));
}

}  // namespace

void RegisterAgent(CLI::App& app, ExitCode& exit_code) {
  auto options = std::make_shared<AgentOptions>();
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "Answer PROMPT with an LLM that runs real code in a sandbox instead of guessing (tools execute_code and "
      "run_python). Keys from ANTHROPIC_API_KEY / OPENAI_API_KEY, endpoints from --base-url or ANTHROPIC_BASE_URL / "
      "OPENAI_BASE_URL (any OpenAI-compatible server works). Exit codes: 0 answered, 1 model/provider failure, "
      "2 API key missing or rejected, 124 time-out, 125 bad option, runtime or transcript failure, 130 interrupted.");
  cmd->add_option("--provider", options->provider, "anthropic or openai (default: the one whose API key is set)")
      ->check(CLI::IsMember({"anthropic", "openai"}));
  cmd->add_option("--model", options->model, "model name (default: claude-sonnet-4-5 / gpt-4o)");
  cmd->add_option("--base-url", options->base_url, "API endpoint (Anthropic: without /v1; OpenAI: with /v1)");
  cmd->add_option("--runtime", options->runtime,
                  "nsbox (default: one sandbox session per conversation), local (NO ISOLATION: runs code directly "
                  "on this host), docker (docker run --rm --network none …)")
      ->check(CLI::IsMember({"nsbox", "local", "docker"}));
  cmd->add_option("--max-steps", options->max_steps, "model calls at most, the final answer included (default 10)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--timeout", options->timeout, "time-out of the whole run (default 10m)");
  cmd->add_option("--turn-timeout", options->turn_timeout,
                  "time-out of each model call, retries included (default 3m)");
  cmd->add_option("--tool-timeout", options->tool_timeout, "wall-clock limit of each code execution (default 60s)");
  cmd->add_option("--output-budget", options->output_budget,
                  "bytes of stdout + stderr the model sees per tool call, head and tail (default 16K)");
  cmd->add_option("--output-limit", options->output_limit, "bytes the sandbox keeps per stream (default 1M)");
  cmd->add_option("--transcript", options->transcript, "write every request, response and tool call to FILE as JSONL");
  cmd->add_flag("--verbose", options->verbose,
                "print each step, tool call and result to stderr, and the code's output as it runs");
  cmd->add_option("PROMPT", options->prompt, "the question or task")->required();
  // The sandbox's isolation and limits: the same options, and the same parser, as run and session create.
  AddSandboxOptions(cmd, options->sandbox);
  cmd->callback([options, cmd, &exit_code] {
    options->base_url_given = cmd->count("--base-url") > 0;
    options->sandbox_args = GivenSandboxArgs(*cmd);
    exit_code.value = RunAgentCommand(*options);
  });
}

}  // namespace nsbox::cli
