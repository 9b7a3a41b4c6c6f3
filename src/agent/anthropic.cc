// AnthropicProvider: request assembly and response checking for the Messages API.
#include "src/agent/anthropic.h"

#include <fmt/format.h>

namespace nsbox::agent {

std::string AnthropicProvider::url() const {
  const std::string& base = config_.base_url;
  bool has_version = base.size() >= 3 && base.compare(base.size() - 3, 3, "/v1") == 0;
  return base + (has_version ? "/messages" : "/v1/messages");
}

std::vector<std::string> AnthropicProvider::headers() const {
  std::vector<std::string> h{"content-type: application/json", fmt::format("anthropic-version: {}", kApiVersion)};
  if (!config_.api_key.empty()) h.push_back("x-api-key: " + config_.api_key);
  return h;
}

void AnthropicProvider::AddUserText(const std::string& text) {
  messages_.push_back({{"role", "user"}, {"content", text}});
}

nlohmann::json AnthropicProvider::BuildRequest() const {
  nlohmann::json tools = nlohmann::json::array();
  for (const auto& t : config_.tools)
    tools.push_back({{"name", t.name}, {"description", t.description}, {"input_schema", t.input_schema}});
  nlohmann::json body = {{"model", config_.model}, {"max_tokens", config_.max_tokens}, {"messages", messages_}};
  if (!config_.system_prompt.empty()) body["system"] = config_.system_prompt;
  if (!tools.empty()) body["tools"] = tools;
  return body;
}

StatusOr<ModelTurn> AnthropicProvider::AcceptResponse(const nlohmann::json& body) {
  auto bad = [](const std::string& what) { return Status::Error("malformed Anthropic response: " + what); };
  if (!body.is_object()) return bad("the body is not a JSON object");
  if (body.contains("type") && body["type"] == "error")
    return bad("an error object in a 200 response: " + RedactedErrorMessage(body));
  if (!body.contains("content") || !body["content"].is_array()) return bad("no \"content\" array");
  if (!body.contains("stop_reason") || !body["stop_reason"].is_string()) return bad("no \"stop_reason\" string");
  if (body.contains("role") && body["role"] != "assistant") return bad("\"role\" is not \"assistant\"");
  ModelTurn turn;
  turn.stop_reason = body["stop_reason"].get<std::string>();
  size_t index = 0;
  for (const auto& block : body["content"]) {
    std::string where = fmt::format("content[{}]", index++);
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
      return bad(where + " has no \"type\"");
    std::string type = block["type"].get<std::string>();
    if (type == "text") {
      if (!block.contains("text") || !block["text"].is_string()) return bad(where + " (text) has no \"text\" string");
      if (!turn.text.empty()) turn.text += "\n";
      turn.text += block["text"].get<std::string>();
    } else if (type == "tool_use") {
      ToolCall call;
      if (!block.contains("id") || !block["id"].is_string() || block["id"].get<std::string>().empty())
        return bad(where + " (tool_use) has no \"id\"");
      if (!block.contains("name") || !block["name"].is_string()) return bad(where + " (tool_use) has no \"name\"");
      call.id = block["id"].get<std::string>();
      call.name = block["name"].get<std::string>();
      if (block.contains("input") && block["input"].is_object()) call.input = block["input"];
      else call.input_error = "the tool input was not a JSON object";
      turn.tool_calls.push_back(std::move(call));
    }
    // Other block types (thinking …) stay in the history as they came and need no answer.
  }
  if (turn.stop_reason == "tool_use" && turn.tool_calls.empty())
    return bad("stop_reason is \"tool_use\" but there is no tool_use block");
  // The assistant's content goes back verbatim: tool_result blocks refer to its tool_use ids. A tool_use whose input
  // was not an object (answered as an error) goes back with an empty one, which the API takes.
  nlohmann::json content = body["content"];
  for (auto& block : content)
    if (block.value("type", "") == "tool_use" && !(block.contains("input") && block["input"].is_object()))
      block["input"] = nlohmann::json::object();
  messages_.push_back({{"role", "assistant"}, {"content", std::move(content)}});
  return turn;
}

void AnthropicProvider::AddToolResults(const std::vector<ToolResult>& results) {
  // Every result of one turn goes in a single user message, tool_result blocks only.
  nlohmann::json content = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json block = {{"type", "tool_result"}, {"tool_use_id", r.tool_call_id}, {"content", r.content}};
    if (r.is_error) block["is_error"] = true;
    content.push_back(std::move(block));
  }
  messages_.push_back({{"role", "user"}, {"content", content}});
}

}  // namespace nsbox::agent
