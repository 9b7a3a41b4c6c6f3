// JSON from peers nsbox does not trust (API and MCP clients, model providers, job files, a sandbox's REPL channel),
// parsed with its nesting bounded. nlohmann parses iteratively but copies and compares recursively: a value nested
// 100k deep (200 KB of text) overflows the stack of the first code that copies it, so such text is refused up front.
#pragma once

#include <algorithm>
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

// The deepest nesting of arrays and objects in `text`, brackets inside strings not counted. For text that is JSON this
// is its depth; a parser cannot nest deeper than it in any prefix of other text either, because on the prefix it
// accepts it sees the same strings.
inline int JsonNestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// As nlohmann::json::parse(text): throws nlohmann::json::exception for text that is not JSON, JsonTooDeep for text
// nested deeper than kMaxJsonDepth. The depth is found by a scan first, not by nlohmann's parser callback: with a
// callback, closing each object looks through its parent, so an array of n objects took time in n squared.
inline nlohmann::json ParseBoundedJson(std::string_view text) {
  if (JsonNestingDepth(text) > kMaxJsonDepth) throw JsonTooDeep();
  return nlohmann::json::parse(text);
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
