// Unit tests: OutputBuffer keeps head and tail within its budget and says how much it cut.
#include <catch2/catch.hpp>

#include <algorithm>
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

TEST_CASE("the kept byte count leaves out the cut marker and never exceeds what was written") {
  for (uint64_t limit : {0, 1, 7, 1024}) {
    for (uint64_t written : {0, 3, 1024, 1288890}) {
      INFO("limit " << limit << ", written " << written);
      OutputBuffer buf(limit);
      buf.Append(std::string(written, 'y'));
      CHECK(OutputBuffer::KeptBytes(buf.Contents(), written) == std::min(limit, written));
    }
  }
  // Text in the program's own output that looks like a marker is the program's.
  OutputBuffer buf(80);
  buf.Append(std::string(10, 'a') + "\n[nsbox: 5 bytes cut]\n" + std::string(100, 'c'));
  REQUIRE(buf.Contents().find("\n[nsbox: 5 bytes cut]\n") == 10);
  CHECK(OutputBuffer::KeptBytes(buf.Contents(), 132) == 80);
  // Contents whose invalid UTF-8 was replaced on the way (a result's JSON) still count by their marker.
  OutputBuffer binary(4);
  binary.Append("\xff\xff" + std::string(8, 'b') + "\xff\xff");
  std::string replaced = binary.Contents();
  for (size_t at; (at = replaced.find('\xff')) != std::string::npos;) replaced.replace(at, 1, "\xEF\xBF\xBD");
  CHECK(OutputBuffer::KeptBytes(replaced, 12) == 4);
}
