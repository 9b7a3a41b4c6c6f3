// JavaMainClass: which class of a one-file Java program is its own, read from the source's tokens.
#include "src/cli/java_class.h"

#include <cctype>
#include <string>
#include <vector>

namespace nsbox::cli {
namespace {

struct Token {
  std::string text;  // an identifier or keyword, or one punctuation character
  int depth;         // braces open before it
};

// Bytes of UTF-8 sequences count as letters: Java identifiers may have any Unicode letter.
bool IdentifierStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || (static_cast<unsigned char>(c) & 0x80);
}
bool IdentifierPart(char c) { return IdentifierStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Identifiers and punctuation with their brace depth; comments, string, text-block and character literals and
// numbers are skipped.
std::vector<Token> Tokenize(std::string_view s) {
  std::vector<Token> tokens;
  int depth = 0;
  size_t i = 0;
  auto skip_quoted = [&](char quote) {  // i at the opening quote
    for (++i; i < s.size() && s[i] != quote && s[i] != '\n'; ++i)
      if (s[i] == '\\') ++i;
    ++i;
  };
  while (i < s.size()) {
    const char c = s[i];
    if (s.substr(i, 2) == "//") {
      i = s.find('\n', i);
      if (i == std::string_view::npos) break;
    } else if (s.substr(i, 2) == "/*") {
      i = s.find("*/", i + 2);
      if (i == std::string_view::npos) break;
      i += 2;
    } else if (s.substr(i, 3) == "\"\"\"") {
      // A text block: to the next """ that is not escaped.
      for (i += 3; i < s.size() && s.substr(i, 3) != "\"\"\""; ++i)
        if (s[i] == '\\') ++i;
      i += 3;
    } else if (c == '"' || c == '\'') {
      skip_quoted(c);
    } else if (IdentifierStart(c)) {
      size_t end = i;
      while (end < s.size() && IdentifierPart(s[end])) ++end;
      tokens.push_back({std::string(s.substr(i, end - i)), depth});
      i = end;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i < s.size() && (IdentifierPart(s[i]) || s[i] == '.')) ++i;
    } else {
      if (c == '}') depth = depth > 0 ? depth - 1 : 0;
      if (!std::isspace(static_cast<unsigned char>(c))) tokens.push_back({std::string(1, c), depth});
      if (c == '{') ++depth;
      ++i;
    }
  }
  return tokens;
}

bool IsTypeKeyword(const std::string& word) {
  return word == "class" || word == "interface" || word == "enum" || word == "record";
}

}  // namespace

std::string JavaMainClass(std::string_view source) {
  const std::vector<Token> tokens = Tokenize(source);
  std::string public_type, first_with_main, current_type;
  bool saw_public = false;        // in the top-level declaration being read
  bool member_is_static = false;  // in the member of a top-level type being read
  for (size_t k = 0; k < tokens.size(); ++k) {
    const Token& t = tokens[k];
    if (t.depth == 0) {
      if (t.text == ";" || t.text == "}" || t.text == "{") saw_public = false;
      if (t.text == "public") saw_public = true;
      // "class X" (not "X.class", a class literal, which has a '.' before it)
      if (IsTypeKeyword(t.text) && k + 1 < tokens.size() && IdentifierStart(tokens[k + 1].text[0]) &&
          !(k > 0 && tokens[k - 1].text == ".")) {
        current_type = tokens[k + 1].text;
        if (saw_public && public_type.empty()) public_type = current_type;
      }
      member_is_static = false;
    } else if (t.depth == 1 && !current_type.empty()) {
      if (t.text == ";" || t.text == "}" || t.text == "{") member_is_static = false;
      if (t.text == "static") member_is_static = true;
      if (member_is_static && t.text == "main" && k > 0 && tokens[k - 1].text == "void" && k + 1 < tokens.size() &&
          tokens[k + 1].text == "(" && first_with_main.empty())
        first_with_main = current_type;
    }
  }
  // javac wants a public top-level type in a file of its name; without one, the type that has main runs.
  std::string chosen = !public_type.empty() ? public_type : !first_with_main.empty() ? first_with_main : "Main";
  // The name becomes a file name and an argument: ASCII identifiers only. Any other keeps Main.java, and javac's
  // own error then names the class and the file it wants.
  for (char c : chosen)
    if (static_cast<unsigned char>(c) & 0x80) return "Main";
  return chosen;
}

}  // namespace nsbox::cli
