// Languages for --lang: the data file, aliases resolved, unknown names answered with the list of known ones.
#include "src/cli/languages.h"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"
#include "sandbox/spec/units.h"

namespace nsbox::cli {

// The table, parsed again only when the file's text changed: a long-lived caller (nsbox serve looks a language up for
// every exec) reads the small file each time but does not parse it each time.
StatusOr<std::shared_ptr<const nlohmann::json>> LoadLanguageTable(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok())
    return Status::Error(fmt::format("loading the language table: {}; {}", text.status().message(), DataDirHint()));
  struct Cache {
    std::mutex mutex;
    std::string path, text;
    std::shared_ptr<const nlohmann::json> table;
  };
  static Cache* const cache = new Cache;  // never destroyed: a thread may still look a language up during exit
  std::lock_guard lock(cache->mutex);
  if (cache->table && cache->path == path && cache->text == *text) return cache->table;
  try {
    cache->table = std::make_shared<const nlohmann::json>(nlohmann::json::parse(*text));
  } catch (const nlohmann::json::exception& e) {
    cache->table.reset();
    return Status::Error(fmt::format("{}: malformed language table: {}", path, e.what()));
  }
  cache->path = path;
  cache->text = std::move(*text);
  return cache->table;
}

namespace {

StatusOr<std::shared_ptr<const nlohmann::json>> LoadTable() {
  return LoadLanguageTable(DataDir() + "/rootfs/languages.json");
}

std::vector<std::string> NamesOf(const nlohmann::json& table) {
  std::vector<std::string> names;
  for (const auto& [name, entry] : table.items())
    if (entry.is_object()) names.push_back(name);
  return names;
}

// A file name of the build directory: one plain path component.
bool IsPlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

StatusOr<CompileSpec> ParseCompile(const std::string& name, const nlohmann::json& entry) {
  CompileSpec spec;
  try {
    spec.argv = entry.at("argv").get<std::vector<std::string>>();
    spec.source = entry.at("source").get<std::string>();
    spec.output = entry.at("output").get<std::string>();
    if (entry.contains("env")) spec.env = entry["env"].get<std::map<std::string, std::string>>();
    if (entry.contains("files")) spec.files = entry["files"].get<std::map<std::string, std::string>>();
    if (entry.contains("timeout") && !entry["timeout"].is_string()) throw std::invalid_argument("timeout");
    if (entry.contains("memory") && !entry["memory"].is_string()) throw std::invalid_argument("memory");
  } catch (const std::exception&) {
    return Status::Error(fmt::format(
        "language '{}': \"compile\" needs \"argv\" (an array of strings), \"source\" and \"output\" (strings), "
        "and may have \"env\" and \"files\" (objects of strings), \"timeout\" and \"memory\" (strings)",
        name));
  }
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/')
    return Status::Error(fmt::format("language '{}': compile.argv[0] must be an absolute path", name));
  if (!IsPlainName(spec.source) || !IsPlainName(spec.output))
    return Status::Error(fmt::format("language '{}': compile.source and compile.output must be plain file names", name));
  for (const auto& [file, text] : spec.files)
    if (!IsPlainName(file) || file == spec.source || file == spec.output || file.starts_with(".nsbox-"))
      return Status::Error(fmt::format(
          "language '{}': compile.files: '{}' must be a plain file name other than the source's and the output's", name,
          file));
  auto timeout = ParseDuration(entry.value("timeout", "30s"));
  if (!timeout.ok()) return timeout.status().Wrap(fmt::format("language '{}': compile.timeout", name));
  spec.timeout = *timeout;
  auto memory = ParseSize(entry.value("memory", "512M"));
  if (!memory.ok()) return memory.status().Wrap(fmt::format("language '{}': compile.memory", name));
  spec.memory_bytes = *memory;
  return spec;
}

}  // namespace

std::vector<std::string> LanguageNames() {
  auto table = LoadTable();
  if (!table.ok()) return {};
  return NamesOf(**table);
}

std::vector<std::string> CanonicalLanguageNames() {
  auto table = LoadTable();
  if (!table.ok()) return {};
  std::vector<std::string> names;
  for (const auto& [name, entry] : (*table)->items())
    if (entry.is_object() && !entry.contains("alias")) names.push_back(name);
  return names;
}

namespace {

template <class T>
constexpr const char* KindName() {
  if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return "an array of strings";
  else
    return "an object of strings";
}

// entry[key] as T; an error naming the language and the key when it is missing or of another type.
template <class T>
StatusOr<T> Field(const nlohmann::json& entry, const std::string& language, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end()) return Status::Error(fmt::format("language '{}': no \"{}\"", language, key));
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return Status::Error(fmt::format("language '{}': \"{}\" must be {}", language, key, KindName<T>()));
  }
}

}  // namespace

StatusOr<Language> ParseLanguage(const nlohmann::json& table, const std::string& requested) {
  if (!table.is_object()) return Status::Error("the language table is not a JSON object");
  std::string name = requested;
  for (int hops = 0; hops < 4; ++hops) {
    if (!table.contains(name) || !table[name].is_object())
      return Status::Error(ErrorKind::kNotFound, fmt::format("unknown language '{}' (known: {})", requested,
                                                             fmt::join(NamesOf(table), ", ")));
    const auto& entry = table[name];
    if (entry.contains("alias")) {
      auto alias = Field<std::string>(entry, name, "alias");
      if (!alias.ok()) return alias.status();
      name = std::move(*alias);
      continue;
    }
    Language lang;
    lang.name = name;
    auto argv = Field<std::vector<std::string>>(entry, name, "argv");
    if (!argv.ok()) return argv.status();
    lang.argv = std::move(*argv);
    if (entry.contains("env")) {
      auto env = Field<std::map<std::string, std::string>>(entry, name, "env");
      if (!env.ok()) return env.status();
      lang.env = std::move(*env);
    }
    if (entry.contains("template")) {
      auto image_template = Field<std::string>(entry, name, "template");
      if (!image_template.ok()) return image_template.status();
      lang.image_template = std::move(*image_template);
    }
    if (entry.contains("heap_exhausted")) {
      auto heap_exhausted = Field<std::string>(entry, name, "heap_exhausted");
      if (!heap_exhausted.ok()) return heap_exhausted.status();
      lang.heap_exhausted = std::move(*heap_exhausted);
    }
    if (entry.contains("compile")) {
      if (!entry["compile"].is_object())
        return Status::Error(fmt::format("language '{}': \"compile\" must be an object", name));
      auto compile = ParseCompile(name, entry["compile"]);
      if (!compile.ok()) return compile.status();
      lang.compile = std::move(*compile);
      // The program is the compiler's output ({output}) or an absolute path (a VM given the output: java).
      if (lang.argv.empty() || (lang.argv[0] != "{output}" && (lang.argv[0].empty() || lang.argv[0][0] != '/')))
        return Status::Error(fmt::format("language '{}': argv[0] must be {{output}} or an absolute path", name));
      return lang;
    }
    auto file = Field<std::string>(entry, name, "file");
    if (!file.ok()) return file.status();
    lang.file = std::move(*file);
    if (lang.argv.empty() || lang.argv[0].empty() || lang.argv[0][0] != '/')
      return Status::Error(fmt::format("language '{}': argv[0] must be an absolute path", name));
    return lang;
  }
  return Status::Error(fmt::format("language '{}': alias loop", requested));
}

StatusOr<Language> LookupLanguage(const std::string& requested) {
  auto table = LoadTable();
  if (!table.ok()) return table.status();
  auto lang = ParseLanguage(**table, requested);
  // A fault of the table itself is named with its file: it is nsbox's data, not the caller's request.
  if (!lang.ok() && lang.status().kind() != ErrorKind::kNotFound)
    return lang.status().Wrap(DataDir() + "/rootfs/languages.json");
  return lang;
}

}  // namespace nsbox::cli
