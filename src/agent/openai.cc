// OpenAIProvider: request assembly and response checking for Chat Completions.
#include "src/agent/openai.h"
#include "sandbox/base/bounded_json.h"

#include <fmt/format.h>

namespace nsbox::agent {

OpenAIProvider::OpenAIProvider(ProviderConfig config) : Provider(std::move(config)) {
  if (!config_.system_prompt.empty()) messages_.push_back({{"role", "system"}, {"content", config_.system_prompt}});
}

std::string OpenAIProvider::url() const { return config_.base_url + "/chat/completions"; }

std::vector<std::string> OpenAIProvider::headers() const {
  std::vector<std::string> h{"Content-Type: application/json"};
  if (!config_.api_key.empty()) h.push_back("Authorization: Bearer " + config_.api_key);
  return h;
}

void OpenAIProvider::AddUserText(const std::string& text) {
  messages_.push_back({{"role", "user"}, {"content", text}});
}

nlohmann::json OpenAIProvider::BuildRequest() const {
  nlohmann::json tools = nlohmann::json::array();
  for (const auto& t : config_.tools)
    tools.push_back({{"type", "function"},
                     {"function", {{"name", t.name}, {"description", t.description}, {"parameters", t.input_schema}}}});
  // No token cap is sent: the field's name differs between OpenAI models and compatible servers.
  nlohmann::json body = {{"model", config_.model}, {"messages", messages_}};
  if (!tools.empty()) body["tools"] = tools;
  return body;
}

StatusOr<ModelTurn> OpenAIProvider::AcceptResponse(const nlohmann::json& body) {
  auto bad = [](const std::string& what) { return Status::Error("malformed OpenAI response: " + what); };
  if (!body.is_object()) return bad("the body is not a JSON object");
  if (body.contains("error") && !body["error"].is_null())
    return bad("an error object in a 200 response: " + RedactedErrorMessage(body));
  if (!body.contains("choices") || !body["choices"].is_array() || body["choices"].empty())
    return bad("no \"choices\" array with a choice in it");
  const auto& choice = body["choices"][0];
  if (!choice.is_object() || !choice.contains("message") || !choice["message"].is_object())
    return bad("choices[0] has no \"message\" object");
  const auto& message = choice["message"];
  ModelTurn turn;
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
    turn.stop_reason = choice["finish_reason"].get<std::string>();
  // A refusal (the model declined to answer) has no content: said as such, with its words, not as a malformed turn.
  if (message.contains("refusal") && message["refusal"].is_string() && !message["refusal"].get<std::string>().empty() &&
      (!message.contains("content") || message["content"].is_null()))
    return Status::Error("the model refused to answer: " + OneLine(message["refusal"].get<std::string>()));
  if (message.contains("content") && !message["content"].is_null()) {
    if (!message["content"].is_string()) return bad("choices[0].message.content is neither a string nor null");
    turn.text = message["content"].get<std::string>();
  }
  nlohmann::json history_calls = nlohmann::json::array();
  if (message.contains("tool_calls") && !message["tool_calls"].is_null()) {
    if (!message["tool_calls"].is_array()) return bad("choices[0].message.tool_calls is not an array");
    size_t index = 0;
    for (const auto& tc : message["tool_calls"]) {
      std::string where = fmt::format("tool_calls[{}]", index++);
      if (!tc.is_object() || !tc.contains("id") || !tc["id"].is_string() || tc["id"].get<std::string>().empty())
        return bad(where + " has no \"id\"");
      if (!tc.contains("function") || !tc["function"].is_object() || !tc["function"].contains("name") ||
          !tc["function"]["name"].is_string())
        return bad(where + " has no \"function.name\"");
      ToolCall call;
      call.id = tc["id"].get<std::string>();
      call.name = tc["function"]["name"].get<std::string>();
      std::string arguments = "{}";
      const auto& args = tc["function"].contains("arguments") ? tc["function"]["arguments"] : nlohmann::json();
      if (args.is_string()) {
        // The arguments are JSON text written by the model; bad JSON goes back to it as a tool error.
        arguments = args.get<std::string>();
        auto parsed = ParseBoundedJsonOrDiscarded(arguments);
        if (parsed.is_object()) call.input = parsed;
        else call.input_error = "the function arguments were not a JSON object: " + arguments.substr(0, 200);
      } else if (args.is_object()) {
        // Some compatible servers send an object; the history keeps the standard string form.
        call.input = args;
        arguments = args.dump();
      } else {
        call.input_error = "the function call had no arguments";
      }
      history_calls.push_back(
          {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", arguments}}}});
      turn.tool_calls.push_back(std::move(call));
    }
  }
  if (turn.stop_reason == "tool_calls" && turn.tool_calls.empty())
    return bad("finish_reason is \"tool_calls\" but there are no tool_calls");
  nlohmann::json assistant = {{"role", "assistant"},
                              {"content", turn.text.empty() ? nlohmann::json() : nlohmann::json(turn.text)}};
  if (!history_calls.empty()) assistant["tool_calls"] = history_calls;
  messages_.push_back(std::move(assistant));
  return turn;
}

void OpenAIProvider::AddToolResults(const std::vector<ToolResult>& results) {
  // One "tool" message per call, in the order of the calls.
  for (const auto& r : results)
    messages_.push_back({{"role", "tool"}, {"tool_call_id", r.tool_call_id}, {"content", r.content}});
}

}  // namespace nsbox::agent
