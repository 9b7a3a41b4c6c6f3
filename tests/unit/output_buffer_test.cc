// Unit tests: OutputBuffer keeps head and tail within its budget and says how much it cut.
#include <catch2/catch.hpp>

#include <string>

#include "sandbox/output_buffer.h"

using nsbox::OutputBuffer;

TEST_CASE("output under the limit is kept whole") {
  OutputBuffer buf(100);
  buf.Append("hello ");
  buf.Append("world");
  CHECK(buf.Contents() == "hello world");
  CHECK(buf.total_bytes() == 11);
  CHECK_FALSE(buf.truncated());
}

TEST_CASE("a flood keeps the head and the tail with a marker counting the cut bytes") {
  OutputBuffer buf(20);
  buf.Append("HEAD-HEAD-");
  for (int i = 0; i < 1000; ++i) buf.Append("middle");
  buf.Append("-TAIL-TAIL");
  std::string out = buf.Contents();
  CHECK(buf.truncated());
  CHECK(buf.total_bytes() == 20 + 6000);
  CHECK(out.starts_with("HEAD-HEAD-"));
  CHECK(out.ends_with("-TAIL-TAIL"));
  CHECK(out.find("[nsbox: 6000 bytes cut]") != std::string::npos);
}

TEST_CASE("the tail ring keeps the last bytes across many small and large appends") {
  OutputBuffer buf(8);
  std::string all;
  for (int i = 0; i < 500; ++i) {
    std::string piece = std::to_string(i) + (i % 7 == 0 ? std::string(37, 'x') : "");
    buf.Append(piece);
    all += piece;
  }
  std::string out = buf.Contents();
  CHECK(out.substr(0, 4) == all.substr(0, 4));
  CHECK(out.substr(out.size() - 4) == all.substr(all.size() - 4));
}

TEST_CASE("a zero limit keeps nothing but still counts") {
  OutputBuffer buf(0);
  buf.Append("abc");
  CHECK(buf.total_bytes() == 3);
  CHECK(buf.truncated());
  CHECK(buf.Contents().find("3 bytes cut") != std::string::npos);
}
