// Image templates: rootfs/templates/NAME.json (or a .json file by path), loaded and checked, for `nsbox image build`.
#pragma once

#include <string>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox::cli {

// A template: rootfs/templates/NAME.json, or a path to a .json file. See the README for the format.
struct ImageTemplate {
  std::string name;  // file name without .json
  std::string path;
  std::string description;
  std::vector<std::string> packages;
  std::vector<std::string> smoke_test;
  std::string digest;  // of the file's bytes: equal digests build equal images (cache key)
};

// The directory of the built-in templates: $NSBOX_DATADIR-style lookup, rootfs/templates.
std::string TemplateDir();
std::vector<std::string> KnownTemplates(const std::string& template_dir);
// Loads and validates a template; errors say what is wrong and, for an unknown name, which templates exist.
StatusOr<ImageTemplate> LoadTemplate(const std::string& name_or_path, const std::string& template_dir);
StatusOr<ImageTemplate> ParseTemplate(const std::string& name, const std::string& path, const std::string& text);

}  // namespace nsbox::cli
