// nsbox doctor's small text helpers, shared by its check files: trimmed file contents, words, and Make for a check.
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/base/fs.h"
#include "src/cli/doctor_checks.h"

namespace nsbox::doctor::text {

// A host path under a root that may be "/" or empty (the host itself) or a fixture tree.
inline std::string Join(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return root + path;
}

inline std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t start = s.find_first_not_of(" \t\n");
  return start == std::string::npos ? "" : s.substr(start);
}

// The file, trimmed; empty when it cannot be read.
inline std::string ReadTrimmed(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  return text.ok() ? Trim(*text) : "";
}

inline std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  std::string word;
  while (in >> word) words.push_back(word);
  return words;
}

inline bool Contains(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

// A check; its fix is kept only when the verdict is not a pass.
inline Check Make(std::string id, std::string title, Verdict verdict, std::string detail, std::string fix,
                  bool required) {
  return Check{std::move(id), std::move(title), verdict, std::move(detail),
               verdict == Verdict::kPass ? "" : std::move(fix), required};
}

}  // namespace nsbox::doctor::text
