// Host id leases: the lowest id of the range that no account or subordinate range names and no live nsbox holds,
// held by an flock on a per-id file. flock, not a pid file: the lock goes with the last descriptor, so a SIGKILLed
// nsbox frees its id without anyone cleaning up, and two nsbox processes can never both believe they hold one id.
#include "sandbox/host_id_lease.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sandbox/base/fs.h"

namespace nsbox {
namespace {

struct HandedOutIds {
  uint64_t first, last;  // inclusive
};

bool ParseDecimalId(std::string_view text, uint64_t& out) {
  if (text.empty() || text.size() > 10) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  out = value;
  return true;
}

std::vector<std::string_view> ColonFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t colon = line.find(':', start);
    fields.push_back(line.substr(start, colon == std::string_view::npos ? std::string_view::npos : colon - start));
    if (colon == std::string_view::npos) return fields;
    start = colon + 1;
  }
}

// Ids the host already hands out: subordinate ranges (name:start:count) and accounts (the id in field 3).
void AddHandedOutIds(const std::string& etc_dir, std::vector<HandedOutIds>& excluded) {
  for (const char* file : {"subuid", "subgid"}) {
    auto text = ReadFile(etc_dir + "/" + file, 16 << 20);
    if (!text.ok()) continue;  // none: nothing is handed out
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) {
      auto fields = ColonFields(line);
      uint64_t start = 0, count = 0;
      if (fields.size() == 3 && ParseDecimalId(fields[1], start) && ParseDecimalId(fields[2], count) && count > 0)
        excluded.push_back({start, start + count - 1});
    }
  }
  for (const char* file : {"passwd", "group"}) {
    auto text = ReadFile(etc_dir + "/" + file, 16 << 20);
    if (!text.ok()) continue;
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) {
      auto fields = ColonFields(line);
      uint64_t id = 0;
      if (fields.size() >= 3 && ParseDecimalId(fields[2], id)) excluded.push_back({id, id});
    }
  }
}

bool IsHandedOut(const std::vector<HandedOutIds>& excluded, uint64_t id) {
  for (const HandedOutIds& interval : excluded)
    if (id >= interval.first && id <= interval.last) return true;
  return false;
}

// The lock directory, made when missing; only root may change it, or another user could hold every id's lock (or
// swap in a link to make nsbox create files elsewhere).
StatusOr<UniqueFd> OpenHostIdLockDir(const std::string& dir) {
  for (size_t slash = dir.find('/', 1); ; slash = dir.find('/', slash + 1)) {
    std::string part = dir.substr(0, slash);
    if (::mkdir(part.c_str(), slash == std::string::npos ? 0700 : 0755) != 0 && errno != EEXIST)
      return Status::Errno(fmt::format("mkdir({})", part));
    if (slash == std::string::npos) break;
  }
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return Status::Errno(fmt::format("open({}, O_DIRECTORY|O_NOFOLLOW)", dir));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::Errno(fmt::format("fstat({})", dir));
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return Status::Error(fmt::format("the host id lock directory {} belongs to uid {} with mode {:04o}: it must be "
                                     "this user's and writable by nobody else",
                                     dir, st.st_uid, st.st_mode & 07777));
  return fd;
}

// The lock of <dir>/<name>, or an empty fd when another holds it. A holder giving its lease up removes the file:
// one opened before that is locked in vain, so the lock counts only while the name still is that file.
StatusOr<UniqueFd> LockIdFile(int dir_fd, const std::string& name) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    UniqueFd lock(::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!lock) return Status::Errno(fmt::format("open({})", name));
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) return UniqueFd();
      return Status::Errno(fmt::format("flock({}, LOCK_EX|LOCK_NB)", name));
    }
    struct stat locked, named;
    if (::fstat(lock.get(), &locked) != 0) return Status::Errno(fmt::format("fstat({})", name));
    if (::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == locked.st_dev &&
        named.st_ino == locked.st_ino)
      return lock;
  }
  return UniqueFd();  // given up and taken again eight times over while we tried: busy
}

// Removes the files of holders that ended without giving their lease up (SIGKILL): leases take the lowest free id,
// so a killed holder's file above the ids in use would otherwise stay in /run for good. A file is removed only while
// locked here, as End() removes its own; a live holder's lock fails at once and its file stays.
void RemoveUnheldIdFiles(int dir_fd) {
  UniqueFd listing(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!listing) return;
  DIR* dir = ::fdopendir(listing.get());
  if (dir == nullptr) return;
  (void)listing.release();
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    uint64_t id = 0;
    if (ParseDecimalId(entry->d_name, id)) names.emplace_back(entry->d_name);
  }
  ::closedir(dir);
  for (const std::string& name : names) {
    auto lock = LockIdFile(dir_fd, name);
    if (lock.ok() && *lock) (void)::unlinkat(dir_fd, name.c_str(), 0);
  }
}

}  // namespace

HostIdLease::HostIdLease(uint32_t id, UniqueFd lock, UniqueFd dir)
    : id_(id), owner_(::getpid()), lock_(std::move(lock)), dir_(std::move(dir)) {}

HostIdLease& HostIdLease::operator=(HostIdLease&& other) noexcept {
  if (this == &other) return *this;
  End();
  id_ = std::exchange(other.id_, 0);
  owner_ = std::exchange(other.owner_, 0);
  lock_ = std::move(other.lock_);
  dir_ = std::move(other.dir_);
  return *this;
}

void HostIdLease::End() {
  // Unlinked while still locked: a taker that opened the file before sees it is gone (LockIdFile) and opens anew.
  if (lock_ && dir_ && owner_ == ::getpid()) {
    (void)::unlinkat(dir_.get(), std::to_string(id_).c_str(), 0);
    lock_.reset();
    RemoveUnheldIdFiles(dir_.get());
  }
  lock_.reset();
  dir_.reset();
}

StatusOr<HostIdRange> ParseHostIdRange(std::string_view text) {
  size_t dash = text.find('-');
  uint64_t first = 0, last = 0;
  if (dash == std::string_view::npos || !ParseDecimalId(text.substr(0, dash), first) ||
      !ParseDecimalId(text.substr(dash + 1), last))
    return Status::Error(fmt::format("host id range '{}': expected FIRST-LAST, e.g. 1048576-1114111", text));
  if (first <= 65535 || last >= 0xffffffffull || first > last)
    return Status::Error(fmt::format("host id range '{}': FIRST must be above 65535, LAST below 4294967295, and "
                                     "FIRST at most LAST", text));
  return HostIdRange{static_cast<uint32_t>(first), static_cast<uint32_t>(last)};
}

StatusOr<HostIdLeaseOptions> DefaultHostIdLeaseOptions() {
  HostIdLeaseOptions options;
  if (const char* range = std::getenv("NSBOX_HOST_ID_RANGE"); range && *range) {
    auto parsed = ParseHostIdRange(range);
    if (!parsed.ok()) return parsed.status().Wrap("NSBOX_HOST_ID_RANGE");
    options.range = *parsed;
  }
  if (const char* dir = std::getenv("NSBOX_HOST_ID_DIR"); dir && *dir) options.lock_dir = dir;
  if (HostHasDirectoryAccounts(options.etc_dir)) options.directory_has_id = DirectoryHasId;
  return options;
}

StatusOr<bool> DirectoryHasId(uint64_t id) {
  std::vector<char> buffer(64 * 1024);
  struct passwd pw, *user = nullptr;
  struct group gr, *group = nullptr;
  // ENOENT and ESRCH are glibc's words for "no such account" from some modules, as is a null answer.
  auto failed = [](int err) { return err != 0 && err != ENOENT && err != ESRCH; };
  if (int err = ::getpwuid_r(static_cast<uid_t>(id), &pw, buffer.data(), buffer.size(), &user); failed(err))
    return Status::Errno(fmt::format("getpwuid_r({})", id), err);
  if (user) return true;
  if (int err = ::getgrgid_r(static_cast<gid_t>(id), &gr, buffer.data(), buffer.size(), &group); failed(err))
    return Status::Errno(fmt::format("getgrgid_r({})", id), err);
  return group != nullptr;
}

StatusOr<HostIdLease> LeaseHostId(const HostIdLeaseOptions& options) {
  if (options.lock_dir.empty() || options.lock_dir[0] != '/')
    return Status::Error(fmt::format("the host id lock directory '{}' is not an absolute path", options.lock_dir));
  auto dir = OpenHostIdLockDir(options.lock_dir);
  if (!dir.ok()) return dir.status();
  const UniqueFd dir_fd = std::move(*dir);
  std::vector<HandedOutIds> excluded;
  AddHandedOutIds(options.etc_dir, excluded);
  uint64_t busy = 0;
  for (uint64_t id = options.range.first; id <= options.range.last; ++id) {
    if (IsHandedOut(excluded, id)) continue;
    if (options.directory_has_id) {
      // A directory that does not answer (sssd down) vouches for no id: no lease, and the cause said.
      auto has = options.directory_has_id(id);
      if (!has.ok())
        return has.status().Wrap(
            "asking the host's user database (a source /etc/nsswitch.conf names) whether a host "
            "id is free");
      if (*has) continue;
    }
    std::string name = std::to_string(id);
    auto lock = LockIdFile(dir_fd.get(), name);
    if (!lock.ok()) return lock.status().Wrap(options.lock_dir);
    if (*lock) {
      UniqueFd own_dir(::fcntl(dir_fd.get(), F_DUPFD_CLOEXEC, 0));
      if (!own_dir) return Status::Errno(fmt::format("dup({})", options.lock_dir));
      return HostIdLease(static_cast<uint32_t>(id), std::move(*lock), std::move(own_dir));
    }
    ++busy;
  }
  return Status::Error(
      fmt::format("no free host id in {}-{} ({} held by running sandboxes, the rest handed out by "
                  "{}/subuid, subgid, passwd or group{}): set NSBOX_HOST_ID_RANGE to a larger range",
                  options.range.first, options.range.last, busy, options.etc_dir,
                  options.directory_has_id ? ", or a directory service's accounts" : ""));
}

bool HostHasDirectoryAccounts(const std::string& etc_dir) {
  auto text = ReadFile(etc_dir + "/nsswitch.conf", 1 << 20);
  if (!text.ok()) return false;  // none: glibc reads the files alone
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream name(line.substr(0, colon));
    std::string database;
    name >> database;
    if (database != "passwd" && database != "group") continue;
    // The sources, with the actions ([NOTFOUND=return], spaces and all, or written against the next name) left out.
    std::string sources;
    bool in_action = false;
    for (char c : std::string_view(line).substr(colon + 1)) {
      if (c == '[' || c == ']') {
        in_action = c == '[';
        sources += ' ';
      } else if (!in_action) {
        sources += c;
      }
    }
    std::istringstream words(sources);
    // Only the files, and systemd's records (its dynamic users lie below the lease's range; user records of
    // /etc/userdb are not looked at), are read without asking: compat, db, cache and every service may hold more.
    for (std::string source; words >> source;)
      if (source != "files" && source != "systemd") return true;
  }
  return false;
}

bool InInitialUserNamespace() {
  auto map = ReadFile("/proc/self/uid_map", 1 << 16);
  if (!map.ok()) return false;
  unsigned long inside = 0, outside = 0, count = 0;
  return std::sscanf(map->c_str(), "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 && outside == 0 &&
         count == 4294967295UL;
}

StatusOr<HostIdLease> LeaseHostIdsIfRoot(Policy& policy) {
  if (::geteuid() != 0 || !InInitialUserNamespace()) return HostIdLease();
  auto options = DefaultHostIdLeaseOptions();
  if (!options.ok()) return options.status().Wrap("leasing a host uid for the sandbox");
  auto lease = LeaseHostId(*options);
  if (!lease.ok()) return lease.status().Wrap("leasing a host uid for the sandbox");
  policy = policy.WithHostIds(lease->id(), lease->id());
  return lease;
}

}  // namespace nsbox
