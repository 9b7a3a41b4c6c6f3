// Unit tests: size and duration parsing as the CLI accepts them.
#include <catch2/catch.hpp>

#include "sandbox/spec/units.h"

using namespace nsbox;

TEST_CASE("sizes accept binary units and reject junk") {
  CHECK(ParseSize("64K").value() == 64 * 1024);
  CHECK(ParseSize("1M").value() == 1024 * 1024);
  CHECK(ParseSize("512m").value() == 512ull << 20);
  CHECK(ParseSize("2G").value() == 2ull << 30);
  CHECK(ParseSize("100").value() == 100);
  CHECK(ParseSize("1.5K").value() == 1536);
  CHECK_FALSE(ParseSize("").ok());
  CHECK_FALSE(ParseSize("-1M").ok());
  CHECK_FALSE(ParseSize("12Q").ok());
  CHECK_FALSE(ParseSize("M").ok());
  CHECK_FALSE(ParseSize("99999999999T").ok());
  CHECK(ParseSize("12Q").status().message().find("unknown unit") != std::string::npos);
}

TEST_CASE("durations accept ms, s, m, h and reject zero and junk") {
  using std::chrono::milliseconds;
  CHECK(ParseDuration("500ms").value() == milliseconds(500));
  CHECK(ParseDuration("10s").value() == milliseconds(10'000));
  CHECK(ParseDuration("2m").value() == milliseconds(120'000));
  CHECK(ParseDuration("1h").value() == milliseconds(3'600'000));
  CHECK(ParseDuration("3").value() == milliseconds(3'000));
  CHECK(ParseDuration("1.5s").value() == milliseconds(1'500));
  CHECK_FALSE(ParseDuration("0").ok());
  CHECK_FALSE(ParseDuration("10x").ok());
  CHECK_FALSE(ParseDuration("s").ok());
  CHECK_FALSE(ParseDuration("-5s").ok());
}

TEST_CASE("sizes format back to their shortest unit") {
  CHECK(FormatSize(512ull << 20) == "512M");
  CHECK(FormatSize(1536) == "1536");
  CHECK(FormatSize(1024) == "1K");
}

TEST_CASE("errors are one printable line, whatever the input echoed (found by the options fuzzer)") {
  auto status = ParseSize("12\nQ\x1b[2J").status();
  REQUIRE_FALSE(status.ok());
  CHECK(status.message().find('\n') == std::string::npos);
  CHECK(status.message().find('\x1b') == std::string::npos);
  CHECK(status.message().find("\\n") != std::string::npos);
  std::string huge(1 << 20, '7');
  huge += "Q";
  CHECK(ParseSize(huge).status().message().size() < 5000);
}
