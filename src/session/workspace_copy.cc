// Workspace copies: openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV) under the
// workspace's descriptor, an O_PATH look before any real open (no FIFO or device is ever opened), fstat of the opened
// descriptor, a size cap enforced while reading, and an atomic rename for writes into the workspace.
#include "src/session/workspace_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/result_json.h"

namespace nsbox::session {
namespace {

constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;

StatusOr<UniqueFd> OpenBeneath(int dir_fd, const std::string& rel, uint64_t flags, const std::string& shown) {
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC;
  how.resolve = kResolve;
  int fd = static_cast<int>(::syscall(SYS_openat2, dir_fd, rel.empty() ? "." : rel.c_str(), &how, sizeof how));
  if (fd >= 0) return UniqueFd(fd);
  if (errno == ELOOP)
    return Status::Error(ErrorKind::kRefused,
                         fmt::format("refusing {}: it is, or passes through, a symbolic link", shown));
  if (errno == EXDEV)
    return Status::Error(ErrorKind::kRefused, fmt::format("refusing {}: it leaves the workspace", shown));
  if (errno == ENOTDIR && (flags & O_DIRECTORY))
    return Status::Error(ErrorKind::kRefused,
                         fmt::format("refusing {}: it is not a directory (a file, or a symbolic link)", shown));
  return Status::Errno(fmt::format("openat2(/workspace, {}, RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)", rel));
}

const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device node";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// Reads a regular file's descriptor whole, failing once it passes max_bytes (it may grow while we read).
StatusOr<std::string> ReadCapped(int fd, uint64_t max_bytes, const std::string& shown) {
  std::string data;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Errno(fmt::format("read({})", shown));
    }
    if (n == 0) return data;
    if (data.size() + static_cast<uint64_t>(n) > max_bytes)
      return Status::Error(ErrorKind::kTooLarge,
                           fmt::format("refusing {}: larger than the limit of {} bytes", shown, max_bytes));
    data.append(buffer, static_cast<size_t>(n));
  }
}

Status WriteAllFd(int fd, const std::string& data, const std::string& shown) {
  if (int err = WriteAll(fd, data); err != 0) return Status::Errno(fmt::format("write({})", shown), err);
  return OkStatus();
}

std::string BaseName(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

StatusOr<std::string> WorkspaceRelativePath(const std::string& path) {
  std::string rel = path;
  // The workspace itself, however it is spelled ("S:", "S:.", "S:/workspace/"): cp puts a file there by its name.
  if (rel == "/workspace" || rel == "/workspace/" || rel == "." || rel == "./" || rel == "/workspace/.")
    return std::string();
  if (rel.starts_with("/workspace/"))
    rel = rel.substr(strlen("/workspace/"));
  else if (!rel.empty() && rel[0] == '/')
    return Status::Error(
        ErrorKind::kRefused,
        fmt::format("'{}' is outside /workspace (give a path in /workspace, or relative to it)", path));
  // Textual checks for clear messages; openat2 enforces the same and more. Empty parts ("a//b") are dropped.
  std::vector<std::string_view> parts;
  if (!SplitPathComponents(rel, &parts))
    return Status::Error(ErrorKind::kRefused, fmt::format("'{}': '.' and '..' are not allowed", path));
  std::string clean;
  for (std::string_view part : parts) {
    if (!clean.empty()) clean += '/';
    clean += part;
  }
  if (rel.ends_with("/") && !clean.empty()) clean += '/';
  return clean;
}

StatusOr<std::string> ReadWorkspaceFile(int workspace_fd, const std::string& rel, uint64_t max_bytes,
                                        const std::function<void(uint64_t size)>& before_read) {
  std::string shown = "/workspace/" + rel;
  if (rel.empty() || rel.ends_with("/"))
    return Status::Error(ErrorKind::kRefused, fmt::format("{} is a directory; give a file", shown));
  // Look first (O_PATH opens nothing), then open for reading and check it is still the same regular file.
  auto look = OpenBeneath(workspace_fd, rel, O_PATH | O_NOFOLLOW, shown);
  if (!look.ok()) return look.status();
  struct stat seen;
  if (::fstat(look->get(), &seen) != 0) return Status::Errno(fmt::format("fstat({})", shown));
  if (!S_ISREG(seen.st_mode))
    return Status::Error(ErrorKind::kRefused, fmt::format("refusing {}: {}", shown, KindOf(seen.st_mode)));
  if (static_cast<uint64_t>(seen.st_size) > max_bytes)
    return Status::Error(ErrorKind::kTooLarge, fmt::format("refusing {}: {} bytes, more than the limit of {}", shown,
                                                           seen.st_size, max_bytes));
  auto file = OpenBeneath(workspace_fd, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, shown);
  if (!file.ok()) return file.status();
  struct stat st;
  if (::fstat(file->get(), &st) != 0) return Status::Errno(fmt::format("fstat({})", shown));
  if (!S_ISREG(st.st_mode) || st.st_ino != seen.st_ino || st.st_dev != seen.st_dev)
    return Status::Error(ErrorKind::kConflict, fmt::format("refusing {}: it was replaced while being copied", shown));
  if (!before_read) return ReadCapped(file->get(), max_bytes, shown);
  // The size as opened is what the caller makes room for, within the cap (the sandbox may have grown the file since
  // the first look); a file that grows meanwhile is not read past it.
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return Status::Error(ErrorKind::kTooLarge,
                         fmt::format("refusing {}: {} bytes, more than the limit of {}", shown, st.st_size, max_bytes));
  before_read(static_cast<uint64_t>(st.st_size));
  auto data = ReadCapped(file->get(), static_cast<uint64_t>(st.st_size), shown);
  if (!data.ok() && data.status().kind() == ErrorKind::kTooLarge)
    return Status::Error(ErrorKind::kConflict, fmt::format("refusing {}: it grew while being read", shown));
  return data;
}

StatusOr<uint64_t> CopyOut(int workspace_fd, const std::string& rel, const std::string& host_path, uint64_t max_bytes) {
  auto data = ReadWorkspaceFile(workspace_fd, rel, max_bytes);
  if (!data.ok()) return data.status();
  std::string target = host_path;
  struct stat host_st;
  if (::stat(target.c_str(), &host_st) == 0 && S_ISDIR(host_st.st_mode)) target += "/" + BaseName(rel);
  const auto slash = target.find_last_of('/');
  const std::string dir_path = slash == std::string::npos ? "." : slash == 0 ? "/" : target.substr(0, slash);
  const std::string name = slash == std::string::npos ? target : target.substr(slash + 1);
  UniqueFd dir(::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return Status::Errno(fmt::format("open({})", dir_path));
  // A link as the host file (even one pointing nowhere) is refused, not written through; so is anything but a file.
  struct stat old;
  const bool exists = ::fstatat(dir.get(), name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0;
  if (exists && S_ISLNK(old.st_mode))
    return Status::Error(ErrorKind::kRefused,
                         fmt::format("refusing to write {}: a symbolic link (give the path it leads to)", target));
  if (exists && !S_ISREG(old.st_mode))
    return Status::Error(ErrorKind::kRefused, fmt::format("refusing to write {}: not a regular file", target));
  // Written whole beside it, then renamed over it, with its mode and owner: a copy cut short (a kill, a full disk)
  // leaves the old file alone. Where a new file cannot take its place (other hard links to it, a directory this user
  // may not write, another user's file in a sticky directory), it is overwritten in place, as cp(1) does.
  struct stat dir_st {};
  const bool in_place =
      exists && (old.st_nlink > 1 || ::faccessat(dir.get(), ".", W_OK | X_OK, AT_EACCESS) != 0 ||
                 (::fstat(dir.get(), &dir_st) == 0 && (dir_st.st_mode & S_ISVTX) && ::geteuid() != 0 &&
                  old.st_uid != ::geteuid() && dir_st.st_uid != ::geteuid()));
  if (!in_place) return WriteAndRename(dir.get(), name, *data, static_cast<uid_t>(-1), static_cast<gid_t>(-1), target,
                                       exists ? &old : nullptr);
  UniqueFd out(::openat(dir.get(), name.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW));
  if (!out) return Status::Errno(fmt::format("open({})", target));
  struct stat out_st;
  if (::fstat(out.get(), &out_st) != 0 || !S_ISREG(out_st.st_mode))
    return Status::Error(ErrorKind::kRefused, fmt::format("refusing to write {}: not a regular file", target));
  NSBOX_RETURN_IF_ERROR(WriteAllFd(out.get(), *data, target));
  return static_cast<uint64_t>(data->size());
}

namespace {

// Acts as the sandbox user (fsuid, fsgid: per thread) until it goes out of scope: the session's filesystems accept no
// owner its user namespace does not map, and what is made belongs to the sandbox's programs.
struct ActAsSandboxUser {
  uid_t uid = static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1)));
  gid_t gid = static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1)));
  ActAsSandboxUser(uid_t sandbox_uid, gid_t sandbox_gid) {
    ::setfsgid(sandbox_gid);
    ::setfsuid(sandbox_uid);
  }
  ~ActAsSandboxUser() {
    ::setfsgid(gid);
    ::setfsuid(uid);
  }
};

}  // namespace

StatusOr<uint64_t> WriteAndRename(int dir, const std::string& name, const std::string& data, uid_t uid, gid_t gid,
                                  const std::string& shown, const struct stat* like) {
  unsigned char random[6];
  if (::getrandom(random, sizeof random, 0) != sizeof random) return Status::Errno("getrandom");
  std::string tmp = ".nsbox-cp-";
  for (unsigned char b : random) tmp += fmt::format("{:02x}", b);
  // O_TMPFILE: the file has no name until it is whole, so a writer killed midway leaves nothing behind. A filesystem
  // without it gets a private name at once (removed on every error, but not after a kill).
  bool named = false;
  UniqueFd out(::openat(dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644));
  if (!out) {
    if (errno != EOPNOTSUPP && errno != EISDIR) return Status::Errno(fmt::format("openat({}, O_TMPFILE)", shown));
    out.reset(::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!out) return Status::Errno(fmt::format("openat({}, O_CREAT|O_EXCL)", shown));
    named = true;
  }
  auto fail = [&](Status s) {
    if (named) ::unlinkat(dir, tmp.c_str(), 0);
    return s;
  };
  if (uid != static_cast<uid_t>(-1) && ::fchown(out.get(), uid, gid) != 0)
    return fail(Status::Errno(fmt::format("fchown({}, {}, {})", shown, uid, gid)));
  if (like) {  // the file it replaces: its owner where this process may give it (root), and its mode
    (void)::fchown(out.get(), like->st_uid, like->st_gid);
    if (::fchmod(out.get(), like->st_mode & 07777) != 0) return fail(Status::Errno(fmt::format("fchmod({})", shown)));
  }
  if (Status s = WriteAllFd(out.get(), data, shown); !s.ok()) return fail(s);
  if (!named) {
    // Named now that it is whole (linkat cannot replace a file, so under the private name first).
    const std::string self = fmt::format("/proc/self/fd/{}", out.get());
    if (::linkat(AT_FDCWD, self.c_str(), dir, tmp.c_str(), AT_SYMLINK_FOLLOW) != 0)
      return Status::Errno(fmt::format("linkat({})", shown));
    named = true;
  }
  if (::renameat(dir, tmp.c_str(), dir, name.c_str()) != 0)
    return fail(Status::Errno(fmt::format("renameat({})", shown)));
  return static_cast<uint64_t>(data.size());
}

namespace {

// WriteAndRename as the sandbox user, owned by it: a link or FIFO the sandbox put at `name` is replaced, never
// followed or opened.
StatusOr<uint64_t> ReplaceFile(int dir, const std::string& name, const std::string& data, uid_t uid, gid_t gid,
                               const std::string& shown) {
  ActAsSandboxUser as_sandbox_user(uid, gid);
  return WriteAndRename(dir, name, data, uid, gid, shown);
}

}  // namespace

StatusOr<uint64_t> CopyIn(const std::string& host_path, int workspace_fd, const std::string& rel, uint64_t max_bytes,
                          uid_t uid, gid_t gid) {
  UniqueFd in(::open(host_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW));
  if (!in && errno == ELOOP)
    return Status::Error(ErrorKind::kRefused,
                         fmt::format("refusing {}: a symbolic link (give the path it leads to)", host_path));
  if (!in) return Status::Errno(fmt::format("open({})", host_path));
  struct stat st;
  if (::fstat(in.get(), &st) != 0) return Status::Errno(fmt::format("fstat({})", host_path));
  if (!S_ISREG(st.st_mode))
    return Status::Error(ErrorKind::kRefused, fmt::format("refusing {}: {}", host_path, KindOf(st.st_mode)));
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return Status::Error(ErrorKind::kTooLarge, fmt::format("refusing {}: {} bytes, more than the limit of {}",
                                                           host_path, st.st_size, max_bytes));
  auto data = ReadCapped(in.get(), max_bytes, host_path);
  if (!data.ok()) return data.status();

  // Where it goes: an existing directory (or the workspace itself) receives the host file's name.
  std::string dir_rel, name;
  std::string trimmed = rel;
  while (trimmed.ends_with("/")) trimmed.pop_back();
  bool into_dir = trimmed.empty() || rel.ends_with("/");
  if (!into_dir) {
    auto probe = OpenBeneath(workspace_fd, trimmed, O_PATH | O_NOFOLLOW, "/workspace/" + trimmed);
    struct stat probe_st;
    if (probe.ok() && ::fstat(probe->get(), &probe_st) == 0 && S_ISDIR(probe_st.st_mode)) into_dir = true;
  }
  if (into_dir) {
    dir_rel = trimmed;
    name = BaseName(host_path);
  } else {
    auto slash = trimmed.find_last_of('/');
    dir_rel = slash == std::string::npos ? "" : trimmed.substr(0, slash);
    name = slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
  }
  std::string shown = "/workspace/" + (dir_rel.empty() ? name : dir_rel + "/" + name);
  auto dir = OpenBeneath(workspace_fd, dir_rel, O_PATH | O_DIRECTORY | O_NOFOLLOW, "/workspace/" + dir_rel);
  if (!dir.ok()) return dir.status();
  return ReplaceFile(dir->get(), name, *data, uid, gid, shown);
}

StatusOr<uint64_t> WriteWorkspaceFile(int workspace_fd, const std::string& rel, const std::string& data, uid_t uid,
                                      gid_t gid) {
  std::string trimmed = rel;
  while (trimmed.ends_with("/")) trimmed.pop_back();
  std::string shown = "/workspace/" + trimmed;
  if (trimmed.empty() || rel.ends_with("/"))
    return Status::Error(ErrorKind::kRefused, fmt::format("'{}' names a directory; give a file", shown));
  std::vector<std::string_view> parts;
  if (!SplitPathComponents(trimmed, &parts) || parts.empty())
    return Status::Error(ErrorKind::kRefused, fmt::format("'{}': '.' and '..' are not allowed", rel));
  // Deeper than RemoveWorkspacePath goes: what a write made, a remove must be able to take away.
  if (parts.size() > kMaxWorkspaceDepth)
    return Status::Error(ErrorKind::kRefused,
                         fmt::format("{}: more than {} directories deep", shown.substr(0, 80) + "...", kMaxWorkspaceDepth));
  // Each parent in turn: made (as the sandbox user) when missing, opened without following anything.
  auto dir = OpenBeneath(workspace_fd, "", O_PATH | O_DIRECTORY, "/workspace");
  if (!dir.ok()) return dir.status();
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    std::string part(parts[i]);
    walked += (walked.empty() ? "" : "/") + part;
    {
      ActAsSandboxUser as_sandbox_user(uid, gid);
      if (::mkdirat(dir->get(), part.c_str(), 0755) != 0 && errno != EEXIST)
        return Status::Errno(fmt::format("mkdir(/workspace/{})", walked));
    }
    auto next = OpenBeneath(dir->get(), part, O_PATH | O_DIRECTORY | O_NOFOLLOW, "/workspace/" + walked);
    if (!next.ok()) return next.status();
    dir = std::move(next);
  }
  std::string name(parts.back());
  struct stat st;
  if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    return Status::Error(ErrorKind::kRefused, fmt::format("{} is a directory; give a file", shown));
  return ReplaceFile(dir->get(), name, data, uid, gid, shown);
}

std::optional<std::string> PercentEncodedIfNotUtf8(std::string_view path) {
  const std::string bytes(path);
  if (SanitizeUtf8(bytes) == bytes) return std::nullopt;
  std::string encoded;
  for (unsigned char c : path) {
    const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (alnum || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') encoded += static_cast<char>(c);
    else encoded += fmt::format("%{:02X}", c);
  }
  return encoded;
}

bool AppendListedFile(nlohmann::json& list, nlohmann::json entry, size_t max_bytes, size_t* bytes) {
  if (auto encoded = PercentEncodedIfNotUtf8(entry["path"].get_ref<const std::string&>()))
    entry["path_encoded"] = *encoded;
  *bytes += entry.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size() + 1;
  if (*bytes > max_bytes) return false;
  list.push_back(std::move(entry));
  return true;
}

StatusOr<WorkspaceListing> ListWorkspaceDir(int workspace_fd, const std::string& rel, size_t max_entries) {
  std::string shown = "/workspace" + (rel.empty() ? "" : "/" + rel);
  auto dir = OpenBeneath(workspace_fd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, shown);
  if (!dir.ok()) return dir.status();
  DIR* stream = ::fdopendir(dir->release());
  if (!stream) return Status::Errno(fmt::format("fdopendir({})", shown));
  WorkspaceListing listing;
  std::vector<WorkspaceEntry>& entries = listing.entries;
  while (struct dirent* e = ::readdir(stream)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (entries.size() == max_entries) {
      listing.truncated = true;
      break;
    }
    struct stat st;
    if (::fstatat(::dirfd(stream), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    WorkspaceEntry entry;
    entry.name = name;
    entry.path = shown + "/" + name;
    entry.type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : S_ISLNK(st.st_mode) ? "symlink" : "other";
    entry.size = static_cast<uint64_t>(st.st_size);
    entries.push_back(std::move(entry));
  }
  ::closedir(stream);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return listing;
}

namespace {

// The mount a directory open as `fd` is on: its mount id (a bind of the same file system has one of its own), or its
// device where the kernel gives no id.
StatusOr<uint64_t> MountOf(int fd, const std::string& shown) {
  struct statx stx = {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) != 0) return Status::Errno(fmt::format("statx({})", shown));
  if (stx.stx_mask & STATX_MNT_ID) return stx.stx_mnt_id;
  return (static_cast<uint64_t>(stx.stx_dev_major) << 32 | stx.stx_dev_minor) | (1ull << 63);
}

// Whether the directory open as `fd` is on `mount` (MountOf): a removal stays on the workspace's own mount, so a
// mount below it (a bind, even of the same file system) is refused, not emptied.
Status SameMount(int fd, uint64_t mount, const std::string& shown) {
  auto here = MountOf(fd, shown);
  if (!here.ok()) return here.status();
  if (*here != mount)
    return Status::Error(ErrorKind::kRefused, fmt::format("refusing to remove {}: a mount point is in it", shown));
  return OkStatus();
}

// Removes what `dir` holds, depth first, without following a link (a link is removed, not its target) or entering
// another mount.
Status RemoveContents(int dir, uint64_t mount, const std::string& shown, int depth) {
  NSBOX_RETURN_IF_ERROR(SameMount(dir, mount, shown));
  if (depth > static_cast<int>(kMaxWorkspaceDepth))
    return Status::Error(ErrorKind::kRefused,
                         fmt::format("refusing to remove {}: more than {} directories deep (remove it with an exec)",
                                     shown.substr(0, 80) + "...", kMaxWorkspaceDepth));
  // In batches of names, read afresh from the start each time: the sandbox decides how many names a directory holds,
  // and the server's memory must not follow. A batch that is not full was the rest of the directory. A sandbox that
  // refills it as fast as it empties is stopped at the last round, and the final rmdir reports the directory not empty.
  constexpr size_t kBatch = 256;  // names held per level of the tree
  constexpr int kMaxRounds = 65536;
  std::vector<std::pair<std::string, bool>> names;
  for (int round = 0; round < kMaxRounds; ++round) {
    int copy = ::dup(dir);
    if (copy < 0) return Status::Errno("dup");
    DIR* stream = ::fdopendir(copy);
    if (!stream) {
      ::close(copy);
      return Status::Errno(fmt::format("fdopendir({})", shown));
    }
    ::rewinddir(stream);  // the copy shares the offset of the last round's stream
    names.clear();
    while (names.size() < kBatch) {
      struct dirent* e = ::readdir(stream);
      if (e == nullptr) break;
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st;
      if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      names.emplace_back(name, S_ISDIR(st.st_mode));
    }
    ::closedir(stream);
    for (const auto& [name, is_dir] : names) {
      if (is_dir) {
        UniqueFd sub(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub) return Status::Errno(fmt::format("open({}/{})", shown, name));
        NSBOX_RETURN_IF_ERROR(RemoveContents(sub.get(), mount, shown + "/" + name, depth + 1));
      }
      if (::unlinkat(dir, name.c_str(), is_dir ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT)
        return Status::Errno(fmt::format("remove({}/{})", shown, name));
    }
    if (names.size() < kBatch) break;
  }
  return OkStatus();
}

}  // namespace

Status RemoveWorkspacePath(int workspace_fd, const std::string& rel) {
  std::string trimmed = rel;
  while (trimmed.ends_with("/")) trimmed.pop_back();
  if (trimmed.empty()) return Status::Error(ErrorKind::kRefused, "refusing to remove /workspace itself");
  std::string shown = "/workspace/" + trimmed;
  auto slash = trimmed.find_last_of('/');
  std::string dir_rel = slash == std::string::npos ? "" : trimmed.substr(0, slash);
  std::string name = slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
  auto dir = OpenBeneath(workspace_fd, dir_rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, "/workspace/" + dir_rel);
  if (!dir.ok()) return dir.status();
  struct stat st;
  if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return Status::Errno(fmt::format("stat({})", shown));
  if (S_ISDIR(st.st_mode)) {
    UniqueFd sub(::openat(dir->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) return Status::Errno(fmt::format("open({})", shown));
    auto workspace = MountOf(workspace_fd, "/workspace");
    if (!workspace.ok()) return workspace.status();
    NSBOX_RETURN_IF_ERROR(RemoveContents(sub.get(), *workspace, shown, 0));
  }
  if (::unlinkat(dir->get(), name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0)
    return Status::Errno(fmt::format("remove({})", shown));
  return OkStatus();
}

}  // namespace nsbox::session
