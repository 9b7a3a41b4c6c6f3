// How HttpServer reads a request off libmicrohttpd (http_request_parsing.h).
#include "src/serve/http_request_parsing.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace nsbox::serve::http_detail {
namespace {

// The values of the framing headers, each as often as it was sent, and how often Authorization was.
struct Framing {
  std::vector<std::string> content_length, transfer_encoding;
  int authorization = 0;
};
MHD_Result CountFraming(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto& framing = *static_cast<Framing*>(cls);
  if (key && strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) framing.content_length.push_back(value ? value : "");
  if (key && strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
    framing.transfer_encoding.push_back(value ? value : "");
  if (key && strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0) ++framing.authorization;
  return MHD_YES;
}

MHD_Result FindRepeatedKey(void* cls, MHD_ValueKind, const char* key, size_t key_size, const char*, size_t) {
  auto* seen = static_cast<std::pair<std::set<std::string>, std::optional<std::string>>*>(cls);
  std::string name = key ? std::string(key, key_size) : "";
  if (!seen->first.insert(name).second) {
    seen->second = std::move(name);
    return MHD_NO;
  }
  return MHD_YES;
}

}  // namespace

MHD_Result AddToMap(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto& map = *static_cast<std::map<std::string, std::string>*>(cls);
  std::string name = key ? key : "";
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  map[name] = value ? value : "";
  return MHD_YES;
}

const char* AmbiguousFraming(MHD_Connection* connection) {
  Framing framing;
  MHD_get_connection_values(connection, MHD_HEADER_KIND, &CountFraming, &framing);
  for (const auto& value : framing.content_length)
    if (value != framing.content_length.front()) return "two Content-Length headers that differ";
  if (!framing.content_length.empty() && !framing.transfer_encoding.empty())
    return "both Content-Length and Transfer-Encoding";
  if (framing.transfer_encoding.size() > 1) return "more than one Transfer-Encoding header";
  if (!framing.transfer_encoding.empty() && strcasecmp(framing.transfer_encoding.front().c_str(), "chunked") != 0)
    return "a Transfer-Encoding other than chunked, the only one the server takes";
  if (framing.authorization > 1) return "more than one Authorization header";
  return nullptr;
}

bool HasMalformedEscape(const std::string& raw_uri) {
  for (size_t i = raw_uri.find('%'); i != std::string::npos; i = raw_uri.find('%', i + 1))
    if (i + 2 >= raw_uri.size() || !std::isxdigit(static_cast<unsigned char>(raw_uri[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(raw_uri[i + 2])))
      return true;
  return false;
}

std::string ErrorBody(std::string_view code, std::string_view message) {
  std::string escaped;
  for (char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    escaped += c == '"' || c == '\\' || byte < 0x20 || byte > 0x7e ? ' ' : c;
  }
  return fmt::format(R"({{"error": {{"code": "{}", "message": "{}"}}}})", code, escaped);
}

std::optional<std::string> RepeatedQueryKey(MHD_Connection* connection) {
  std::pair<std::set<std::string>, std::optional<std::string>> seen;
  MHD_get_connection_values_n(connection, MHD_GET_ARGUMENT_KIND, &FindRepeatedKey, &seen);
  return seen.second;
}

MHD_Result AddQuery(void* cls, MHD_ValueKind, const char* key, size_t key_size, const char* value, size_t value_size) {
  (*static_cast<std::map<std::string, std::string>*>(cls))[key ? std::string(key, key_size) : ""] =
      value ? std::string(value, value_size) : "";
  return MHD_YES;
}

std::string DecodePath(const std::string& raw_uri) {
  const std::string raw = raw_uri.substr(0, raw_uri.find('?'));
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string path;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
      const char c = static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
      if (c == '/' || c == '\0') {
        path += raw.substr(i, 3);
      } else {
        path += c;
      }
      i += 2;
    } else {
      path += raw[i];
    }
  }
  return path;
}

}  // namespace nsbox::serve::http_detail
