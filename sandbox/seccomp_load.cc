// Seccomp profiles by name or path: resolving, reading, and loading them compiled (through the program cache).
#include "sandbox/seccomp.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"
#include "sandbox/seccomp_cache.h"

namespace nsbox {

StatusOr<std::string> ResolveSeccompProfilePath(const std::string& name_or_path, const std::string& profiles_dir) {
  if (name_or_path.empty()) return Status::Error("empty seccomp profile name");
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  if (is_path) return name_or_path;
  const bool plain_name = std::all_of(name_or_path.begin(), name_or_path.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
  const std::string path = fmt::format("{}/{}.json", profiles_dir, name_or_path);
  struct stat st;
  if (plain_name && ::stat(path.c_str(), &st) != 0 && errno != ENOENT)  // there, perhaps, but not for this user
    return Status::Errno(fmt::format("seccomp profile \"{}\": stat({})", name_or_path, path));
  if (!plain_name || !PathExists(path)) {
    // No profiles directory at all is missing data, not an unknown name: said, in words neither of the CLI nor of the
    // API (the program's data directory is the program's business; nsbox's own CLI checks it before any policy).
    const std::string hint =
        PathExists(profiles_dir) ? "" : fmt::format("; the profiles directory {} does not exist", profiles_dir);
    return Status::Error(fmt::format("unknown seccomp profile \"{}\": no file {} (give a path to use a profile file){}",
                                     name_or_path, path, hint));
  }
  return path;
}

namespace {

constexpr size_t kMaxProfileBytes = 4 << 20;

// A profile is a regular file: a FIFO nobody writes to would block the open forever, a device read without end.
Status CheckProfileFile(const std::string& path, struct stat* st) {
  if (::stat(path.c_str(), st) != 0) return Status::Errno(fmt::format("stat({})", path));
  if (!S_ISREG(st->st_mode)) return Status::Error(fmt::format("{} is not a regular file", path));
  return OkStatus();
}

StatusOr<std::string> ReadProfileText(const std::string& path) {
  struct stat st;
  NSBOX_RETURN_IF_ERROR(CheckProfileFile(path, &st));
  return ReadFile(path, kMaxProfileBytes);
}

}  // namespace

StatusOr<SeccompProfile> ReadSeccompProfile(const std::string& path) {
  auto text = ReadProfileText(path);
  if (!text.ok()) return text.status();
  auto profile = ParseSeccompProfile(*text);
  if (!profile.ok()) return profile.status().Wrap(path);
  return profile;
}

StatusOr<std::shared_ptr<const SeccompProgram>> LoadSeccompProfile(const std::string& name_or_path,
                                                                   const std::string& profiles_dir) {
  auto path = ResolveSeccompProfilePath(name_or_path, profiles_dir);
  if (!path.ok()) return path.status();
  struct stat st;
  NSBOX_RETURN_IF_ERROR(CheckProfileFile(*path, &st));
  // A program compiled earlier from the same profile, by the same nsbox and libseccomp, for the same host: known by
  // the file's identity when it has not changed lately, else by its text (seccomp_cache.h).
  const SeccompHost host = NativeSeccompHost();
  const std::string cache_dir = SeccompCacheDir();
  std::string key = cache_dir.empty() ? "" : SeccompCacheFileKey(name_or_path, st, host, ::time(nullptr));
  auto found = [&](std::shared_ptr<SeccompProgram> cached) {
    cached->name = name_or_path;
    return std::shared_ptr<const SeccompProgram>(std::move(cached));
  };
  if (!key.empty()) {
    if (auto cached = LookupSeccompCache(cache_dir, key)) return found(std::move(cached));
  }
  auto text = ReadFile(*path, kMaxProfileBytes);
  if (!text.ok()) return text.status();
  if (key.empty() && !cache_dir.empty()) {
    key = SeccompCacheKey(name_or_path, *text, host);
    if (auto cached = LookupSeccompCache(cache_dir, key)) return found(std::move(cached));
  }
  auto profile = ParseSeccompProfile(*text);
  if (!profile.ok()) return profile.status().Wrap(*path);
  auto program = CompileSeccompProfile(*profile, name_or_path, host);
  if (!program.ok()) return program.status().Wrap(fmt::format("compiling seccomp profile {}", *path));
  StoreSeccompCache(cache_dir, key, **program);
  return program;
}

std::string DefaultSeccompProfilesDir() {
  if (const char* env = std::getenv("NSBOX_PROFILES_DIR"); env && *env)
    return TrustedPathOrExit(env, "seccomp profiles directory ($NSBOX_PROFILES_DIR)");
  return DataDir() + "/seccomp-profiles";
}

}  // namespace nsbox
