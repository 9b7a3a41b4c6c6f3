// Provider: one LLM wire format (Anthropic Messages, OpenAI Chat Completions) that keeps the conversation in its own
// message shape.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"

namespace nsbox::agent {

// A tool the model may call: name, when to use it, and its input as JSON Schema.
struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::json input_schema;
};

// One tool call of the model. When the arguments were not a JSON object, input_error says why
// (the call is answered with that error, so the model can try again).
struct ToolCall {
  std::string id;
  std::string name;
  nlohmann::json input = nlohmann::json::object();
  std::string input_error;
};

// The model's turn: its text and the tool calls it wants answered (none: the text is the answer).
struct ModelTurn {
  std::string text;
  std::vector<ToolCall> tool_calls;
  std::string stop_reason;  // as the provider said it (end_turn, tool_use, stop, tool_calls, max_tokens, length …)
};

struct ToolResult {
  std::string tool_call_id;
  std::string content;
  bool is_error = false;
};

struct ProviderConfig {
  std::string provider;   // "anthropic" or "openai"
  std::string model;      // empty: the provider's default
  std::string base_url;   // empty: the provider's public endpoint
  std::string api_key;    // empty: no authentication header (local OpenAI-compatible servers)
  int max_tokens = 4096;
  std::string system_prompt;
  std::vector<ToolSpec> tools;
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string name() const = 0;
  const std::string& model() const { return config_.model; }
  // The endpoint URL (base URL + the API's path).
  virtual std::string url() const = 0;
  // Content type, version and authentication headers.
  virtual std::vector<std::string> headers() const = 0;
  // Names of the headers that carry secrets, for transcripts.
  virtual std::vector<std::string> secret_headers() const = 0;

  virtual void AddUserText(const std::string& text) = 0;
  // The request body for the conversation so far.
  virtual nlohmann::json BuildRequest() const = 0;
  // Reads a successful response body, appends the assistant's message to the conversation and
  // returns its turn; a response without the fields the wire format requires is an error that names them.
  virtual StatusOr<ModelTurn> AcceptResponse(const nlohmann::json& body) = 0;
  // Answers every tool call of the last turn (in the provider's required shape and order).
  virtual void AddToolResults(const std::vector<ToolResult>& results) = 0;
  // The message list as it will be sent.
  virtual const nlohmann::json& messages() const = 0;
  // What must never be shown, as a server may echo it: the API key (in every header that carries it, "Bearer KEY"
  // too) and the base URL's user:password and password. Values under 8 bytes are left out, so that a test key such
  // as "k" does not blank every k.
  std::vector<std::string> Secrets() const;

 protected:
  explicit Provider(ProviderConfig config) : config_(std::move(config)) {}
  // The error message of a response body (ErrorMessageFromBody), the credentials redacted before it is clipped.
  std::string RedactedErrorMessage(const nlohmann::json& body) const;
  ProviderConfig config_;
};

// The default endpoint, model and API-key variable of each provider.
std::string DefaultBaseUrl(const std::string& provider);
std::string DefaultModel(const std::string& provider);
std::string ApiKeyVariable(const std::string& provider);
std::string BaseUrlVariable(const std::string& provider);

// The base URL of a run: --base-url when given, else the provider's variable when set (env_value: its getenv, or
// nullptr); empty, the public endpoint, when neither is. One given but empty is an error: an unset shell variable in
// `--base-url "$URL"` or `OPENAI_BASE_URL=$URL` must not send the prompt and the key to the public API.
StatusOr<std::string> ChooseBaseUrl(const std::string& provider, const std::optional<std::string>& flag,
                                    const char* env_value);

StatusOr<std::unique_ptr<Provider>> MakeProvider(ProviderConfig config);

// `text` with every occurrence of each secret replaced by "[redacted]" (the search goes on after the replacement: a
// secret found in "[redacted]" itself is not replaced for ever). Before any clipping: a secret cut in half is no
// longer found.
std::string Redacted(std::string text, const std::vector<std::string>& secrets);

// The message a provider put in an error response body ({"error": {"message": …}} in both formats), else the body
// itself (an HTML error page …), as one line of at most kMaxErrorTextBytes.
std::string ErrorMessageFromBody(const std::string& body);

// Text from a server made fit for a one-line error: every run of whitespace (newlines included) becomes one space,
// and text longer than max_bytes is clipped (at a character boundary) with " …".
inline constexpr size_t kMaxErrorTextBytes = 300;
std::string OneLine(std::string_view text, size_t max_bytes = kMaxErrorTextBytes);

// Text from the model or its code made safe for a terminal, lines kept: control characters other than newline and
// tab are shown as \xNN (an escape sequence retitling the window, clearing the screen or writing the clipboard is
// shown, not acted on).
std::string TerminalSafe(std::string_view text);

}  // namespace nsbox::agent
