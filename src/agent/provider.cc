// Provider: defaults per provider, the factory, and reading error bodies.
#include "src/agent/provider.h"

#include <fmt/format.h>

#include "src/agent/anthropic.h"
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

StatusOr<std::unique_ptr<Provider>> MakeProvider(ProviderConfig config) {
  if (config.provider != "anthropic" && config.provider != "openai")
    return Status::Error(fmt::format("unknown provider \"{}\" (choose anthropic or openai)", config.provider));
  if (config.model.empty()) config.model = DefaultModel(config.provider);
  if (config.base_url.empty()) config.base_url = DefaultBaseUrl(config.provider);
  while (!config.base_url.empty() && config.base_url.back() == '/') config.base_url.pop_back();
  // A mistyped endpoint is said at once, not after five retries of a host that cannot be resolved.
  if (!config.base_url.starts_with("http://") && !config.base_url.starts_with("https://"))
    return Status::Error(fmt::format("base URL \"{}\" is not an http:// or https:// URL", config.base_url));
  if (config.provider == "anthropic") return std::unique_ptr<Provider>(new AnthropicProvider(std::move(config)));
  return std::unique_ptr<Provider>(new OpenAIProvider(std::move(config)));
}

std::string ErrorMessageFromBody(const std::string& body) {
  auto json = nlohmann::json::parse(body, nullptr, false);
  if (!json.is_discarded() && json.is_object() && json.contains("error")) {
    const auto& error = json["error"];
    if (error.is_string()) return error.get<std::string>();
    if (error.is_object() && error.contains("message") && error["message"].is_string()) {
      std::string type = error.contains("type") && error["type"].is_string() ? error["type"].get<std::string>() : "";
      return type.empty() ? error["message"].get<std::string>() : fmt::format("{}: {}", type, error["message"].get<std::string>());
    }
  }
  std::string text = body.substr(0, 300);
  return text.empty() ? "(empty body)" : text;
}

}  // namespace nsbox::agent
