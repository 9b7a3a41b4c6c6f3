// tests/unit/bounded_json_test.cc: ParseBoundedJson, the parser for JSON from peers nsbox does not trust.
#include <string>

#include <catch2/catch.hpp>

#include "sandbox/base/bounded_json.h"

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

TEST_CASE("json: a long array of objects (an MCP batch of many pings) parses whole, in linear time", "[json]") {
  std::string text = "[";
  for (int i = 0; i < 60'000; ++i) text += (i ? "," : "") + std::string(R"({"jsonrpc":"2.0","id":)") +
                                           std::to_string(i) + R"(,"method":"ping"})";
  text += "]";
  nlohmann::json batch = ParseBoundedJson(text);  // 240001 values
  REQUIRE(batch.size() == 60'000);
  CHECK(batch[59'999]["id"] == 59'999);
}

TEST_CASE("json with more values than the bound is refused, however few bytes each takes", "[json]") {
  auto empties = [](size_t n) {
    std::string text = "[";
    for (size_t i = 0; i < n; ++i) text += i ? ",{}" : "{}";
    return text + "]";
  };
  CHECK(ParseBoundedJson(empties(nsbox::kMaxJsonValues - 1)).size() == nsbox::kMaxJsonValues - 1);  // and the array
  CHECK_THROWS_AS(ParseBoundedJson(empties(nsbox::kMaxJsonValues)), nsbox::JsonTooManyValues);
  std::string zeros = "[0";
  for (size_t i = 0; i < nsbox::kMaxJsonValues; ++i) zeros += ",0";
  CHECK_THROWS_WITH(ParseBoundedJson(zeros + "]"), "the JSON has more than 262144 values");
  CHECK(nsbox::ParseBoundedJsonOrDiscarded(empties(1'000'000)).is_discarded());
}

TEST_CASE("json with a key twice in one object is refused, at any depth; equal keys in different objects are not",
          "[json]") {
  CHECK_THROWS_WITH(ParseBoundedJson(R"({"timeout": 5, "timeout": 3600})"),
                    "the JSON has the key \"timeout\" twice in one object");
  CHECK_THROWS_AS(ParseBoundedJson(R"({"limits": {"memory": "1G", "pids": 4, "memory": "64G"}})"),
                  nsbox::JsonDuplicateKey);
  CHECK_THROWS_AS(ParseBoundedJson(R"([{"a": 1}, {"b": 2, "b": 2}])"), nsbox::JsonRefused);
  // The same key once the escapes are read.
  CHECK_THROWS_AS(ParseBoundedJson(R"({"argv": [], "\u0061rgv": ["sh"]})"), nsbox::JsonDuplicateKey);
  const nlohmann::json fine = ParseBoundedJson(R"({"a": {"a": [{"a": 1}, {"a": 2}]}, "b": null, "c": [1, -2, 3.5]})");
  CHECK(fine == nlohmann::json::parse(R"({"a": {"a": [{"a": 1}, {"a": 2}]}, "b": null, "c": [1, -2, 3.5]})"));
  CHECK(fine["c"][1].is_number_integer());
  CHECK(ParseBoundedJson("18446744073709551615").is_number_unsigned());
}

TEST_CASE("json errors are nlohmann's own: a number too large is out_of_range, trailing text a parse error", "[json]") {
  CHECK_THROWS_AS(ParseBoundedJson("[1e400]"), nlohmann::json::out_of_range);
  CHECK_THROWS_AS(ParseBoundedJson("{} {}"), nlohmann::json::parse_error);
  CHECK_THROWS_AS(ParseBoundedJson(""), nlohmann::json::parse_error);
  CHECK(nsbox::ParseBoundedJsonOrDiscarded(R"({"a": 1, "a": 1})").is_discarded());
}

TEST_CASE("json with a NUL byte is refused: nlohmann would take it for the end and never read what follows", "[json]") {
  using namespace std::string_literals;
  CHECK_THROWS_WITH(ParseBoundedJson(R"({"cmd": "echo ok"})"s + '\0' + "{garbage"),
                    "the JSON has a NUL byte (at byte 19)");
  CHECK_THROWS_AS(ParseBoundedJson("{}\0"s), nsbox::JsonNulByte);
  CHECK_THROWS_AS(ParseBoundedJson("\0"s), nsbox::JsonRefused);
  // Inside a string it is refused too (a raw control character); escaped it is a string's NUL.
  CHECK_THROWS(ParseBoundedJson("[\"a\0b\"]"s));
  CHECK(ParseBoundedJson(R"(["a\u0000b"])")[0].get<std::string>() == "a\0b"s);
  CHECK(nsbox::ParseBoundedJsonOrDiscarded("{}\0 trailing"s).is_discarded());
}
