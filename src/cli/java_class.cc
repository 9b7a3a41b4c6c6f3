// JavaMainClass: which class of a one-file Java program is its own, read from the source's tokens.
#include "src/cli/java_class.h"

#include <cctype>
#include <string>

namespace nsbox::cli {
namespace {

// Bytes of UTF-8 sequences count as letters: Java identifiers may have any Unicode letter.
bool IdentifierStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || (static_cast<unsigned char>(c) & 0x80);
}
bool IdentifierPart(char c) { return IdentifierStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// The source's identifiers and punctuation, one at a time, each with its brace depth; comments, string, text-block
// and character literals and numbers are skipped. Nothing is kept but the token at hand: the scan of a 16 MiB source
// holds no more memory than its longest identifier.
class Lexer {
 public:
  explicit Lexer(std::string_view source) : s_(source) {}
  // The next token into text and depth; false at the end.
  bool Next(std::string& text, int& depth) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (s_.substr(i_, 2) == "//") {
        i_ = s_.find('\n', i_);
        if (i_ == std::string_view::npos) i_ = s_.size();
      } else if (s_.substr(i_, 2) == "/*") {
        i_ = s_.find("*/", i_ + 2);
        i_ = i_ == std::string_view::npos ? s_.size() : i_ + 2;
      } else if (s_.substr(i_, 3) == "\"\"\"") {
        // A text block: to the next """ that is not escaped.
        for (i_ += 3; i_ < s_.size() && s_.substr(i_, 3) != "\"\"\""; ++i_)
          if (s_[i_] == '\\') ++i_;
        i_ += 3;
      } else if (c == '"' || c == '\'') {
        for (++i_; i_ < s_.size() && s_[i_] != c && s_[i_] != '\n'; ++i_)
          if (s_[i_] == '\\') ++i_;
        ++i_;
      } else if (IdentifierStart(c)) {
        size_t end = i_;
        while (end < s_.size() && IdentifierPart(s_[end])) ++end;
        text.assign(s_.substr(i_, end - i_));
        depth = depth_;
        i_ = end;
        return true;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        while (i_ < s_.size() && (IdentifierPart(s_[i_]) || s_[i_] == '.')) ++i_;
      } else {
        ++i_;
        if (c == '}') depth_ = depth_ > 0 ? depth_ - 1 : 0;
        if (std::isspace(static_cast<unsigned char>(c))) continue;
        text.assign(1, c);
        depth = depth_;
        if (c == '{') ++depth_;
        return true;
      }
    }
    return false;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
};

bool IsTypeKeyword(const std::string& word) {
  return word == "class" || word == "interface" || word == "enum" || word == "record";
}

// A class name that is a file name too: javac writes NAME.class beside NAME.java, and a file name has 255 bytes.
constexpr size_t kMaxClassName = 200;

}  // namespace

std::string JavaMainClass(std::string_view source) {
  Lexer lexer(source);
  std::string public_type, first_with_main, current_type;
  bool saw_public = false;        // in the top-level declaration being read
  bool member_is_static = false;  // in the member of a top-level type being read
  bool type_name_next = false;    // the last token was "class" (or another type keyword) at depth 0
  bool main_named = false;        // the last tokens were "void main" in a static member
  std::string previous, text;
  int previous_depth = 0, depth = 0;
  while (lexer.Next(text, depth)) {
    if (type_name_next) {
      type_name_next = false;
      if (IdentifierStart(text[0])) {
        current_type = text;
        if (saw_public && public_type.empty()) public_type = current_type;
      }
    }
    if (main_named && text == "(" && first_with_main.empty()) first_with_main = current_type;
    main_named = false;
    if (depth == 0) {
      if (text == ";" || text == "}" || text == "{") saw_public = false;
      if (text == "public") saw_public = true;
      // "class X" (not "X.class", a class literal, which has a '.' before it)
      if (IsTypeKeyword(text) && !(previous == "." && previous_depth == 0)) type_name_next = true;
      member_is_static = false;
    } else if (depth == 1 && !current_type.empty()) {
      if (text == ";" || text == "}" || text == "{") member_is_static = false;
      if (text == "static") member_is_static = true;
      if (member_is_static && text == "main" && previous == "void") main_named = true;
    }
    previous.swap(text);
    previous_depth = depth;
  }
  // javac wants a public top-level type in a file of its name; without one, the type that has main runs.
  std::string chosen = !public_type.empty() ? public_type : !first_with_main.empty() ? first_with_main : "Main";
  // The name becomes a file name and an argument: ASCII identifiers of a file name's length only. Any other keeps
  // Main.java, and javac's own error then names the class and the file it wants.
  if (chosen.size() > kMaxClassName) return "Main";
  for (char c : chosen)
    if (static_cast<unsigned char>(c) & 0x80) return "Main";
  return chosen;
}

}  // namespace nsbox::cli
