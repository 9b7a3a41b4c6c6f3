// Provider: defaults per provider, the factory, and reading error bodies.
#include "src/agent/provider.h"

#include <fmt/format.h>

#include "sandbox/base/bounded_json.h"
#include "src/agent/anthropic.h"
#include "src/agent/http_client.h"
#include "src/agent/openai.h"

namespace nsbox::agent {

std::string DefaultBaseUrl(const std::string& provider) {
  // As the official SDKs have them: Anthropic's without the /v1, OpenAI's with it.
  return provider == "anthropic" ? "https://api.anthropic.com" : "https://api.openai.com/v1";
}

std::string DefaultModel(const std::string& provider) {
  return provider == "anthropic" ? "claude-sonnet-4-5" : "gpt-4o";
}

std::string ApiKeyVariable(const std::string& provider) {
  return provider == "anthropic" ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY";
}

std::string BaseUrlVariable(const std::string& provider) {
  return provider == "anthropic" ? "ANTHROPIC_BASE_URL" : "OPENAI_BASE_URL";
}

StatusOr<std::string> ChooseBaseUrl(const std::string& provider, const std::optional<std::string>& flag,
                                    const char* env_value) {
  if (flag) {
    if (flag->empty())
      return Status::Error("--base-url is empty: give the endpoint's URL, or leave the option out for the public API");
    return *flag;
  }
  if (env_value) {
    if (*env_value == '\0')
      return Status::Error(fmt::format("{} is set but empty: give the endpoint's URL, or unset it for the public API",
                                       BaseUrlVariable(provider)));
    return std::string(env_value);
  }
  return std::string();
}

StatusOr<std::unique_ptr<Provider>> MakeProvider(ProviderConfig config) {
  if (config.provider != "anthropic" && config.provider != "openai")
    return Status::Error(fmt::format("unknown provider \"{}\" (choose anthropic or openai)", config.provider));
  if (config.model.empty()) config.model = DefaultModel(config.provider);
  if (config.base_url.empty()) config.base_url = DefaultBaseUrl(config.provider);
  // A mistyped endpoint is said at once, not after five retries of a host that cannot be resolved; as it was given.
  const std::string given = RedactUrl(config.base_url);
  if (!config.base_url.starts_with("http://") && !config.base_url.starts_with("https://"))
    return Status::Error(fmt::format("base URL \"{}\" is not an http:// or https:// URL", given));
  const size_t host_start = config.base_url.find("://") + 3;
  while (config.base_url.size() > host_start && config.base_url.back() == '/') config.base_url.pop_back();
  if (config.base_url.size() == host_start || config.base_url[host_start] == '/')
    return Status::Error(fmt::format("base URL \"{}\" names no host", given));
  if (config.provider == "anthropic") return std::unique_ptr<Provider>(new AnthropicProvider(std::move(config)));
  return std::unique_ptr<Provider>(new OpenAIProvider(std::move(config)));
}

std::string Redacted(std::string text, const std::vector<std::string>& secrets) {
  static const std::string kRedacted = "[redacted]";
  for (const auto& secret : secrets)
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + kRedacted.size()))
      text.replace(at, secret.size(), kRedacted);
  return text;
}

std::vector<std::string> Provider::Secrets() const {
  std::vector<std::string> secrets;
  if (config_.api_key.size() >= 8) secrets.push_back(config_.api_key);
  for (std::string secret : UrlCredentials(config_.base_url))
    if (secret.size() >= 8) secrets.push_back(std::move(secret));
  return secrets;
}

std::string Provider::RedactedErrorMessage(const nlohmann::json& body) const {
  return ErrorMessageFromBody(Redacted(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), Secrets()));
}

std::string ErrorMessageFromBody(const std::string& body) {
  auto json = ParseBoundedJsonOrDiscarded(body);
  if (!json.is_discarded() && json.is_object() && json.contains("error")) {
    const auto& error = json["error"];
    if (error.is_string()) return OneLine(error.get<std::string>());
    if (error.is_object() && error.contains("message") && error["message"].is_string()) {
      std::string type = error.contains("type") && error["type"].is_string() ? error["type"].get<std::string>() : "";
      std::string message = error["message"].get<std::string>();
      return OneLine(type.empty() ? message : fmt::format("{}: {}", type, message));
    }
  }
  std::string text = OneLine(body);
  return text.empty() ? "(empty body)" : text;
}

std::string TerminalSafe(std::string_view text) {
  std::string shown;
  shown.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) {
      shown += fmt::format("\\x{:02x}", byte);
    } else if (byte == 0xc2 && next >= 0x80 && next <= 0x9f) {  // a C1 control (U+0080 to U+009F: CSI is U+009B)
      shown += fmt::format("\\u{:04x}", next);
      ++i;
    } else {
      shown += text[i];
    }
  }
  return shown;
}

std::string OneLine(std::string_view text, size_t max_bytes) {
  std::string out;
  bool pending_space = false;
  for (char c : text) {
    // Control characters count as whitespace: a server's escape sequences do not reach the terminal.
    if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
    if (out.size() > max_bytes + 4) break;  // enough to know it is clipped
  }
  if (out.size() > max_bytes) {
    size_t cut = max_bytes;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    out.resize(cut);
    out += " …";
  }
  return out;
}

}  // namespace nsbox::agent
