// Result's JSON form (the schema the README documents), kept out of the public header: an embedder of the engine
// does not get nsbox's JSON library with it.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "nsbox/result.h"

namespace nsbox {

// Replaces invalid UTF-8 with U+FFFD so the result is always valid JSON text.
std::string SanitizeUtf8(const std::string& bytes);
// The length of the valid UTF-8 sequence at bytes[at] (1 for ASCII), 0 when the bytes there are not one.
size_t ValidUtf8Length(std::string_view bytes, size_t at);
nlohmann::json ResultToJson(const Result& result);
// The inverse, for front ends that receive results from another process (sessions, runtimes).
Result ResultFromJson(const nlohmann::json& json);

// A front end's addition to the result (Result::extra_json): a top-level key of its JSON form.
void SetExtra(Result& result, const std::string& key, const nlohmann::json& value);
// The addition under key, or null when there is none.
nlohmann::json GetExtra(const Result& result, const std::string& key);

}  // namespace nsbox
