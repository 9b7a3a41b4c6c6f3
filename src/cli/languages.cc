// Languages for --lang: the data file, aliases resolved, unknown names answered with the list of known ones.
#include "src/cli/languages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"

namespace nsbox::cli {
namespace {

StatusOr<nlohmann::json> LoadTable() {
  std::string path = DataDir() + "/rootfs/languages.json";
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok())
    return Status::Error(fmt::format("loading the language table: {}; {}", text.status().message(), DataDirHint()));
  try {
    return nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(fmt::format("{}: malformed language table: {}", path, e.what()));
  }
}

}  // namespace

std::vector<std::string> LanguageNames() {
  std::vector<std::string> names;
  auto table = LoadTable();
  if (!table.ok()) return names;
  for (const auto& [name, entry] : table->items())
    if (entry.is_object()) names.push_back(name);
  return names;
}

StatusOr<Language> LookupLanguage(const std::string& requested) {
  auto table = LoadTable();
  if (!table.ok()) return table.status();
  std::string name = requested;
  for (int hops = 0; hops < 4; ++hops) {
    if (!table->contains(name) || !(*table)[name].is_object())
      return Status::Error(
          fmt::format("unknown language '{}' (known: {})", requested, fmt::join(LanguageNames(), ", ")));
    const auto& entry = (*table)[name];
    if (entry.contains("alias")) {
      name = entry["alias"].get<std::string>();
      continue;
    }
    try {
      Language lang;
      lang.name = name;
      lang.argv = entry.at("argv").get<std::vector<std::string>>();
      lang.file = entry.at("file").get<std::string>();
      if (entry.contains("env")) lang.env = entry["env"].get<std::map<std::string, std::string>>();
      if (lang.argv.empty() || lang.argv[0].empty() || lang.argv[0][0] != '/')
        return Status::Error(fmt::format("language '{}': argv[0] must be an absolute path", name));
      return lang;
    } catch (const nlohmann::json::exception& e) {
      return Status::Error(fmt::format("language '{}': malformed entry: {}", name, e.what()));
    }
  }
  return Status::Error(fmt::format("language '{}': alias loop", requested));
}

}  // namespace nsbox::cli
