// Languages for --lang: read from the data file rootfs/languages.json installed with nsbox.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox::cli {

struct Language {
  std::string name;
  std::vector<std::string> argv;  // interpreter and its fixed arguments; the code file is appended
  std::string file;               // the code file's name in /workspace
  std::map<std::string, std::string> env;
};

StatusOr<Language> LookupLanguage(const std::string& name);
std::vector<std::string> LanguageNames();

}  // namespace nsbox::cli
