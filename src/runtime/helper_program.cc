// FindHelperProgram: the candidates in order, the first executable one checked for who may change it.
#include "src/runtime/helper_program.h"

#include <unistd.h>

#include <vector>

#include <fmt/format.h>

#include "sandbox/base/data_dir.h"

namespace nsbox::runtime {

StatusOr<std::string> FindHelperProgram(const std::string& name, const std::string& installed_path,
                                        const std::string& build_path, const std::string& role) {
  std::vector<std::string> candidates;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir.erase(dir.rfind('/'));
    candidates.push_back(dir + "/" + name);
  }
  candidates.push_back(installed_path);
  if (RunningFromBuildTree() && !build_path.empty()) candidates.push_back(build_path);
  for (const auto& path : candidates) {
    if (access(path.c_str(), X_OK) != 0) continue;
    auto checked = CheckTrustedPath(path, ::geteuid());
    if (!checked.ok()) return checked.status().Wrap(fmt::format("refusing {} {}", role, path));
    return checked;
  }
  return Status::Error(fmt::format("{} {} is missing (looked for {} and {}): build or install nsbox with it", role,
                                   name, candidates.front(), installed_path));
}

}  // namespace nsbox::runtime
