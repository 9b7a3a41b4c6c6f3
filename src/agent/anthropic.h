// AnthropicProvider: the Anthropic Messages API (POST /v1/messages, tool_use and tool_result content blocks).
#pragma once

#include "src/agent/provider.h"

namespace nsbox::agent {

class AnthropicProvider : public Provider {
 public:
  static constexpr const char* kApiVersion = "2023-06-01";
  explicit AnthropicProvider(ProviderConfig config) : Provider(std::move(config)) {}
  std::string name() const override { return "anthropic"; }
  std::string url() const override;
  std::vector<std::string> headers() const override;
  std::vector<std::string> secret_headers() const override { return {"x-api-key"}; }
  void AddUserText(const std::string& text) override;
  nlohmann::json BuildRequest() const override;
  StatusOr<ModelTurn> AcceptResponse(const nlohmann::json& body) override;
  void AddToolResults(const std::vector<ToolResult>& results) override;
  const nlohmann::json& messages() const override { return messages_; }

 private:
  nlohmann::json messages_ = nlohmann::json::array();
};

}  // namespace nsbox::agent
