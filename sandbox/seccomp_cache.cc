// SeccompCache: one file per compiled program, "<hash of key>.bpf": a header, the full key, then the program.
#include "nsbox_config.h"
#include "sandbox/seccomp_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <seccomp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sandbox/base/defer.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox {
namespace {

// Bump when the file layout or the compilation's meaning changes in a way the key does not capture.
constexpr char kMagic[] = "nsbox-seccomp-cache 3\n";
constexpr size_t kMaxFileBytes = 1 << 20;
// The flags word of an entry.
// Bit 2 was "allows parking" (sessions no longer park an exec): files that carry it still load.
constexpr uint64_t kUsesNotify = 1, kRetiredParkingFlag = 2;

// The directory, opened without following a final symlink, if it belongs to us and nobody else may write to it.
UniqueFd OpenTrustedDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return {};
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) return {};
  return fd;
}

std::string FileName(const std::string& key) { return fmt::format("{:016x}.bpf", std::hash<std::string>{}(key)); }

void PutU64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

bool GetU64(std::string_view in, size_t* pos, uint64_t* v) {
  if (in.size() - *pos < sizeof *v) return false;
  memcpy(v, in.data() + *pos, sizeof *v);
  *pos += sizeof *v;
  return true;
}

// Oldest entries go first once there are more than the limit; temp files of a writer that died go after a minute.
void Trim(int dir_fd, const std::string& keep) {
  int dup_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return;
  DIR* listing = ::fdopendir(dup_fd);
  if (!listing) {
    ::close(dup_fd);
    return;
  }
  std::vector<std::pair<int64_t, std::string>> entries;
  const int64_t now = static_cast<int64_t>(::time(nullptr));
  while (struct dirent* entry = ::readdir(listing)) {
    std::string name = entry->d_name;
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (name.starts_with(".tmp-")) {
      if (now - st.st_mtime > 60) ::unlinkat(dir_fd, name.c_str(), 0);
    } else if (name.ends_with(".bpf") && name != keep) {
      entries.emplace_back(st.st_mtime, name);
    }
  }
  ::closedir(listing);
  if (entries.size() < static_cast<size_t>(kSeccompCacheMaxEntries)) return;
  std::sort(entries.begin(), entries.end());
  size_t excess = entries.size() + 1 - static_cast<size_t>(kSeccompCacheMaxEntries);
  for (size_t i = 0; i < excess; ++i) ::unlinkat(dir_fd, entries[i].second.c_str(), 0);
}

// What every key starts with: the cache format, the nsbox executable (path, inode, size, mtime), libseccomp's version,
// the host and the profile's name.
std::string KeyPrefix(const std::string& name, const SeccompHost& host) {
  std::string key = kMagic;
  char exe[4096];
  ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  struct stat st = {};
  if (len > 0) {
    exe[len] = '\0';
    ::stat(exe, &st);
  }
  const scmp_version* version = seccomp_version();
  key += fmt::format("nsbox {} exe {} {}:{} {} {}.{}\n", NSBOX_VERSION, len > 0 ? exe : "?", st.st_dev, st.st_ino,
                     st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  key += fmt::format("libseccomp {}.{}.{}\n", version ? version->major : 0, version ? version->minor : 0,
                     version ? version->micro : 0);
  key += fmt::format("host {} {} {}.{}\n", host.go_arch, host.scmp_arch, host.kernel.major, host.kernel.minor);
  key += fmt::format("name {}\n", name);
  return key;
}

}  // namespace

std::string SeccompCacheDir() {
  if (const char* off = std::getenv("NSBOX_SECCOMP_CACHE"); off && std::string(off) == "off") return "";
  // Absolute only: a relative one would put the cache wherever nsbox happened to be started.
  if (const char* env = std::getenv("NSBOX_CACHE_DIR"); env && *env)
    return *env == '/' ? std::string(env) + "/seccomp" : "";
  if (::geteuid() == 0) return "/var/cache/nsbox/seccomp";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/') return std::string(xdg) + "/nsbox/seccomp";
  if (const char* home = std::getenv("HOME"); home && *home == '/') return std::string(home) + "/.cache/nsbox/seccomp";
  return "";
}

std::string SeccompCacheKey(const std::string& name, const std::string& profile_text, const SeccompHost& host) {
  std::string key = KeyPrefix(name, host);
  key += "text ";
  PutU64(key, profile_text.size());
  key += profile_text;
  return key;
}

std::string SeccompCacheFileKey(const std::string& name, const struct stat& profile, const SeccompHost& host,
                                time_t now) {
  if (!S_ISREG(profile.st_mode) || now - profile.st_ctim.tv_sec < kSeccompStableSeconds) return "";
  // "file", where the other kind has "text": no text key can equal a file key.
  return KeyPrefix(name, host) + fmt::format("file {}:{} {} {}.{} {}.{}\n", profile.st_dev, profile.st_ino,
                                             profile.st_size, profile.st_mtim.tv_sec, profile.st_mtim.tv_nsec,
                                             profile.st_ctim.tv_sec, profile.st_ctim.tv_nsec);
}

std::shared_ptr<SeccompProgram> LookupSeccompCache(const std::string& dir, const std::string& key) {
  if (dir.empty()) return nullptr;
  UniqueFd dir_fd = OpenTrustedDir(dir);
  if (!dir_fd) return nullptr;
  UniqueFd fd(::openat(dir_fd.get(), FileName(key).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return nullptr;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0 ||
      st.st_size <= 0 || static_cast<size_t>(st.st_size) > kMaxFileBytes)
    return nullptr;
  // Mapped, not read into a buffer: its pages come from the page cache in one fault (fault-around), where a copy
  // would fault in each fresh page of its own (about 12 us each on this kind of VM). Nothing is written to the file
  // but by rename, so the mapping sees one whole entry.
  const size_t size = static_cast<size_t>(st.st_size);
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapped == MAP_FAILED) return nullptr;
  Defer unmap([&] { ::munmap(mapped, size); });
  const std::string_view data(static_cast<const char*>(mapped), size);
  size_t pos = 0;
  uint64_t key_size = 0, flags = 0, notify_errno = 0, instructions = 0;
  if (!GetU64(data, &pos, &key_size) || key_size != key.size() || data.size() - pos < key_size ||
      data.substr(pos, key_size) != key)
    return nullptr;
  pos += key_size;
  if (!GetU64(data, &pos, &flags) || !GetU64(data, &pos, &notify_errno) || !GetU64(data, &pos, &instructions))
    return nullptr;
  if (flags > (kUsesNotify | kRetiredParkingFlag) || notify_errno > 4095 || instructions == 0 ||
      instructions > BPF_MAXINSNS || data.size() - pos != instructions * sizeof(sock_filter))
    return nullptr;
  auto program = std::make_shared<SeccompProgram>();
  program->filter.resize(instructions);
  memcpy(program->filter.data(), data.data() + pos, instructions * sizeof(sock_filter));
  program->uses_notify = (flags & kUsesNotify) != 0;
  program->notify_errno = static_cast<int>(notify_errno);
  return program;
}

void StoreSeccompCache(const std::string& dir, const std::string& key, const SeccompProgram& program) {
  if (dir.empty() || program.filter.empty()) return;
  // mkdir -p: the cache directory itself is 0700; parents it makes get ordinary modes (0755 under the umask), as
  // other directories may come to live beside it (root's /var/cache/nsbox also holds image stores, which sandboxes
  // must be able to pass through).
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size()) ::mkdir(dir.c_str(), 0700);
    else if (dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0755);
  }
  UniqueFd dir_fd = OpenTrustedDir(dir);
  if (!dir_fd) return;
  std::string data;
  PutU64(data, key.size());
  data += key;
  PutU64(data, program.uses_notify ? kUsesNotify : 0);
  PutU64(data, static_cast<uint64_t>(program.notify_errno));
  PutU64(data, program.filter.size());
  data.append(reinterpret_cast<const char*>(program.filter.data()), program.filter.size() * sizeof(sock_filter));

  uint64_t random = 0;
  if (::getrandom(&random, sizeof random, GRND_NONBLOCK) != sizeof random) random = static_cast<uint64_t>(::getpid());
  const std::string temp = fmt::format(".tmp-{:016x}", random);
  UniqueFd fd(::openat(dir_fd.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  const std::string name = FileName(key);
  if (WriteAll(fd.get(), data) != 0 || ::renameat(dir_fd.get(), temp.c_str(), dir_fd.get(), name.c_str()) != 0) {
    ::unlinkat(dir_fd.get(), temp.c_str(), 0);
    return;
  }
  Trim(dir_fd.get(), name);
}

}  // namespace nsbox
