// The image store: listing, resolving, removing and sweeping images (layout: image_store.h).
#include "src/cli/image_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "src/cli/file_tree.h"

namespace nsbox::cli {
namespace {

using nlohmann::json;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The names of the store's images for a message: "none", or why they cannot be listed (a user who may pass through
// the store, 0711, but not read it).
std::string KnownImages(const std::string& store);

// An image is a directory of the store (not a symlink to one) with a rootfs/ directory in it.
bool IsImage(const std::string& store, const std::string& name) {
  return IsDirectory(store + "/" + name) && IsDirectory(store + "/" + name + "/rootfs");
}

std::string JoinNames(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

StatusOr<ImageInfo> ReadImageInfo(const std::string& store, const std::string& name) {
  ImageInfo info;
  info.name = name;
  info.rootfs_dir = store + "/" + name + "/rootfs";
  auto text = ReadFile(store + "/" + name + "/image.json", 1 << 20);
  if (!text.ok()) return text.status();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Error(fmt::format("{}/{}/image.json: not a JSON object", store, name));
  try {
    info.template_name = j.value("template", "");
    info.template_digest = j.value("template_digest", "");
    info.description = j.value("description", "");
    info.created = j.value("created", "");
    info.size_bytes = j.value("size_bytes", uint64_t{0});
    info.build_seconds = j.value("build_seconds", 0.0);
  } catch (const json::exception&) {  // a field of another type: the image is still usable by name
    return Status::Error(fmt::format("{}/{}/image.json: a field has the wrong type", store, name));
  }
  return info;
}

}  // namespace

std::string ImageStoreRoot() {
  if (const char* env = std::getenv("NSBOX_IMAGE_STORE"); env && *env) return env;
  return kDefaultImageStore;
}

Status ValidateImageName(const std::string& name) {
  static const std::regex kName("[a-z0-9][a-z0-9._-]{0,63}");
  if (!std::regex_match(name, kName))
    return Status::Error(
        fmt::format("'{}' is not a valid image name (lower-case letters, digits, '.', '_', '-'; at most 64; not "
                    "starting with '.', '_' or '-')",
                    name));
  return OkStatus();
}

StatusOr<std::string> NewImageName(const std::optional<std::string>& requested, const std::string& template_name) {
  if (requested && requested->empty())
    return Status::Error("--name is empty: give the image a name, or leave --name out for the template's");
  const std::string name = requested.value_or(template_name);
  if (name == "host")
    return Status::Error("'host' cannot name an image: --rootfs host always means the host view (give another --name)");
  NSBOX_RETURN_IF_ERROR(ValidateImageName(name));
  return name;
}

StatusOr<std::string> ResolveImage(const std::string& name) { return ResolveImageIn(ImageStoreRoot(), name); }

StatusOr<std::string> ResolveImageIn(const std::string& store, const std::string& name) {
  NSBOX_RETURN_IF_ERROR(ValidateImageName(name));
  if (IsImage(store, name)) return store + "/" + name + "/rootfs";
  return Status::Error(fmt::format("no image '{}' in {} (known images: {}; build one with: nsbox image build TEMPLATE)",
                                   name, store, KnownImages(store)));
}

namespace {
std::string KnownImages(const std::string& store) {
  auto images = ListImages(store);
  if (!images.ok()) return fmt::format("not listed, {}", images.status().message());
  std::vector<std::string> names;
  for (const auto& image : *images) names.push_back(image.name);
  return JoinNames(names);
}
}  // namespace

StatusOr<std::vector<ImageInfo>> ListImages(const std::string& store) {
  std::vector<ImageInfo> images;
  if (!PathExists(store)) return images;
  auto names = ListDirectory(store);
  if (!names.ok()) return names.status().Wrap("reading the image store");
  for (const auto& name : *names) {
    if (name.front() == '.' || !IsImage(store, name)) continue;
    auto info = ReadImageInfo(store, name);
    if (info.ok()) {
      images.push_back(std::move(*info));
    } else {  // still usable by name; show what we know
      ImageInfo bare;
      bare.name = name;
      // image.json unreadable: the image is still usable by name. (A std::string, not a literal: GCC 12 -Wrestrict
      // false positive.)
      static const std::string kUnknown("?");
      bare.template_name = kUnknown;
      bare.rootfs_dir = fmt::format("{}/{}/rootfs", store, name);
      images.push_back(std::move(bare));
    }
  }
  return images;
}

namespace {

// mountinfo's fields 3 (MAJOR:MINOR), 4 (the mount's root within its file system) and 5 (where it is mounted), with
// the octal escapes of the last two (a space is \040) left as they are.
struct MountLine {
  std::string device, root, mount_point;
};
std::vector<MountLine> ReadMountInfo(const std::string& path) {
  std::vector<MountLine> lines;
  auto text = ReadFile(path, 16 << 20);
  if (!text.ok()) return lines;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent;
    MountLine m;
    if (fields >> id >> parent >> m.device >> m.root >> m.mount_point) lines.push_back(std::move(m));
  }
  return lines;
}

std::string MountInfoEscaped(const std::string& path) {
  std::string out;
  for (char c : path) {
    const bool escaped = c == ' ' || c == '\t' || c == '\n' || c == '\\';
    out += escaped ? fmt::format("\\{:03o}", c) : std::string(1, c);
  }
  return out;
}

// Whether any mount namespace of the host holds a mount of something under `dir`: a sandbox's root binds an image's
// entries one by one. One process of each namespace is looked at; a mount matches on its device and its root within
// the file system, which is `dir`'s path relative to where this namespace mounts that device.
// The answer is a process of that namespace, to name in messages.
std::optional<std::string> MountedAnywhere(const std::string& given) {
  // mountinfo names resolved paths: a store reached through a symlink, or named with a trailing '/', must be too.
  char resolved[PATH_MAX];
  if (!::realpath(given.c_str(), resolved)) return std::nullopt;
  const std::string dir = resolved;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return std::nullopt;
  const std::string device = fmt::format("{}:{}", major(st.st_dev), minor(st.st_dev));
  const std::string escaped = MountInfoEscaped(dir);
  std::string within;  // dir inside its file system
  size_t best = 0;
  for (const auto& m : ReadMountInfo("/proc/self/mountinfo")) {
    const bool holds = m.mount_point == "/" || escaped == m.mount_point || escaped.starts_with(m.mount_point + "/");
    if (m.device != device || !holds || m.mount_point.size() < best) continue;
    best = m.mount_point.size();
    std::string rest = m.mount_point == "/" ? escaped : escaped.substr(m.mount_point.size());
    within = m.root == "/" ? rest : m.root + rest;
  }
  if (within.empty()) return std::nullopt;
  std::set<std::string> namespaces;
  auto pids = ListDirectory("/proc");
  if (!pids.ok()) return std::nullopt;
  for (const auto& pid : *pids) {
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    char ns[64] = {};
    if (::readlink(("/proc/" + pid + "/ns/mnt").c_str(), ns, sizeof ns - 1) <= 0 || !namespaces.insert(ns).second)
      continue;
    for (const auto& m : ReadMountInfo("/proc/" + pid + "/mountinfo")) {
      if (m.device != device || (m.root != within && !m.root.starts_with(within + "/"))) continue;
      auto comm = ReadFile("/proc/" + pid + "/comm", 64);
      struct stat owner {};
      (void)::stat(("/proc/" + pid).c_str(), &owner);
      std::string name = comm.ok() ? *comm : "?";
      if (!name.empty() && name.back() == '\n') name.pop_back();
      return fmt::format("pid {} ({}, uid {})", pid, name, owner.st_uid);
    }
  }
  return std::nullopt;
}

// Whether `fd` is the file `path` names now (not one renamed away or removed since it was opened).
bool SameFile(int fd, const std::string& path) {
  struct stat held, named;
  return ::fstat(fd, &held) == 0 && ::lstat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

}  // namespace

Status RefuseForeignStore(const std::string& store) {
  struct stat st;
  if (::stat(store.c_str(), &st) != 0) return OkStatus();  // nothing there to harm
  if ((st.st_mode & 07777) == kImageStoreMode) return OkStatus();
  auto foreign = ForeignEntry(store);
  if (!foreign.ok()) return foreign.status();
  if (foreign->empty()) return OkStatus();
  return Status::Error(
      fmt::format("image store {} (mode {:o}) holds '{}', which is not an image: name a directory of "
                  "nsbox's own (NSBOX_IMAGE_STORE)",
                  store, st.st_mode & 07777, *foreign));
}

Status RemoveImage(const std::string& store, const std::string& name) {
  NSBOX_RETURN_IF_ERROR(ValidateImageName(name));
  // A mistyped NSBOX_IMAGE_STORE must not make `rm serve` delete another program's directory.
  NSBOX_RETURN_IF_ERROR(RefuseForeignStore(store));
  std::string path = store + "/" + name;
  auto no_image = [&] {
    return Status::Error(fmt::format("no image '{}' (known images: {})", name, KnownImages(store)));
  };
  if (!IsImage(store, name)) return no_image();
  // Locked before the rename and while the tree goes, as a build's directory is: a sweep by another nsbox image call
  // takes only .rm-* entries nobody holds (a removal that was killed). A sandbox being set up on the image holds a
  // shared lock (UseImage): then the image is in use though nothing of it is mounted yet.
  UniqueFd lock(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!lock) return errno == ENOENT ? no_image() : Status::Errno(fmt::format("open({})", path));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::Errno(fmt::format("locking {}", path));
    return Status::Error(
        fmt::format("image '{}' is in use by a sandbox or session being started or running on it, or "
                    "by another nsbox image rm; try again once it has ended",
                    name));
  }
  if (!SameFile(lock.get(), path)) return no_image();  // removed between the open and the lock
  // A running sandbox or session has the image's entries bound into its root: removing them would empty its /usr
  // under the running program.
  if (auto holder = MountedAnywhere(path + "/rootfs"))
    return Status::Error(
        fmt::format("image '{}' is in use by a running sandbox or session (mounted in the mount "
                    "namespace of {}); end it first (nsbox session ls lists sessions)",
                    name, *holder));
  // Rename first: the image disappears in one step, and a crash mid-delete leaves a .rm-* entry the next sweep removes.
  std::string doomed = fmt::format("{}/.rm-{}-{}", store, name, ::getpid());
  if (::rename(path.c_str(), doomed.c_str()) != 0) return Status::Errno(fmt::format("rename({}, {})", path, doomed));
  return RemoveTree(doomed);
}

StatusOr<std::string> UseImage(const std::string& name) {
  const std::string store = ImageStoreRoot();
  auto rootfs = ResolveImageIn(store, name);
  if (!rootfs.ok()) return rootfs;
  static std::mutex mutex;
  static std::map<std::string, UniqueFd> held;  // one lock per image, for the rest of the process's life
  std::lock_guard guard(mutex);
  const std::string path = store + "/" + name;
  if (held.count(path)) return rootfs;
  UniqueFd lock(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!lock) {
    // An image directory others cannot read: the sandbox reaches its root all the same (the store lets others pass),
    // only rm cannot see this user's runs until their mounts exist.
    if (errno == EACCES) return rootfs;
    return Status::Errno(fmt::format("open({})", path));
  }
  if (::flock(lock.get(), LOCK_SH | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::Errno(fmt::format("locking {}", path));
    return Status::Error(fmt::format("image '{}' is being removed", name));
  }
  if (!SameFile(lock.get(), path) || !IsImage(store, name))
    return Status::Error(fmt::format("image '{}' was removed while this sandbox was being set up", name));
  held.emplace(path, std::move(lock));
  return rootfs;
}

StatusOr<std::string> ForeignEntry(const std::string& store) {
  auto names = ListDirectory(store);
  if (!names.ok()) return names.status().Wrap("reading the image store");
  for (const auto& name : *names) {
    const std::string path = store + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return name;
    const bool leftover = name.starts_with(".build-") || name.starts_with(".rm-");
    if (!leftover && (name.front() == '.' || !IsDirectory(path + "/rootfs"))) return name;
  }
  return std::string();
}

Status EnsureStore(const std::string& store) {
  struct stat st;
  if (::stat(store.c_str(), &st) != 0) {
    if (errno != ENOENT) return Status::Errno(fmt::format("stat({})", store));
    // Parents (/var/lib/nsbox) may be missing too; they get ordinary modes, the store itself kImageStoreMode.
    for (size_t slash = store.find('/', 1); slash != std::string::npos; slash = store.find('/', slash + 1)) {
      std::string parent = store.substr(0, slash);
      if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return Status::Errno(fmt::format("mkdir({})", parent));
    }
    if (::mkdir(store.c_str(), kImageStoreMode) != 0 && errno != EEXIST)
      return Status::Errno(fmt::format("mkdir({}, {:o})", store, kImageStoreMode));
    if (::stat(store.c_str(), &st) != 0) return Status::Errno(fmt::format("stat({})", store));
  }
  if (!S_ISDIR(st.st_mode)) return Status::Error(fmt::format("image store {} is not a directory", store));
  // The sandbox mounts an image as the unprivileged uid it maps to, so every directory above the store must let others
  // pass.
  for (size_t slash = store.rfind('/'); slash != std::string::npos && slash > 0; slash = store.rfind('/', slash - 1)) {
    std::string parent = store.substr(0, slash);
    struct stat parent_st;
    if (::stat(parent.c_str(), &parent_st) == 0 && !(parent_st.st_mode & S_IXOTH))
      return Status::Error(
          fmt::format("{} (mode {:o}) cannot be searched by others, so sandboxes could not reach images "
                      "in {}; chmod o+x it or choose another store",
                      parent, parent_st.st_mode & 07777, store));
  }
  if (st.st_uid != 0) return Status::Error(fmt::format("image store {} is not owned by root", store));
  // A mistyped NSBOX_IMAGE_STORE=/tmp must not make /tmp 0711: only a directory that is nsbox's is set to the mode.
  NSBOX_RETURN_IF_ERROR(RefuseForeignStore(store));
  if ((st.st_mode & 07777) != kImageStoreMode && ::chmod(store.c_str(), kImageStoreMode) != 0)
    return Status::Errno(fmt::format("chmod({}, {:o})", store, kImageStoreMode));
  return OkStatus();
}

StatusOr<int> SweepStaleEntries(const std::string& store) {
  if (!PathExists(store)) return 0;
  // Leftovers are swept only from a store that is nsbox's: its mode, or nothing in it but images and leftovers.
  if (!RefuseForeignStore(store).ok()) return 0;
  auto names = ListDirectory(store);
  if (!names.ok()) return names.status().Wrap("sweeping the image store");
  int removed = 0;
  Status first_failure;
  for (const auto& name : *names) {
    if (name.rfind(".build-", 0) != 0 && name.rfind(".rm-", 0) != 0) continue;
    std::string path = store + "/" + name;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) continue;
    // A live build holds this lock until it publishes or cleans up; the kernel drops it when the builder dies.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    Status status = RemoveTree(path);
    if (!status.ok()) {  // the others are still swept
      if (first_failure.ok()) first_failure = status.Wrap(fmt::format("removing the leftover {}", path));
      continue;
    }
    ++removed;
  }
  if (!first_failure.ok()) return first_failure;
  return removed;
}

std::string HumanSize(uint64_t bytes) {
  const char* units[] = {"B", "K", "M", "G", "T"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{}B", bytes) : fmt::format("{:.1f}{}", value, units[unit]);
}

}  // namespace nsbox::cli
