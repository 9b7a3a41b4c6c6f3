// Image templates (image_template.h): finding one by name or path, and checking what it says.
#include "src/cli/image_template.h"

#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "sandbox/base/bounded_json.h"
#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"
#include "src/cli/file_tree.h"

namespace nsbox::cli {
namespace {

using nlohmann::json;

// FNV-1a, 64 bits: a stable digest of a template's bytes to key caches with; not a security boundary.
std::string Fnv1a64(const std::string& data) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return fmt::format("{:016x}", hash);
}

// The known templates for a message: "none", or their names.
std::string KnownTemplateNames(const std::string& template_dir) {
  const std::vector<std::string> names = KnownTemplates(template_dir);
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

std::string TemplateDir() { return DataDir() + "/rootfs/templates"; }

std::vector<std::string> KnownTemplates(const std::string& template_dir) {
  std::vector<std::string> names;
  if (auto entries = ListDirectory(template_dir); entries.ok())
    for (const auto& e : *entries)
      if (e.size() > 5 && e.compare(e.size() - 5, 5, ".json") == 0) names.push_back(e.substr(0, e.size() - 5));
  return names;
}

StatusOr<ImageTemplate> LoadTemplate(const std::string& name_or_path, const std::string& template_dir) {
  bool is_path = name_or_path.find('/') != std::string::npos ||
                 (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  std::string path = is_path ? name_or_path : template_dir + "/" + name_or_path + ".json";
  std::string name = path.substr(path.rfind('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) name.resize(name.size() - 5);
  if (!is_path && !std::regex_match(name_or_path, std::regex("[A-Za-z0-9._-]+")))
    return Status::Error(fmt::format("'{}' is not a template name", name_or_path));
  if (!PathExists(path)) {
    if (is_path) return Status::Error(fmt::format("template file {} does not exist", path));
    return Status::Error(fmt::format("unknown template '{}' (known templates: {}; or give a path to a .json file)",
                                     name_or_path, KnownTemplateNames(template_dir)));
  }
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok()) return text.status().Wrap(fmt::format("reading template '{}'", name));
  return ParseTemplate(name, path, *text);
}

StatusOr<ImageTemplate> ParseTemplate(const std::string& name, const std::string& path, const std::string& text) {
  auto broken = [&](const std::string& why) {
    return Status::Error(fmt::format("template '{}' is broken: {}", name, why));
  };
  json j;
  try {
    j = ParseBoundedJson(text);
  } catch (const JsonRefused& e) {
    return broken(e.what());
  } catch (const json::exception& e) {
    return broken(fmt::format("not valid JSON: {}", JsonErrorText(e)));
  }
  if (!j.is_object()) return broken("it must be a JSON object");
  static const std::set<std::string> kKnownKeys = {"comment", "description", "packages",
                                                   "files",   "customize",   "smoke_test"};
  for (const auto& [key, value] : j.items())
    if (!kKnownKeys.count(key))
      return broken(
          fmt::format("unknown key '{}' (known: comment, customize, description, files, packages, smoke_test)", key));

  ImageTemplate t;
  t.name = name;
  t.path = path;
  t.digest = Fnv1a64(text);
  if (j.contains("description")) {
    if (!j["description"].is_string()) return broken("'description' must be a string");
    t.description = j["description"];
  }
  if (j.contains("packages")) {
    if (!j["packages"].is_array()) return broken("'packages' must be a list of Debian package names");
    static const std::regex kPackage("[a-z0-9][a-z0-9+.-]+");
    for (const auto& p : j["packages"]) {
      if (!p.is_string() || !std::regex_match(p.get<std::string>(), kPackage))
        return broken(fmt::format("'packages': {} is not a Debian package name", p.dump()));
      t.packages.push_back(p);
    }
  }
  if (j.contains("files")) {
    if (!j["files"].is_array()) return broken("'files' must be a list of {path, content, mode}");
    static const std::regex kMode("0?[0-7]{3,4}");
    size_t i = 0;
    for (const auto& f : j["files"]) {
      if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("content") ||
          !f["content"].is_string())
        return broken(fmt::format("'files'[{}] needs a string 'path' and a string 'content'", i));
      // tools/mkrootfs hands the path to mmdebstrap's hooks, which a shell reads: plain characters only, so that it
      // stays data.
      static const std::regex kPath("(/[A-Za-z0-9_+@,=-][A-Za-z0-9._+@,=-]*)+");
      std::string file_path = f["path"];
      if (file_path.empty() || file_path[0] != '/' || file_path.find("/../") != std::string::npos ||
          file_path.ends_with("/..") || file_path.find_first_of(" \n") != std::string::npos)
        return broken(fmt::format("'files'[{}]: path '{}' must be absolute, without '..' or spaces", i, file_path));
      if (!std::regex_match(file_path, kPath))
        return broken(
            fmt::format("'files'[{}]: path '{}' may hold only letters, digits and . _ + @ , = - between "
                        "its slashes (no component starting with '.')",
                        i, file_path));
      if (f.contains("mode") && (!f["mode"].is_string() || !std::regex_match(f["mode"].get<std::string>(), kMode)))
        return broken(fmt::format("'files'[{}]: mode must be an octal string like \"0644\"", i));
      ++i;
    }
  }
  if (j.contains("customize")) {
    if (!j["customize"].is_array()) return broken("'customize' must be a list of shell commands (run in the chroot)");
    for (const auto& c : j["customize"])
      if (!c.is_string()) return broken("'customize' must be a list of shell commands (run in the chroot)");
  }
  if (!j.contains("smoke_test") || !j["smoke_test"].is_array() || j["smoke_test"].empty())
    return broken("'smoke_test' must be a non-empty argv list, e.g. [\"/bin/sh\", \"-c\", \"true\"]");
  for (const auto& a : j["smoke_test"]) {
    if (!a.is_string()) return broken("'smoke_test' must be a list of strings");
    t.smoke_test.push_back(a);
  }
  return t;
}

}  // namespace nsbox::cli
