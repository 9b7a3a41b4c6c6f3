// The ClientHello's server_name (RFC 8446 section 4.1.2, RFC 6066 section 3), read with every length checked against
// what encloses it: records of type handshake are joined into the first handshake message, which must be a
// ClientHello; its extensions are walked to the server_name extension.
#include "src/netproxy/tls_hello.h"

#include <cstdint>

namespace nsbox::netproxy {
namespace {

using Status = ClientHelloName::Status;

constexpr uint8_t kRecordHandshake = 22;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr uint16_t kExtensionServerName = 0;
// Encrypted Client Hello (draft-ietf-tls-esni; sent by browsers and curl): the real name is in the encrypted
// inner hello, which the proxy cannot read; the outer name is only the ECH provider's.
constexpr uint16_t kExtensionEncryptedClientHello = 0xfe0d;
constexpr uint8_t kNameTypeHostName = 0;
constexpr size_t kMaxRecordPayload = (1 << 14) + 2048;  // TLSPlaintext's limit, with TLS 1.2's expansion allowance
constexpr size_t kMaxHostName = 255;

ClientHelloName Malformed(std::string why) {
  ClientHelloName result;
  result.status = Status::kMalformed;
  result.why = std::move(why);
  return result;
}

// A cursor over a bounded span: every read checks what is left and fails (sticky) instead of reading past it.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool ok() const { return ok_; }
  size_t left() const { return ok_ ? data_.size() - pos_ : 0; }
  uint32_t Number(size_t width) {
    if (!ok_ || left() < width) return ok_ = false, 0;
    uint32_t value = 0;
    for (size_t i = 0; i < width; ++i) value = (value << 8) | static_cast<uint8_t>(data_[pos_ + i]);
    pos_ += width;
    return value;
  }
  std::string_view Bytes(size_t length) {
    if (!ok_ || left() < length) return ok_ = false, std::string_view();
    std::string_view out = data_.substr(pos_, length);
    pos_ += length;
    return out;
  }
  // A field of `width` length bytes followed by that many bytes.
  std::string_view Vector(size_t width) { return Bytes(Number(width)); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// host_name: 1 to 255 bytes of printable ASCII without spaces (A-labels; an IDN comes encoded), case-folded.
bool HostName(std::string_view raw, std::string& out) {
  if (raw.empty() || raw.size() > kMaxHostName) return false;
  out.clear();
  for (char c : raw) {
    auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) return false;
    out.push_back(static_cast<char>(byte >= 'A' && byte <= 'Z' ? byte - 'A' + 'a' : byte));
  }
  if (out.back() == '.') out.pop_back();
  return !out.empty();
}

// The server_name extension's body: a list of (name_type, name); one host_name at most (RFC 6066).
ClientHelloName ServerNameList(std::string_view body) {
  Reader extension(body);
  Reader list(extension.Vector(2));
  if (!extension.ok() || extension.left() != 0) return Malformed("the server_name extension's length does not add up");
  ClientHelloName result;
  result.status = Status::kAbsent;
  while (list.ok() && list.left() > 0) {
    uint32_t type = list.Number(1);
    std::string_view name = list.Vector(2);
    if (!list.ok()) return Malformed("a server_name entry runs past its list");
    if (type != kNameTypeHostName) continue;  // other name types are not defined; a server ignores them
    if (result.status == Status::kFound) return Malformed("the server_name extension names more than one host");
    if (!HostName(name, result.server_name)) return Malformed("the server_name is not a valid host name");
    result.status = Status::kFound;
  }
  return result;
}

// The ClientHello body (after the handshake header).
ClientHelloName ClientHello(std::string_view body) {
  Reader hello(body);
  uint32_t legacy_version = hello.Number(2);
  hello.Bytes(32);  // random
  std::string_view session_id = hello.Vector(1);
  std::string_view cipher_suites = hello.Vector(2);
  std::string_view compression = hello.Vector(1);
  if (!hello.ok()) return Malformed("the ClientHello ends inside its fixed fields");
  if (legacy_version >> 8 != 3) return Malformed("the ClientHello's version is not TLS");
  if (session_id.size() > 32) return Malformed("the ClientHello's session id is longer than 32 bytes");
  if (cipher_suites.empty() || cipher_suites.size() % 2 != 0)
    return Malformed("the ClientHello's cipher suites are malformed");
  if (compression.empty()) return Malformed("the ClientHello lists no compression method");
  ClientHelloName absent;
  absent.status = Status::kAbsent;
  if (hello.left() == 0) return absent;  // no extensions at all (SSL 3.0 style)
  Reader extensions(hello.Vector(2));
  if (!hello.ok() || hello.left() != 0) return Malformed("the ClientHello's extensions do not fill it exactly");
  ClientHelloName found = absent;
  bool seen = false;
  while (extensions.ok() && extensions.left() > 0) {
    uint32_t type = extensions.Number(2);
    std::string_view data = extensions.Vector(2);
    if (!extensions.ok()) return Malformed("an extension runs past the ClientHello's extension list");
    if (type == kExtensionEncryptedClientHello)
      return Malformed("the ClientHello uses Encrypted Client Hello, whose inner server name cannot be checked");
    if (type != kExtensionServerName) continue;
    if (seen) return Malformed("the ClientHello carries two server_name extensions");
    seen = true;
    found = ServerNameList(data);
    if (found.status == Status::kMalformed) return found;
  }
  return found;
}

}  // namespace

ClientHelloName ParseClientHelloName(std::string_view bytes) {
  // Join the payloads of the leading handshake records until the first handshake message is complete.
  std::string message;
  Reader records(bytes);
  ClientHelloName need_more;
  while (true) {
    if (message.size() >= 4) {
      Reader header(message);
      uint32_t type = header.Number(1);
      uint32_t length = header.Number(3);
      if (type != kHandshakeClientHello) return Malformed("the first handshake message is not a ClientHello");
      if (length > kMaxClientHelloBytes) return Malformed("the ClientHello is longer than the proxy reads");
      if (message.size() >= 4 + length) return ClientHello(std::string_view(message).substr(4, length));
    }
    if (records.left() == 0) return need_more;
    if (records.left() < 5) {
      // Judge what there is of the header already: a first byte that is not a handshake record needs no more.
      if (static_cast<uint8_t>(bytes[bytes.size() - records.left()]) != kRecordHandshake)
        return Malformed("the tunnel does not start with a TLS handshake record");
      return need_more;
    }
    uint32_t type = records.Number(1);
    uint32_t version = records.Number(2);
    uint32_t length = records.Number(2);
    if (type != kRecordHandshake) return Malformed("the tunnel does not start with a TLS handshake record");
    if (version >> 8 != 3) return Malformed("the TLS record's version is not TLS");
    if (length == 0 || length > kMaxRecordPayload) return Malformed("the TLS record's length is out of bounds");
    if (message.size() + length > kMaxClientHelloBytes + 4)
      return Malformed("the ClientHello is longer than the proxy reads");
    if (records.left() < length) return need_more;
    std::string_view payload = records.Bytes(length);
    message.append(payload.data(), payload.size());
  }
}

}  // namespace nsbox::netproxy
