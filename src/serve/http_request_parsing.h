// How HttpServer reads a request off libmicrohttpd: its headers and query, its path from the raw URI, the checks that
// refuse an ambiguous or malformed request before its body is read, and the error body of the answers it makes itself.
#pragma once

#include <microhttpd.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace nsbox::serve::http_detail {  // HttpServer's own (http_server.cc): not an API of the service

// A header into the std::map<std::string, std::string> `cls`, its name in lower case (MHD_get_connection_values).
MHD_Result AddToMap(void* cls, MHD_ValueKind, const char* key, const char* value);

// Why the request's length or its sender is ambiguous, or nullptr. libmicrohttpd frames a body by the first
// Content-Length and ignores a second; a proxy in front that took the other would read another request boundary than
// the server (RFC 9112 6.3: such a message is refused). It knows no transfer coding but chunked, and waits for the end
// of a body framed by any other until the client closes. Of two Authorization headers the service would see the last,
// a proxy that checked the first another client.
const char* AmbiguousFraming(MHD_Connection* connection);

// Whether the raw URI has a '%' that does not start a percent-escape (RFC 3986 2.1). Such a URI is refused rather
// than taken literally: "?path=%zz" would name a file "%zz" that a client meant as something else.
bool HasMalformedEscape(const std::string& raw_uri);

// The service's error body, for the answers this layer makes itself. Without a JSON library: a quote, a backslash or
// a byte outside printable ASCII in the message (a client's query key) becomes a space, which keeps the text one line
// of valid JSON.
std::string ErrorBody(std::string_view code, std::string_view message);

// A query parameter given twice ("?path=../x&path=ok.txt"), or nullopt: refused, as the map keeps one of them and a
// proxy or a log could read the other.
std::optional<std::string> RepeatedQueryKey(MHD_Connection* connection);

// A query parameter into the std::map<std::string, std::string> `cls` (MHD_get_connection_values_n). With their
// sizes: a value decoded from "%00" keeps its NUL and the bytes after it, for the handler to refuse.
MHD_Result AddQuery(void* cls, MHD_ValueKind, const char* key, size_t key_size, const char* value, size_t value_size);

// The request's path from its raw URI: percent-decoded segment by segment, except that an encoded '/' stays "%2F"
// (a segment, such as a sandbox id, never gains a slash that would make it two) and an encoded NUL stays "%00".
std::string DecodePath(const std::string& raw_uri);

}  // namespace nsbox::serve::http_detail
