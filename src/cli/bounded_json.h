// JSON from peers nsbox does not trust (API and MCP clients, model providers, job files, a sandbox's REPL channel),
// parsed with its nesting bounded. nlohmann parses iteratively but copies and compares recursively: a value nested
// 100k deep (200 KB of text) overflows the stack of the first code that copies it, so such text is refused up front.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nsbox {

// Deeper than any message nsbox takes or sends (its deepest, a tool schema, nests under ten).
inline constexpr int kMaxJsonDepth = 128;

class JsonTooDeep : public std::runtime_error {
 public:
  JsonTooDeep() : std::runtime_error("the JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels") {}
};

// As nlohmann::json::parse(text): throws nlohmann::json::exception for text that is not JSON, JsonTooDeep for text
// nested deeper than kMaxJsonDepth.
inline nlohmann::json ParseBoundedJson(std::string_view text) {
  return nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth) throw JsonTooDeep();
    return true;
  });
}

// As nlohmann::json::parse(text, nullptr, false): a discarded value (is_discarded()) for either.
inline nlohmann::json ParseBoundedJsonOrDiscarded(std::string_view text) {
  try {
    return ParseBoundedJson(text);
  } catch (const std::exception&) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
}

}  // namespace nsbox
