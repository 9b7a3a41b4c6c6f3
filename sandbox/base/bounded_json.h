// JSON from peers nsbox does not trust (API and MCP clients, model providers, job files, a sandbox's REPL channel,
// seccomp profiles and image templates), parsed with its nesting bounded and a key given twice in one object refused.
// nlohmann parses iteratively but copies and compares recursively: a value nested 100k deep (200 KB of text) overflows
// the stack of the first code that copies it, so such text is refused up front. Nor is the number of values left to the
// size cap of the text: each costs about 50 times its two bytes of "{}," once parsed (a 31 MiB line of them took 1.9
// GB), so past kMaxJsonValues the parse stops. nlohmann keeps the last of two equal keys; a proxy or a log that read
// the first would see another request than nsbox runs ({"timeout": 5, "timeout": 3600}), so nsbox takes neither.
// nlohmann also takes a NUL byte between tokens for the end of the text (text after it is never looked at): no JSON has
// a raw NUL, so text with one is refused.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace nsbox {

// Deeper than any message nsbox takes or sends (its deepest, a tool schema, nests under ten).
inline constexpr int kMaxJsonDepth = 128;
// More values than any message nsbox takes (the largest, an exec's result with 20000 changed files, has about 80000):
// at most some tens of MiB once parsed, whatever the text.
inline constexpr size_t kMaxJsonValues = 256 * 1024;

// JSON nsbox does not take, though nlohmann would: too deep, too many values, a key twice in one object, a NUL byte.
class JsonRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JsonTooDeep : public JsonRefused {
 public:
  JsonTooDeep() : JsonRefused("the JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels") {}
};

class JsonTooManyValues : public JsonRefused {
 public:
  JsonTooManyValues() : JsonRefused("the JSON has more than " + std::to_string(kMaxJsonValues) + " values") {}
};

class JsonNulByte : public JsonRefused {
 public:
  explicit JsonNulByte(size_t offset)
      : JsonRefused("the JSON has a NUL byte (at byte " + std::to_string(offset + 1) + ")") {}
};

class JsonDuplicateKey : public JsonRefused {
 public:
  explicit JsonDuplicateKey(const std::string& key)
      : JsonRefused("the JSON has the key " +
                    nlohmann::json(key).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) +
                    " twice in one object") {}
};

// The deepest nesting of arrays and objects in `text`, brackets inside strings not counted. For text that is JSON this
// is its depth; a parser cannot nest deeper than it in any prefix of other text either, because on the prefix it
// accepts it sees the same strings.
inline int JsonNestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
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

namespace json_internal {

// nlohmann's SAX events built into a value as its own DOM parser does, but with each key checked against the keys its
// object already has (a map lookup: no pass over the parent, unlike the parser callback above).
class StrictDomBuilder {
 public:
  using json = nlohmann::json;
  explicit StrictDomBuilder(json* root) : root_(root) {}

  bool null() { return Put(nullptr) != nullptr; }
  bool boolean(bool value) { return Put(value) != nullptr; }
  bool number_integer(json::number_integer_t value) { return Put(value) != nullptr; }
  bool number_unsigned(json::number_unsigned_t value) { return Put(value) != nullptr; }
  bool number_float(json::number_float_t value, const json::string_t& /*text*/) { return Put(value) != nullptr; }
  bool string(json::string_t& value) { return Put(std::move(value)) != nullptr; }
  bool binary(json::binary_t& value) { return Put(json::binary(std::move(value))) != nullptr; }
  bool start_object(std::size_t /*size*/) {
    open_.push_back(Put(json::object()));
    return true;
  }
  bool key(json::string_t& key) {
    json& object = *open_.back();
    if (object.contains(key)) throw JsonDuplicateKey(key);
    slot_ = &object[key];
    return true;
  }
  bool end_object() {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*size*/) {
    open_.push_back(Put(json::array()));
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  // nlohmann passes its own exception (parse_error, or out_of_range for a number too large): thrown as
  // json::parse(text) throws it.
  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const Exception& error) {
    throw error;
  }

 private:
  // The value's place: the root, the end of the open array, or the slot of the open object's last key. An open
  // container's address stays put: only its own elements move when it grows.
  json* Put(json value) {
    if (++values_ > kMaxJsonValues) throw JsonTooManyValues();
    if (open_.empty()) {
      *root_ = std::move(value);
      return root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    *slot_ = std::move(value);
    return slot_;
  }

  json* root_;
  std::vector<json*> open_;
  json* slot_ = nullptr;
  size_t values_ = 0;
};

}  // namespace json_internal

// As nlohmann::json::parse(text): throws nlohmann::json::exception for text that is not JSON, JsonTooDeep for text
// nested deeper than kMaxJsonDepth, JsonTooManyValues past kMaxJsonValues, JsonDuplicateKey for an object with a key
// twice, JsonNulByte for text with a NUL byte. The depth is found by a scan first, not by nlohmann's parser callback:
// with a callback, closing each object looks through its parent, so an array of n objects took time in n squared.
inline nlohmann::json ParseBoundedJson(std::string_view text) {
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) throw JsonNulByte(nul);
  if (JsonNestingDepth(text) > kMaxJsonDepth) throw JsonTooDeep();
  nlohmann::json value;
  json_internal::StrictDomBuilder builder(&value);
  nlohmann::json::sax_parse(text, &builder);
  return value;
}

// An exception's text for a message, without nlohmann's "[json.exception.parse_error.101] " in front of it.
inline std::string JsonErrorText(const std::exception& e) {
  std::string what = e.what();
  if (auto end = what.find("] "); what.starts_with("[json.") && end != std::string::npos) what.erase(0, end + 2);
  return what;
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
