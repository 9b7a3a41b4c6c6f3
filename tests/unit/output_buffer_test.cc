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

TEST_CASE("a cut falls between UTF-8 characters: no half sequence is kept and the marker counts the halves") {
  // "é" is 2 bytes, "€" 3: with these limits the head would end, and the tail start, inside a character.
  for (const std::string ch : {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"}) {
    for (uint64_t limit : {21u, 22u, 23u, 24u, 101u}) {
      OutputBuffer buf(limit);
      std::string all;
      for (int i = 0; i < 200; ++i) all += ch;
      buf.Append(all.substr(0, 7));  // pieces that split characters, as pipe reads do
      buf.Append(all.substr(7));
      REQUIRE(buf.truncated());
      const std::string out = buf.Contents();
      const size_t marker = out.find("\n[nsbox: ");
      REQUIRE(marker != std::string::npos);
      const std::string head = out.substr(0, marker), tail = out.substr(out.find("cut]\n") + 5);
      INFO("char of " << ch.size() << " bytes, limit " << limit);
      CHECK(head.size() % ch.size() == 0);  // whole characters only
      CHECK(tail.size() % ch.size() == 0);
      CHECK(head == all.substr(0, head.size()));
      CHECK(tail == all.substr(all.size() - tail.size()));
      const size_t cut = all.size() - head.size() - tail.size();
      CHECK(out.find("[nsbox: " + std::to_string(cut) + " bytes cut]") == marker + 1);
      CHECK(OutputBuffer::KeptBytes(out, buf.total_bytes()) == head.size() + tail.size());
      CHECK(buf.SettledHead() == head);
    }
  }
}

TEST_CASE("the settled head leaves out a character still being written") {
  OutputBuffer buf(100);
  buf.Append("ab\xE2\x82");
  CHECK(buf.SettledHead() == "ab");
  buf.Append("\xAC");
  CHECK(buf.SettledHead() == "ab\xE2\x82\xAC");
  CHECK(nsbox::CompleteUtf8Prefix("x\xF0\x9F\x98") == 1);
  CHECK(nsbox::CompleteUtf8Prefix("x\xF0\x9F\x98\x80") == 5);
  CHECK(nsbox::CompleteUtf8Prefix("plain") == 5);
}
