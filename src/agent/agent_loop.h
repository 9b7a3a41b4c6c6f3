// RunAgent: the loop that lets a model answer by running code: model call, tool calls run once each in a
// SandboxRuntime, results back, until a final answer.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "src/agent/http_client.h"
#include "src/agent/provider.h"
#include "src/runtime/sandbox_runtime.h"

namespace nsbox::agent {

struct AgentConfig {
  int max_steps = 10;  // model calls, the final one included
  // Time-out layers; the tightest wins. The sandbox's own wall limit for a call is the tool time-out
  // cut to what is left of the run.
  std::chrono::milliseconds run_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds turn_timeout{std::chrono::minutes(3)};  // one model call, its retries included
  std::chrono::milliseconds tool_timeout{std::chrono::seconds(60)};
  uint64_t tool_output_budget_bytes = 16 * 1024;  // what the model sees of stdout + stderr
  uint64_t sandbox_output_limit_bytes = 1 << 20;  // what the sandbox keeps per stream
  // Retries of 429, 5xx and connection failures, with exponential backoff unless retry-after says.
  int max_retries = 4;
  std::chrono::milliseconds initial_backoff{1000};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(30)};
  std::string transcript_path;  // JSONL of every request, response and tool call; empty: none
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(const std::string&)> log;  // progress lines (--verbose); may be empty
  // The code's output as it comes (stream 1 stdout, 2 stderr), where the runtime streams (--verbose); may be empty.
  std::function<void(int stream, std::string_view text)> tool_output;
  std::function<HttpResult(const HttpRequest&)> transport;  // empty: HttpPost
};

// Tool calls run from one answer of the model; the rest are answered "not run" (parallel tool use asks for a few).
inline constexpr size_t kMaxToolCallsPerTurn = 16;
// The largest request body sent (Anthropic's and OpenAI's own limits are about this size).
inline constexpr size_t kMaxRequestBytes = 32 << 20;

enum class AgentEnd {
  kAnswered,
  kAuthError,      // 401/403: the API key was rejected
  kProviderError,  // other HTTP errors, retries exhausted, transport failures
  kMalformed,      // a response the wire format does not allow
  kMaxSteps,
  kTimeout,
  kCancelled,
  kRuntimeError,   // the runtime could not run code at all, repeatedly
  kTranscriptError,  // --transcript could not be opened or written
};

struct AgentOutcome {
  AgentEnd end = AgentEnd::kProviderError;
  std::string answer;  // the model's final text (kAnswered)
  std::string error;   // one line for the user otherwise
  int model_calls = 0;
  int http_requests = 0;
  int tool_calls = 0;
};

AgentOutcome RunAgent(Provider& provider, runtime::SandboxRuntime& runtime, const AgentConfig& config,
                      const std::string& prompt);

// "answered", "auth_error", "provider_error", "malformed", "max_steps", "timeout", "cancelled", "runtime_error",
// "transcript_error".
const char* AgentEndName(AgentEnd end);

// 0 answered, 1 provider/model failure, 2 key rejected, 124 time-out, 130 interrupted, 125 runtime or transcript
// failure.
int AgentExitCode(AgentEnd end);

// Milliseconds to wait from a retry-after header (delta-seconds or an HTTP date) or retry-after-ms; -1 if none, if
// unparsable, or for a date that is not in the future (the caller then backs off as usual).
int64_t RetryAfterMs(const std::map<std::string, std::string>& headers);

}  // namespace nsbox::agent
