// tests/unit/bounded_json_test.cc: ParseBoundedJson, the parser for JSON from peers nsbox does not trust.
#include <string>

#include <catch2/catch.hpp>

#include "src/cli/bounded_json.h"

using nsbox::JsonNestingDepth;
using nsbox::kMaxJsonDepth;
using nsbox::ParseBoundedJson;

TEST_CASE("json nesting depth counts brackets outside strings only", "[json]") {
  CHECK(JsonNestingDepth("1") == 0);
  CHECK(JsonNestingDepth(R"({"a": [1, {"b": []}]})") == 4);
  CHECK(JsonNestingDepth(R"(["[[[[", "{{", "\"[[[", "\\"])") == 1);
  CHECK(JsonNestingDepth(R"([[], [], [[]]])") == 3);
}

TEST_CASE("json nested deeper than the bound is refused before parsing; up to it parses", "[json]") {
  const std::string at_bound = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  CHECK(ParseBoundedJson(at_bound).is_array());
  const std::string deeper = "[" + at_bound + "]";
  CHECK_THROWS_AS(ParseBoundedJson(deeper), nsbox::JsonTooDeep);
  // Far deeper, and cut short: still the depth error, not a stack overflow in the parser or a destructor.
  CHECK_THROWS_AS(ParseBoundedJson(std::string(200'000, '[')), nsbox::JsonTooDeep);
  // Brackets in strings do not count towards the bound.
  CHECK(ParseBoundedJson("[\"" + std::string(1000, '[') + "\"]")[0].get<std::string>().size() == 1000);
}

TEST_CASE("json that is not JSON throws nlohmann's parse error; OrDiscarded gives a discarded value", "[json]") {
  CHECK_THROWS_AS(ParseBoundedJson("{\"a\": "), nlohmann::json::parse_error);
  CHECK_THROWS_AS(ParseBoundedJson("[1, 2"), nlohmann::json::parse_error);
  CHECK(nsbox::ParseBoundedJsonOrDiscarded("[1, 2").is_discarded());
  CHECK(nsbox::ParseBoundedJsonOrDiscarded(std::string(500, '{')).is_discarded());
}

TEST_CASE("json: a long array of objects (an MCP batch of many pings) parses whole", "[json]") {
  std::string text = "[";
  for (int i = 0; i < 200'000; ++i) text += (i ? "," : "") + std::string(R"({"jsonrpc":"2.0","id":)") +
                                            std::to_string(i) + R"(,"method":"ping"})";
  text += "]";
  nlohmann::json batch = ParseBoundedJson(text);
  REQUIRE(batch.size() == 200'000);
  CHECK(batch[199'999]["id"] == 199'999);
}
