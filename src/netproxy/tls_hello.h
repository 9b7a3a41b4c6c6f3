// The server name (SNI) a TLS client asks for, read from the first bytes of a CONNECT tunnel: a bounded parser of the
// ClientHello's records and extensions that never reads past what it was given.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace nsbox::netproxy {

struct ClientHelloName {
  enum class Status {
    kNeedMore,   // a well-formed beginning: more bytes are needed to decide
    kFound,      // server_name holds the one host_name the ClientHello names
    kAbsent,     // a complete ClientHello without a server_name extension (or with an empty list)
    kMalformed,  // not a TLS ClientHello, or one whose lengths or names do not add up (why says which)
  };
  Status status = Status::kNeedMore;
  std::string server_name;  // as sent, lower-cased, without a trailing dot
  std::string why;          // for kMalformed
};

// The most the proxy reads of a ClientHello: real ones are below 2 KiB (a post-quantum key share included); TLS lets
// a handshake message run to 16 MiB over many records, which a proxy has no reason to buffer.
constexpr size_t kMaxClientHelloBytes = 64 * 1024;

// `bytes`: everything the client sent so far on the tunnel (TLS records, from the first byte). Needs at most
// kMaxClientHelloBytes of records plus their 5-byte headers; beyond that the answer is kMalformed.
ClientHelloName ParseClientHelloName(std::string_view bytes);

}  // namespace nsbox::netproxy
