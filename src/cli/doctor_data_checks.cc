// nsbox doctor's checks of its data files and the image store: the host view, the seccomp profiles, the languages'
// interpreters, and the store's ownership and mode.
#include "nsbox_config.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"
#include "sandbox/seccomp.h"
#include "sandbox/spec/mount_plan.h"
#include "src/cli/doctor_checks.h"
#include "src/cli/doctor_text.h"

namespace nsbox::doctor {

using namespace text;

namespace {

std::string ErrnoText(int err) { return fmt::format("{} ({})", strerror(err), ErrnoName(err)); }

}  // namespace

Check HostRootfsCheck(const HostPaths& paths) {
  const char* title = "default root filesystem (host view)";
  std::string data_fix = fmt::format(
      "reinstall nsbox (the data files belong in {}), or point NSBOX_DATADIR at a directory holding rootfs/host.json",
      NSBOX_DATADIR);
  // Reported, not fatal as DataDir() would be: doctor is where an untrusted data directory is diagnosed.
  auto resolved = paths.data_dir.empty() ? ResolveDataDir() : StatusOr<std::string>(paths.data_dir);
  if (!resolved.ok()) return Make("rootfs.host", title, Verdict::kFail, resolved.status().message(), data_fix, true);
  std::string data_dir = *resolved;
  std::string file = data_dir + "/rootfs/host.json";
  auto view = LoadHostView(file);
  if (!view.ok()) return Make("rootfs.host", title, Verdict::kFail, view.status().message(), data_fix, true);
  std::vector<std::string> missing;
  for (const auto& bind : view->read_only_binds)
    if (!bind.optional && !PathExists(Join(paths.host_root, bind.path))) missing.push_back(bind.path);
  if (!missing.empty())
    return Make("rootfs.host", title, Verdict::kFail,
                fmt::format("{} names host paths that do not exist: {}", file, fmt::join(missing, ", ")),
                "restore them on the host, or run with --rootfs DIR (a prepared root)", true);
  if (::access(Join(paths.host_root, "/bin/sh").c_str(), X_OK) != 0)
    return Make("rootfs.host", title, Verdict::kFail, "the host has no /bin/sh for the sandbox's shell",
                "install a shell (dash or bash)", true);
  return Make("rootfs.host", title, Verdict::kPass,
              fmt::format("{} loaded; its {} read-only paths are present", file, view->read_only_binds.size()), "",
              true);
}

Check SeccompProfilesCheck(const HostPaths& paths) {
  const char* title = "seccomp profiles (default, strict)";
  auto resolved = paths.data_dir.empty() ? ResolveDataDir() : StatusOr<std::string>(paths.data_dir);
  if (!resolved.ok())
    return Make("seccomp.profiles", title, Verdict::kFail, resolved.status().message(), "fix rootfs.host first", true);
  // As nsbox run finds them: $NSBOX_PROFILES_DIR, else the data directory's (DefaultSeccompProfilesDir, which would
  // end the process on a directory others may change, where doctor reports).
  const char* env = std::getenv("NSBOX_PROFILES_DIR");
  std::string dir = *resolved + "/seccomp-profiles";
  if (paths.data_dir.empty() && env && *env) {
    auto trusted = CheckTrustedPath(env, ::geteuid());  // as nsbox run checks it, reported rather than fatal
    if (!trusted.ok())
      return Make("seccomp.profiles", title, Verdict::kFail,
                  fmt::format("$NSBOX_PROFILES_DIR: {}", trusted.status().message()),
                  "point NSBOX_PROFILES_DIR at a directory only you or root can change, or unset it", true);
    dir = *trusted;
  }
  for (const char* name : {"default", "strict"}) {
    auto program = LoadSeccompProfile(name, dir);
    if (!program.ok())
      return Make("seccomp.profiles", title, Verdict::kFail,
                  fmt::format("profile '{}': {}", name, program.status().message()),
                  fmt::format("reinstall nsbox (the profiles belong in {}/seccomp-profiles), or point NSBOX_DATADIR or "
                              "NSBOX_PROFILES_DIR at a directory holding them",
                              NSBOX_DATADIR),
                  true);
  }
  return Make("seccomp.profiles", title, Verdict::kPass,
              fmt::format("{}: default and strict load and compile for this kernel", dir), "", true);
}

Check LanguagesCheck(const HostPaths& paths) {
  const char* title = "language interpreters and compilers (--lang) in the host view";
  auto resolved = paths.data_dir.empty() ? ResolveDataDir() : StatusOr<std::string>(paths.data_dir);
  if (!resolved.ok())
    return Make("languages", title, Verdict::kWarn, resolved.status().message(), "fix rootfs.host first", false);
  std::string file = *resolved + "/rootfs/languages.json";
  auto text = ReadFile(file, 1 << 20);
  if (!text.ok())
    return Make("languages", title, Verdict::kWarn, text.status().message(),
                "point NSBOX_DATADIR at a directory holding rootfs/languages.json", false);
  std::vector<std::string> present, missing;
  try {
    auto table = nlohmann::json::parse(*text);
    for (const auto& [name, entry] : table.items()) {
      if (!entry.is_object() || !entry.contains("argv")) continue;  // the comment, and aliases
      // A compiled language needs its compiler (its program is the compiler's output).
      std::string interpreter = entry.contains("compile") ? entry.at("compile").at("argv").at(0).get<std::string>()
                                                          : entry.at("argv").at(0).get<std::string>();
      if (::access(Join(paths.host_root, interpreter).c_str(), X_OK) == 0)
        present.push_back(fmt::format("{} ({})", name, interpreter));
      else
        missing.push_back(fmt::format("{} ({})", name, interpreter));
    }
  } catch (const nlohmann::json::exception& e) {
    return Make("languages", title, Verdict::kWarn, fmt::format("{}: malformed: {}", file, e.what()),
                "reinstall nsbox's data files", false);
  }
  std::string detail =
      fmt::format("available: {}", present.empty() ? "none" : fmt::format("{}", fmt::join(present, ", ")));
  if (missing.empty()) return Make("languages", title, Verdict::kPass, detail, "", false);
  return Make("languages", title, Verdict::kWarn, fmt::format("{}; missing: {}", detail, fmt::join(missing, ", ")),
              "install the missing interpreters and compilers on the host (e.g. apt-get install python3 nodejs g++), "
              "or use --rootfs with an image that has them (nsbox image build polyglot)",
              false);
}

Check ImageStoreCheck(const HostPaths& paths, const Caller& caller) {
  const char* title = "image store";
  struct stat st;
  if (::stat(paths.image_store.c_str(), &st) != 0)
    return Make("images", title, Verdict::kWarn,
                fmt::format("{}: {}; only --rootfs host and prepared directories can be used", paths.image_store,
                            ErrnoText(errno)),
                fmt::format("create it as root (mkdir -p {}) and build images into it", paths.image_store), false);
  if (!S_ISDIR(st.st_mode))
    return Make("images", title, Verdict::kWarn, fmt::format("{} is not a directory", paths.image_store),
                fmt::format("remove it and create a directory: mkdir -p {}", paths.image_store), false);
  // As nsbox image keeps it (docs/images.md): owned by root, mode 0711: root builds, lists and removes images; any
  // user can reach NAME/rootfs by path to run one.
  const std::string keep = fmt::format("chown root:root {} && chmod 0711 {}", paths.image_store, paths.image_store);
  if (st.st_uid != 0)
    return Make("images", title, Verdict::kWarn,
                fmt::format("{} is owned by uid {}, not root: nsbox image refuses such a store", paths.image_store,
                            st.st_uid),
                keep, false);
  const mode_t search = caller.root() ? S_IXUSR : st.st_gid == caller.gid ? S_IXGRP : S_IXOTH;
  if (!(st.st_mode & search))
    return Make("images", title, Verdict::kWarn,
                fmt::format("{} (mode {:o}) cannot be entered by uid {}: its images cannot be used", paths.image_store,
                            st.st_mode & 07777, caller.uid),
                keep, false);
  const mode_t read = caller.root() ? S_IRUSR : st.st_gid == caller.gid ? S_IRGRP : S_IROTH;
  if (!(st.st_mode & read))
    return Make("images", title, Verdict::kPass,
                fmt::format("{}: images can be used by name (listing, building and removing them is root's)",
                            paths.image_store),
                "", false);
  size_t images = 0;
  if (auto* dir = ::opendir(paths.image_store.c_str())) {
    while (auto* entry = ::readdir(dir))
      if (entry->d_name[0] != '.') ++images;
    ::closedir(dir);
  }
  return Make("images", title, Verdict::kPass,
              fmt::format("{}: {} image(s), {}", paths.image_store, images,
                          caller.root() ? "writable" : "read-only for this user (images can be used, not built)"),
              "", false);
}

}  // namespace nsbox::doctor
