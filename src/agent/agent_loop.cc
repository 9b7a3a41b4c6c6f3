// RunAgent: steps, time-out layers, retries with backoff, at-most-once tool execution and the JSONL transcript.
#include "src/agent/agent_loop.h"

#include <fcntl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "sandbox/base/bounded_json.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "src/agent/tools.h"

namespace nsbox::agent {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::string Seconds(milliseconds d) { return fmt::format("{:g}s", static_cast<double>(d.count()) / 1000.0); }

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// One JSON object per line: every request, response, tool call and tool result of the run. The first failed write is
// kept: the run then ends saying so (a transcript asked for and silently lost would read as complete).
class Transcript {
 public:
  Status Open(const std::string& path) {
    if (path.empty()) return OkStatus();
    path_ = path;
    fd_ = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
    if (!fd_) return Status::Errno(fmt::format("open({}) for the transcript", path));
    return OkStatus();
  }
  // What is never written: the credentials, which a provider's error body may echo.
  void SetSecrets(std::vector<std::string> secrets) { secrets_ = std::move(secrets); }
  void Write(nlohmann::json entry) {
    if (!fd_ || !error_.empty()) return;
    entry["time_ms"] =
        std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string line = Redacted(entry.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), secrets_);
    if (int err = WriteAll(fd_.get(), line + "\n"); err != 0)
      error_ = fmt::format("writing the transcript {}: {} ({})", path_, std::strerror(err), ErrnoName(err));
  }
  // Empty while every write succeeded.
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  UniqueFd fd_;
  std::string error_;
  std::vector<std::string> secrets_;
};

struct ModelReply {
  std::optional<nlohmann::json> body;
  AgentEnd end = AgentEnd::kProviderError;
  std::string error;
};

class Loop {
 public:
  Loop(Provider& provider, runtime::SandboxRuntime& runtime, const AgentConfig& config)
      : provider_(provider), runtime_(runtime), config_(config) {
    transport_ = config.transport ? config.transport : HttpPost;
    // What a server may echo in an error message, never shown (Provider::Secrets).
    secrets_ = provider_.Secrets();
    transcript_.SetSecrets(secrets_);
  }

  AgentOutcome Run(const std::string& prompt) {
    start_ = Clock::now();
    run_deadline_ = start_ + config_.run_timeout;
    if (Status s = transcript_.Open(config_.transcript_path); !s.ok())
      return End(AgentEnd::kTranscriptError, s.message());
    transcript_.Write({{"kind", "start"}, {"provider", provider_.name()}, {"model", provider_.model()},
                       {"runtime", runtime_.name()}, {"prompt", prompt}});
    provider_.AddUserText(prompt);
    for (int step = 1; step <= config_.max_steps; ++step) {
      if (Cancelled()) return End(AgentEnd::kCancelled, "interrupted");
      if (!transcript_.error().empty()) return End(AgentEnd::kTranscriptError, transcript_.error());
      if (Clock::now() >= run_deadline_) return RunTimedOut();
      Log(fmt::format("step {}: asking {} ({})", step, provider_.name(), provider_.model()));
      ModelReply reply = CallModel();
      if (!reply.body) return End(reply.end, reply.error);
      ++outcome_.model_calls;
      auto turn = provider_.AcceptResponse(*reply.body);
      if (!turn.ok()) return End(AgentEnd::kMalformed, turn.status().message());
      if (!turn->text.empty() && !turn->tool_calls.empty()) Log("model: " + FirstLines(turn->text, 3));
      if (turn->tool_calls.empty()) {
        if (turn->text.empty())
          return End(AgentEnd::kMalformed,
                     fmt::format("the model ended its turn (stop reason \"{}\") with neither text nor a tool call",
                                 turn->stop_reason));
        if (turn->stop_reason == "max_tokens" || turn->stop_reason == "length")
          Log("note: the answer was cut by the token limit");
        outcome_.answer = turn->text;
        return End(AgentEnd::kAnswered, "");
      }
      // At the last step a tool's result could never reach the model: the call is not run.
      if (step == config_.max_steps) break;
      std::vector<ToolResult> results;
      for (size_t i = 0; i < turn->tool_calls.size(); ++i)
        results.push_back(i < kMaxToolCallsPerTurn ? RunTool(turn->tool_calls[i]) : NotRun(turn->tool_calls[i]));
      if (Cancelled()) return End(AgentEnd::kCancelled, "interrupted");
      provider_.AddToolResults(results);
      if (consecutive_runtime_failures_ >= 3)
        return End(AgentEnd::kRuntimeError,
                   "the " + runtime_.name() + " runtime could not run code: " + last_runtime_error_);
    }
    return End(AgentEnd::kMaxSteps, fmt::format("the model gave no final answer within {} step{} (--max-steps)",
                                                config_.max_steps, config_.max_steps == 1 ? "" : "s"));
  }

 private:
  bool Cancelled() const { return config_.cancel && config_.cancel->load(); }
  // Log lines go to the operator's terminal and carry the model's words: its control characters (an escape sequence
  // retitling the window or clearing the screen) are shown as \xNN, not acted on.
  void Log(const std::string& line) const {
    if (config_.log) config_.log(TerminalSafe(Redacted(line, secrets_)));
  }
  static std::string FirstLines(const std::string& text, int lines) {
    size_t pos = 0;
    for (int i = 0; i < lines && pos != std::string::npos; ++i) pos = text.find('\n', pos == 0 ? 0 : pos + 1);
    return pos == std::string::npos ? text : text.substr(0, pos) + " …";
  }
  AgentOutcome RunTimedOut() {
    return End(AgentEnd::kTimeout,
               fmt::format("the run's time-out of {} (--timeout) passed", Seconds(config_.run_timeout)));
  }
  AgentOutcome End(AgentEnd end, const std::string& error) {
    outcome_.end = end;
    outcome_.error = Redacted(error, secrets_);
    transcript_.Write({{"kind", "end"}, {"outcome", AgentEndName(end)}, {"error", error}, {"answer", outcome_.answer},
                       {"model_calls", outcome_.model_calls}, {"tool_calls", outcome_.tool_calls},
                       {"elapsed_ms", std::chrono::duration_cast<milliseconds>(Clock::now() - start_).count()}});
    // A lost transcript fails an answered run; a run that failed otherwise says both.
    if (!transcript_.error().empty() && end != AgentEnd::kTranscriptError) {
      if (end == AgentEnd::kAnswered) {
        outcome_.end = AgentEnd::kTranscriptError;
        outcome_.error = transcript_.error();
      } else {
        outcome_.error = fmt::format("{} (and {})", error, transcript_.error());
      }
    }
    return outcome_;
  }

  std::vector<std::string> RedactedHeaders() const {
    std::vector<std::string> out;
    auto secrets = provider_.secret_headers();
    for (const auto& h : provider_.headers()) {
      std::string name = Lower(h.substr(0, h.find(':')));
      bool secret = std::find(secrets.begin(), secrets.end(), name) != secrets.end();
      out.push_back(secret ? h.substr(0, h.find(':')) + ": [redacted]" : h);
    }
    return out;
  }

  ModelReply Fail(AgentEnd end, std::string error) {
    ModelReply r;
    r.end = end;
    r.error = std::move(error);
    return r;
  }

  // One model call: the request, with retries of what is worth retrying, inside the turn's deadline.
  ModelReply CallModel() {
    Clock::time_point turn_deadline = std::min(run_deadline_, Clock::now() + config_.turn_timeout);
    nlohmann::json body = provider_.BuildRequest();
    std::string body_text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    // The conversation is sent whole each turn; past what a provider takes it only grows (and holds memory).
    if (body_text.size() > kMaxRequestBytes)
      return Fail(AgentEnd::kProviderError,
                  fmt::format("the conversation is {} bytes, more than the {} bytes (32 MiB) a request may carry",
                              body_text.size(), kMaxRequestBytes));
    std::mt19937 rng(std::random_device{}());
    for (int attempt = 0;; ++attempt) {
      if (Cancelled()) return Fail(AgentEnd::kCancelled, "interrupted");
      HttpRequest request{provider_.url(), provider_.headers(), body_text, turn_deadline, config_.cancel};
      const std::string shown_url = RedactUrl(request.url);
      transcript_.Write({{"kind", "request"}, {"url", shown_url}, {"attempt", attempt + 1},
                         {"headers", RedactedHeaders()}, {"body", body}});
      ++outcome_.http_requests;
      HttpResult result = transport_(request);
      nlohmann::json logged_body(nlohmann::json::value_t::discarded);
      std::string not_json;  // why the body is not taken as JSON
      try {
        logged_body = ParseBoundedJson(result.response.body);
      } catch (const std::exception& e) {
        not_json = JsonErrorText(e);
      }
      transcript_.Write({{"kind", "response"}, {"url", shown_url}, {"attempt", attempt + 1},
                         {"status", result.response.status}, {"transport_error", result.error_message},
                         {"body", logged_body.is_discarded() ? nlohmann::json(result.response.body) : logged_body}});

      std::string retry_reason;
      if (result.error == TransportError::kCancelled) return Fail(AgentEnd::kCancelled, "interrupted");
      if (result.error == TransportError::kTimeout) {
        if (Clock::now() >= run_deadline_ - milliseconds(50))
          return Fail(AgentEnd::kTimeout,
                      fmt::format("the run's time-out of {} (--timeout) passed while waiting for the model",
                                  Seconds(config_.run_timeout)));
        return Fail(AgentEnd::kTimeout,
                    fmt::format("the model did not answer within the turn time-out of {} (--turn-timeout)",
                                Seconds(config_.turn_timeout)));
      }
      if (result.error == TransportError::kConnect) retry_reason = result.error_message;
      else if (result.error != TransportError::kNone) return Fail(AgentEnd::kProviderError, result.error_message);

      long status = result.response.status;
      if (retry_reason.empty()) {
        if (status >= 200 && status < 300) {
          if (logged_body.is_discarded())
            return Fail(AgentEnd::kMalformed,
                        fmt::format("malformed {} response: the body is not taken as JSON ({}): {}", provider_.name(),
                                    OneLine(Redacted(not_json, secrets_), 200),
                                    OneLine(Redacted(result.response.body, secrets_), 200)));
          ModelReply reply;
          reply.body = std::move(logged_body);
          return reply;
        }
        // Redacted before it is clipped to one line: a key cut in half there would no longer be found.
        std::string message = ErrorMessageFromBody(Redacted(result.response.body, secrets_));
        if (status == 401 || status == 403)
          return Fail(AgentEnd::kAuthError,
                      fmt::format("API key rejected by {} (HTTP {}): {}. Check {}.", provider_.name(), status, message,
                                  ApiKeyVariable(provider_.name())));
        bool retryable = status == 408 || status == 409 || status == 429 || status >= 500;
        if (!retryable)
          return Fail(AgentEnd::kProviderError,
                      fmt::format("{} answered HTTP {}: {}", provider_.name(), status, message));
        retry_reason = fmt::format("HTTP {}: {}", status, message);
      }

      if (attempt >= config_.max_retries)
        return Fail(AgentEnd::kProviderError, fmt::format("{} still failing after {} attempts: {}", provider_.name(),
                                                          attempt + 1, retry_reason));
      int64_t wait_ms = RetryAfterMs(result.response.headers);
      if (wait_ms < 0) {
        // Exponential backoff with jitter (half to full), so many clients do not retry in step.
        double base = static_cast<double>(config_.initial_backoff.count()) * std::pow(2.0, attempt);
        base = std::min(base, static_cast<double>(config_.max_backoff.count()));
        wait_ms = static_cast<int64_t>(std::uniform_real_distribution<double>(base / 2, base)(rng));
      }
      Clock::time_point resume = Clock::now() + milliseconds(wait_ms);
      if (resume >= turn_deadline)
        return Fail(AgentEnd::kTimeout, fmt::format("{} ({}), and waiting {} ms to retry would pass the {} time-out",
                                                    provider_.name(), retry_reason, wait_ms,
                                                    turn_deadline == run_deadline_ ? "run's" : "turn's"));
      Log(fmt::format("{}; retrying in {} ms (attempt {} of {})", retry_reason, wait_ms, attempt + 2,
                      config_.max_retries + 1));
      while (Clock::now() < resume) {
        if (Cancelled()) return Fail(AgentEnd::kCancelled, "interrupted");
        std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(50), resume - Clock::now()));
      }
    }
  }

  // A call past kMaxToolCallsPerTurn: answered (every call id needs a result) and not run, so that one answer of the
  // model cannot run thousands of programs in one step.
  ToolResult NotRun(const ToolCall& call) {
    ToolResult result{call.id,
                      fmt::format("error: not run: one turn runs at most {} tool calls; ask for this one again in the "
                                  "next turn",
                                  kMaxToolCallsPerTurn),
                      true};
    transcript_.Write({{"kind", "tool_call"}, {"id", call.id}, {"name", call.name}, {"input", call.input}});
    transcript_.Write({{"kind", "tool_result"}, {"id", call.id}, {"content", result.content}, {"not_run", true}});
    return result;
  }

  ToolResult RunTool(const ToolCall& call) {
    ToolResult result{call.id, "", false};
    ++outcome_.tool_calls;
    transcript_.Write({{"kind", "tool_call"}, {"id", call.id}, {"name", call.name}, {"input", call.input},
                       {"input_error", call.input_error}});
    // At most once: a call id seen before is answered from memory, never run again.
    if (auto it = executed_.find(call.id); it != executed_.end()) {
      result.content =
          "This tool call id was already executed; it was not run again. Its result was:\n" + it->second.content;
      result.is_error = it->second.is_error;
      Log(fmt::format("tool call {} repeated: not run again", call.id));
      transcript_.Write({{"kind", "tool_result"}, {"id", call.id}, {"content", result.content}, {"repeated", true}});
      return result;
    }
    auto request = ParseCodeCall(call);
    if (!request.ok()) {
      result.content = "error: " + request.status().message();
      result.is_error = true;
    } else if (Clock::now() >= run_deadline_ || Cancelled()) {
      result.content = "error: not run: the agent's run time-out has passed";
      result.is_error = true;
    } else {
      runtime::ExecuteOptions options;
      auto left = std::chrono::duration_cast<milliseconds>(run_deadline_ - Clock::now());
      options.timeout = std::min(config_.tool_timeout, left);
      options.deadline = run_deadline_;
      options.cancel = config_.cancel;
      options.output_limit_bytes = config_.sandbox_output_limit_bytes;
      options.on_output = config_.tool_output;
      Log(fmt::format("running {} ({} bytes of {}) in the {} runtime, time limit {}", call.name, request->code.size(),
                      request->language, runtime_.name(), Seconds(options.timeout)));
      auto run = runtime_.execute(request->language, request->code, options);
      if (!run.ok()) {
        ++consecutive_runtime_failures_;
        last_runtime_error_ = run.status().message();
        result.content = "error: the sandbox could not run this code: " + run.status().message();
        result.is_error = true;
        Log(result.content);
      } else {
        consecutive_runtime_failures_ = 0;
        result.content = FormatToolResult(*run, config_.tool_output_budget_bytes);
        result.is_error = IsToolError(*run);  // the rule MCP's isError follows too
        Log(fmt::format("result: {} ({}), {} ms, {} + {} bytes of output", RunStatusName(run->status), run->reason,
                        run->wall_ms, run->stdout_bytes, run->stderr_bytes));
      }
    }
    executed_[call.id] = result;
    transcript_.Write(
        {{"kind", "tool_result"}, {"id", call.id}, {"content", result.content}, {"is_error", result.is_error}});
    return result;
  }

  Provider& provider_;
  runtime::SandboxRuntime& runtime_;
  const AgentConfig& config_;
  std::function<HttpResult(const HttpRequest&)> transport_;
  Transcript transcript_;
  AgentOutcome outcome_;
  Clock::time_point start_, run_deadline_;
  std::map<std::string, ToolResult> executed_;
  int consecutive_runtime_failures_ = 0;
  std::string last_runtime_error_;
  std::vector<std::string> secrets_;
};

}  // namespace

int64_t RetryAfterMs(const std::map<std::string, std::string>& headers) {
  // A server's number is clamped to a day, more than any run waits: 9e15 ms added to the clock overflowed it, and the
  // retry came at once.
  constexpr double kMaxMs = 24.0 * 3600 * 1000;
  if (auto it = headers.find("retry-after-ms"); it != headers.end()) {
    char* end = nullptr;
    double ms = std::strtod(it->second.c_str(), &end);
    if (end != it->second.c_str() && ms >= 0) return static_cast<int64_t>(std::min(ms, kMaxMs));
  }
  auto it = headers.find("retry-after");
  if (it == headers.end()) return -1;
  char* end = nullptr;
  double seconds = std::strtod(it->second.c_str(), &end);
  if (end != it->second.c_str() && *end == '\0' && seconds >= 0)
    return static_cast<int64_t>(std::min(seconds * 1000, kMaxMs));
  // An HTTP-date (RFC 9110 5.6.7): the preferred IMF-fixdate, then the two obsolete forms; always GMT.
  for (const char* format : {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"}) {
    struct tm parts = {};
    const char* rest = strptime(it->second.c_str(), format, &parts);
    if (!rest || *rest != '\0') continue;
    time_t when = timegm(&parts);
    const int64_t ahead_s = static_cast<int64_t>(when) - static_cast<int64_t>(std::time(nullptr));
    const int64_t ahead_ms = std::min<int64_t>(ahead_s, static_cast<int64_t>(kMaxMs / 1000)) * 1000;
    // A date already past (a skewed clock, a stale cache) says nothing about when to retry: the normal backoff does,
    // not an immediate retry that would spend every attempt in a moment.
    if (when < 0 || ahead_ms <= 0) return -1;
    return ahead_ms;
  }
  return -1;
}

AgentOutcome RunAgent(Provider& provider, runtime::SandboxRuntime& runtime, const AgentConfig& config,
                      const std::string& prompt) {
  return Loop(provider, runtime, config).Run(prompt);
}

const char* AgentEndName(AgentEnd end) {
  switch (end) {
    case AgentEnd::kAnswered: return "answered";
    case AgentEnd::kAuthError: return "auth_error";
    case AgentEnd::kProviderError: return "provider_error";
    case AgentEnd::kMalformed: return "malformed";
    case AgentEnd::kMaxSteps: return "max_steps";
    case AgentEnd::kTimeout: return "timeout";
    case AgentEnd::kCancelled: return "cancelled";
    case AgentEnd::kRuntimeError: return "runtime_error";
    case AgentEnd::kTranscriptError: return "transcript_error";
  }
  return "provider_error";
}

int AgentExitCode(AgentEnd end) {
  switch (end) {
    case AgentEnd::kAnswered: return 0;
    case AgentEnd::kAuthError: return 2;
    case AgentEnd::kTimeout: return 124;
    case AgentEnd::kCancelled: return 130;
    case AgentEnd::kRuntimeError:
    case AgentEnd::kTranscriptError: return 125;
    case AgentEnd::kProviderError:
    case AgentEnd::kMalformed:
    case AgentEnd::kMaxSteps: return 1;
  }
  return 1;
}

}  // namespace nsbox::agent
