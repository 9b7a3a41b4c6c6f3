// OpenAIProvider: the OpenAI Chat Completions API (POST /chat/completions, tool_calls and role "tool" messages), also
// spoken by llama.cpp, vLLM and Ollama.
#pragma once

#include "src/agent/provider.h"

namespace nsbox::agent {

class OpenAIProvider : public Provider {
 public:
  explicit OpenAIProvider(ProviderConfig config);
  std::string name() const override { return "openai"; }
  std::string url() const override;
  std::vector<std::string> headers() const override;
  std::vector<std::string> secret_headers() const override { return {"authorization"}; }
  void AddUserText(const std::string& text) override;
  nlohmann::json BuildRequest() const override;
  StatusOr<ModelTurn> AcceptResponse(const nlohmann::json& body) override;
  void AddToolResults(const std::vector<ToolResult>& results) override;
  const nlohmann::json& messages() const override { return messages_; }

 private:
  nlohmann::json messages_ = nlohmann::json::array();
};

}  // namespace nsbox::agent
