// Unit tests of the ClientHello server_name parser: well-formed hellos in every framing, and malformed ones that must
// be refused without reading past the input.
#include "src/netproxy/tls_hello.h"

#include <catch2/catch.hpp>

#include <random>

#include "tests/netproxy/tls_hello.h"

using namespace nsbox::netproxy;
using namespace nsbox::netproxy::testing;
using Status = ClientHelloName::Status;

namespace {

std::string Extensions(const std::vector<std::string>& names) {
  return Be(43, 2) + Vec(Vec(Be(0x0304, 2), 1), 2) + ServerNameExtension(names);
}

}  // namespace

TEST_CASE("the server name of a typical ClientHello is found, lower-cased and without a trailing dot") {
  auto hello = ParseClientHelloName(ClientHelloFor("Pypi.ORG."));
  CHECK(hello.status == Status::kFound);
  CHECK(hello.server_name == "pypi.org");
  // Bytes behind the ClientHello (a second record) do not matter.
  hello = ParseClientHelloName(ClientHelloFor("pypi.org") + Records(std::string(40, 'x')));
  CHECK(hello.status == Status::kFound);
}

TEST_CASE("a ClientHello split over records, or given byte by byte, needs more until it is whole") {
  const std::string whole = Records(ClientHelloMessage(Extensions({"files.pythonhosted.org"})), 7);
  for (size_t length = 0; length < whole.size(); ++length) {
    INFO(length);
    REQUIRE(ParseClientHelloName(whole.substr(0, length)).status == Status::kNeedMore);
  }
  auto hello = ParseClientHelloName(whole);
  CHECK(hello.status == Status::kFound);
  CHECK(hello.server_name == "files.pythonhosted.org");
}

TEST_CASE("a ClientHello without server_name, or with an empty list, has no name") {
  CHECK(ParseClientHelloName(Records(ClientHelloMessage(Be(43, 2) + Vec(Vec(Be(0x0304, 2), 1), 2)))).status ==
        Status::kAbsent);
  CHECK(ParseClientHelloName(Records(ClientHelloMessage("", false))).status == Status::kAbsent);
  CHECK(ParseClientHelloName(Records(ClientHelloMessage(ServerNameExtension({})))).status == Status::kAbsent);
}

TEST_CASE("what is not a TLS ClientHello is malformed as soon as its first bytes show it") {
  CHECK(ParseClientHelloName("G").status == Status::kMalformed);
  CHECK(ParseClientHelloName("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n").status == Status::kMalformed);
  CHECK(ParseClientHelloName("\x80\x2e\x01\x03\x01").status == Status::kMalformed);  // SSL 2 compatible hello
  // A handshake record whose message is not a ClientHello (a ServerHello), an empty record, a record too long.
  CHECK(ParseClientHelloName(Records(Be(2, 1) + Vec(std::string(40, 'x'), 3))).status == Status::kMalformed);
  CHECK(ParseClientHelloName(Be(22, 1) + Be(0x0301, 2) + Be(0, 2)).status == Status::kMalformed);
  CHECK(ParseClientHelloName(Be(22, 1) + Be(0x0301, 2) + Be(0xffff, 2)).status == Status::kMalformed);
  CHECK(ParseClientHelloName(Be(22, 1) + Be(0x0701, 2) + Be(10, 2)).status == Status::kMalformed);
  // A ClientHello claiming more than the proxy reads, however it is framed.
  CHECK(ParseClientHelloName(Records(Be(1, 1) + Be(1 << 20, 3))).status == Status::kMalformed);
}

TEST_CASE("a ClientHello whose lengths do not add up, or whose names are bad, is malformed") {
  std::vector<std::pair<const char*, std::string>> cases = {
      {"two host names", ClientHelloMessage(ServerNameExtension({"allowed.test", "evil.test"}))},
      {"two server_name extensions",
       ClientHelloMessage(ServerNameExtension({"allowed.test"}) + ServerNameExtension({"evil.test"}))},
      {"an empty host name", ClientHelloMessage(ServerNameExtension({""}))},
      {"a NUL in the name", ClientHelloMessage(ServerNameExtension({std::string("allowed.test\0evil.test", 22)}))},
      {"a space in the name", ClientHelloMessage(ServerNameExtension({"allowed.test evil"}))},
      {"a name longer than 255", ClientHelloMessage(ServerNameExtension({std::string(256, 'a')}))},
      {"a name list longer than its extension",
       ClientHelloMessage(Be(0, 2) + Vec(Be(40, 2) + Be(0, 1) + Vec("allowed.test", 2), 2))},
      {"an extension longer than the list", ClientHelloMessage(Be(0, 2) + Be(200, 2) + "abc")},
      {"extensions not filling the hello", ClientHelloMessage(ServerNameExtension({"allowed.test"})) + "junk"},
      {"no cipher suites",
       Be(1, 1) +
           Vec(Be(0x0303, 2) + std::string(32, 'r') + Vec("", 1) + Vec("", 2) + Vec(std::string(1, '\0'), 1), 3)},
      {"a session id of 33 bytes", Be(1, 1) + Vec(Be(0x0303, 2) + std::string(32, 'r') + Vec(std::string(33, 's'), 1) +
                                                      Vec(Be(0x1301, 2), 2) + Vec(std::string(1, '\0'), 1),
                                                  3)},
      {"a hello cut inside its fixed fields", Be(1, 1) + Vec(Be(0x0303, 2) + std::string(20, 'r'), 3)},
  };
  for (const auto& [what, message] : cases) {
    INFO(what);
    // "junk" behind the extensions must be inside the message's own length to count as its content.
    std::string framed = message;
    if (std::string(what) == "extensions not filling the hello") {
      std::string body = message.substr(4);
      framed = Be(1, 1) + Vec(body, 3);
    }
    CHECK(ParseClientHelloName(Records(framed)).status == Status::kMalformed);
  }
}

// The outer name of an Encrypted Client Hello is the ECH provider's; the name the client reaches is encrypted.
TEST_CASE("a ClientHello with Encrypted Client Hello is refused, whatever its outer name") {
  const std::string ech = Be(0xfe0d, 2) + Vec(Be(0, 1) + std::string(60, 'e'), 2);
  for (const std::string& extensions : {ServerNameExtension({"allowed.test"}) + ech,
                                        ech + ServerNameExtension({"allowed.test"}), ech}) {
    auto hello = ParseClientHelloName(Records(ClientHelloMessage(extensions)));
    CHECK(hello.status == Status::kMalformed);
    CHECK(hello.why.find("Encrypted Client Hello") != std::string::npos);
  }
}

TEST_CASE("random bytes and every truncation of a ClientHello never crash the parser or claim a name") {
  std::mt19937 random(24);
  const std::string hello = ClientHelloFor("allowed.test");
  for (int round = 0; round < 5000; ++round) {
    std::string bytes = hello;
    // Flip a few bytes after the record header (the framing), then cut somewhere.
    for (int flips = 1 + static_cast<int>(random() % 3); flips > 0; --flips)
      bytes[5 + random() % (bytes.size() - 5)] = static_cast<char>(random());
    bytes.resize(random() % (bytes.size() + 1));
    auto parsed = ParseClientHelloName(bytes);
    if (parsed.status == Status::kFound) CHECK(parsed.server_name.size() <= 255);
  }
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(random() % 300, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    ParseClientHelloName(bytes);
  }
}
