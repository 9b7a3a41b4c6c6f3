// Test support: hand-built TLS ClientHello bytes, with the server_name extension and the framing as a test wants them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nsbox::netproxy::testing {

inline std::string Be(uint32_t value, int width) {
  std::string out;
  for (int i = width - 1; i >= 0; --i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}

// A length-prefixed field.
inline std::string Vec(const std::string& body, int width) {
  return Be(static_cast<uint32_t>(body.size()), width) + body;
}

// The server_name extension naming each of `names` as a host_name.
inline std::string ServerNameExtension(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& name : names) list += Be(0, 1) + Vec(name, 2);
  return Be(0, 2) + Vec(Vec(list, 2), 2);
}

// A ClientHello handshake message (header included) with these extensions (already encoded, each with its
// type and length); `with_extensions` false leaves out even the extensions' length field.
inline std::string ClientHelloMessage(const std::string& extensions, bool with_extensions = true) {
  std::string body = Be(0x0303, 2) + std::string(32, '\x11') + Vec(std::string(32, '\x22'), 1) +
                     Vec(Be(0x1301, 2) + Be(0x1302, 2), 2) + Vec(std::string(1, '\0'), 1);
  if (with_extensions) body += Vec(extensions, 2);
  return Be(1, 1) + Vec(body, 3);
}

// The message in TLS handshake records of at most `fragment` bytes each.
inline std::string Records(const std::string& message, size_t fragment = 16384) {
  std::string out;
  for (size_t at = 0; at < message.size(); at += fragment)
    out += Be(22, 1) + Be(0x0301, 2) + Vec(message.substr(at, fragment), 2);
  return out;
}

// A typical ClientHello asking for `name`: a supported_versions extension before, ALPN after.
inline std::string ClientHelloFor(const std::string& name) {
  std::string supported_versions = Be(43, 2) + Vec(Vec(Be(0x0304, 2) + Be(0x0303, 2), 1), 2);
  std::string alpn = Be(16, 2) + Vec(Vec(Vec("h2", 1) + Vec("http/1.1", 1), 2), 2);
  return Records(ClientHelloMessage(supported_versions + ServerNameExtension({name}) + alpn));
}

}  // namespace nsbox::netproxy::testing
