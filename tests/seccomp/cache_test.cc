// The compiled-program cache: hits return what was stored, any change of input misses, untrusted files are ignored.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "nsbox_config.h"
#include "sandbox/base/fs.h"
#include "sandbox/seccomp.h"
#include "sandbox/seccomp_cache.h"

using namespace nsbox;
namespace fs = std::filesystem;

namespace {

const std::string kCacheProfilesDir = NSBOX_SOURCE_DIR "/seccomp-profiles";

// A temporary NSBOX_CACHE_DIR for one test.
struct CacheDir {
  CacheDir() {
    char name[] = "/tmp/nsbox-seccomp-cache-XXXXXX";
    root = ::mkdtemp(name);
    ::setenv("NSBOX_CACHE_DIR", root.c_str(), 1);
    ::unsetenv("NSBOX_SECCOMP_CACHE");
  }
  ~CacheDir() {
    ::unsetenv("NSBOX_CACHE_DIR");
    ::unsetenv("NSBOX_SECCOMP_CACHE");
    fs::remove_all(root);
  }
  fs::path dir() const { return fs::path(root) / "seccomp"; }
  std::vector<fs::path> Entries() const {
    std::vector<fs::path> out;
    if (!fs::exists(dir())) return out;
    for (const auto& entry : fs::directory_iterator(dir()))
      if (entry.path().extension() == ".bpf") out.push_back(entry.path());
    return out;
  }
  std::string root;
};

std::vector<sock_filter> LoadCached(const std::string& name) {
  auto program = LoadSeccompProfile(name, kCacheProfilesDir);
  REQUIRE(program.ok());
  return (*program)->filter;
}

bool Same(const std::vector<sock_filter>& a, const std::vector<sock_filter>& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](const sock_filter& x, const sock_filter& y) {
           return x.code == y.code && x.jt == y.jt && x.jf == y.jf && x.k == y.k;
         });
}

// Changes the last instruction's constant in a cache file, as a forger would.
void Tamper(const fs::path& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-4, std::ios::end);
  const uint32_t forged = 0x7fff0000;  // SECCOMP_RET_ALLOW
  f.write(reinterpret_cast<const char*>(&forged), sizeof forged);
}

}  // namespace

TEST_CASE("the cache directory is private, and the parents it makes stay passable for what lives beside it") {
  CacheDir cache;
  const std::string nested = cache.root + "/var/cache/nsbox";
  ::setenv("NSBOX_CACHE_DIR", nested.c_str(), 1);
  LoadCached("default");
  struct stat st;
  REQUIRE(::stat((nested + "/seccomp").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  for (const std::string& parent : {cache.root + "/var", cache.root + "/var/cache", nested}) {
    REQUIRE(::stat(parent.c_str(), &st) == 0);
    INFO(parent);
    CHECK((st.st_mode & S_IXOTH) != 0);
  }
}

TEST_CASE("a compiled profile is stored once and later loads come from the cache") {
  CacheDir cache;
  auto compiled = LoadCached("default");
  REQUIRE(cache.Entries().size() == 1);
  struct stat st;
  REQUIRE(::stat(cache.dir().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  auto program = LoadSeccompProfile("default", kCacheProfilesDir);
  REQUIRE(program.ok());
  CHECK(Same((*program)->filter, compiled));
  CHECK((*program)->uses_notify);
  CHECK((*program)->name == "default");
  // Proof that the second load read the file: a changed program in it comes back.
  Tamper(cache.Entries()[0]);
  auto from_file = LoadCached("default");
  CHECK_FALSE(Same(from_file, compiled));
  CHECK(from_file.back().k == 0x7fff0000u);
  CHECK(cache.Entries().size() == 1);
}

TEST_CASE("the cache is not trusted when others may write to it or the file is not ours") {
  CacheDir cache;
  auto compiled = LoadCached("default");
  REQUIRE(cache.Entries().size() == 1);
  fs::path entry = cache.Entries()[0];
  Tamper(entry);
  SECTION("a group- or world-writable directory") {
    REQUIRE(::chmod(cache.dir().c_str(), 0777) == 0);
    CHECK(Same(LoadCached("default"), compiled));
  }
  SECTION("a file owned by another user") {
    // The suite runs as root (tools/test); an ordinary user cannot give a file away, so only root checks this.
    if (::geteuid() == 0) {
      REQUIRE(::chown(entry.c_str(), 65534, 65534) == 0);
      CHECK(Same(LoadCached("default"), compiled));
    }
  }
  SECTION("a writable file") {
    REQUIRE(::chmod(entry.c_str(), 0666) == 0);
    CHECK(Same(LoadCached("default"), compiled));
  }
  SECTION("a truncated file is recompiled and replaced") {
    fs::resize_file(entry, fs::file_size(entry) - 3);
    CHECK(Same(LoadCached("default"), compiled));
    CHECK(Same(LoadCached("default"), compiled));
    CHECK(fs::file_size(entry) > 100);
  }
}

TEST_CASE("another profile text, name or host misses the cache") {
  CacheDir cache;
  fs::path copy = fs::path(cache.root) / "mine.json";
  fs::copy_file(kCacheProfilesDir + "/strict.json", copy);
  auto strict = LoadCached(copy.string());
  REQUIRE(cache.Entries().size() == 1);
  // Same rules, one more space: a new entry, never the old program for different text.
  {
    std::ofstream f(copy, std::ios::app);
    f << " ";
  }
  CHECK(Same(LoadCached(copy.string()), strict));
  CHECK(cache.Entries().size() == 2);
  // A different profile under the same path gets its own program.
  fs::copy_file(kCacheProfilesDir + "/default.json", copy, fs::copy_options::overwrite_existing);
  CHECK(Same(LoadCached(copy.string()), LoadCached("default")));
  CHECK_FALSE(Same(LoadCached(copy.string()), strict));

  SeccompHost host = NativeSeccompHost();
  std::string text = *ReadFile(copy.string());
  std::string key = SeccompCacheKey("x", text, host);
  CHECK(key.find(text) != std::string::npos);
  CHECK(key != SeccompCacheKey("y", text, host));
  SeccompHost older = host;
  older.kernel = {4, 19};
  CHECK(key != SeccompCacheKey("x", text, older));
  CHECK(LookupSeccompCache(cache.dir().string(), SeccompCacheKey("never stored", text, host)) == nullptr);
}

// Reads the key stored at the start of a cache entry.
std::string StoredKey(const fs::path& entry) {
  std::string data = *ReadFile(entry.string());
  uint64_t size = 0;
  REQUIRE(data.size() >= sizeof size);
  memcpy(&size, data.data(), sizeof size);
  REQUIRE(data.size() - sizeof size >= size);
  return data.substr(sizeof size, size);
}

TEST_CASE("a profile file that has not changed lately is known by its identity, a recent one by its text") {
  SeccompHost host = NativeSeccompHost();
  struct stat st;
  REQUIRE(::stat((kCacheProfilesDir + "/strict.json").c_str(), &st) == 0);
  const time_t changed = st.st_ctim.tv_sec;
  // Within kSeccompStableSeconds of its last change: no identity key (the times may not show a second edit).
  CHECK(SeccompCacheFileKey("strict", st, host, changed).empty());
  CHECK(SeccompCacheFileKey("strict", st, host, changed + kSeccompStableSeconds - 1).empty());
  const std::string key = SeccompCacheFileKey("strict", st, host, changed + kSeccompStableSeconds);
  REQUIRE_FALSE(key.empty());
  CHECK(key.find("\"defaultAction\"") == std::string::npos);  // the text is not in it
  CHECK(key != SeccompCacheKey("strict", *ReadFile(kCacheProfilesDir + "/strict.json"), host));
  // Any change of what an edit or a replacement changes is another key.
  const time_t later = changed + 100;
  for (auto change : std::vector<std::function<void(struct stat&)>>{
           [](struct stat& s) { s.st_ino += 1; }, [](struct stat& s) { s.st_dev += 1; },
           [](struct stat& s) { s.st_size += 1; }, [](struct stat& s) { s.st_mtim.tv_nsec ^= 1; },
           [](struct stat& s) { s.st_ctim.tv_nsec ^= 1; }, [](struct stat& s) { s.st_ctim.tv_sec -= 1; }}) {
    struct stat other = st;
    change(other);
    CHECK(SeccompCacheFileKey("strict", other, host, later) != SeccompCacheFileKey("strict", st, host, later));
  }
  CHECK(SeccompCacheFileKey("other", st, host, later) != SeccompCacheFileKey("strict", st, host, later));
  struct stat fifo = st;
  fifo.st_mode = S_IFIFO | 0644;
  CHECK(SeccompCacheFileKey("strict", fifo, host, later).empty());
}

TEST_CASE("a run loads a settled profile by its identity, and an edited profile never by its old one") {
  CacheDir cache;
  fs::path copy = fs::path(cache.root) / "mine.json";
  // Fresh: stored under its text. A load that a loaded machine held up until the copy had settled would store it
  // under its identity: then the copy and the load are made again (at most three times).
  std::vector<sock_filter> strict;
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::remove_all(cache.dir());
    fs::remove(copy);
    const time_t copied = ::time(nullptr);
    fs::copy_file(kCacheProfilesDir + "/strict.json", copy);
    strict = LoadCached(copy.string());
    if (::time(nullptr) - copied < kSeccompStableSeconds) break;
  }
  REQUIRE(cache.Entries().size() == 1);
  CHECK(StoredKey(cache.Entries()[0]).find("\"defaultAction\"") != std::string::npos);
  // Settled (its change time kSeccompStableSeconds in the past): stored and found under its identity.
  ::sleep(kSeccompStableSeconds + 1);
  CHECK(Same(LoadCached(copy.string()), strict));
  REQUIRE(cache.Entries().size() == 2);
  fs::path by_identity;
  for (const fs::path& entry : cache.Entries())
    if (StoredKey(entry).find("\"defaultAction\"") == std::string::npos) by_identity = entry;
  REQUIRE_FALSE(by_identity.empty());
  // Proof that the next load is served from that entry, without the text: a changed program in it comes back.
  Tamper(by_identity);
  CHECK(LoadCached(copy.string()).back().k == 0x7fff0000u);
  // Edited to the same size (the default errno, EPERM, becomes ENOENT): its change time is new, so its old identity
  // no longer matches, and the edited rules are compiled.
  std::string text = *ReadFile(copy.string());
  const size_t at = text.find("\"defaultErrnoRet\": 1,");
  REQUIRE(at != std::string::npos);
  text.replace(at, strlen("\"defaultErrnoRet\": 1,"), "\"defaultErrnoRet\": 2,");
  {
    std::ofstream f(copy, std::ios::trunc);
    f << text;
  }
  REQUIRE(fs::file_size(copy) == text.size());
  auto edited = LoadSeccompProfile(copy.string(), kCacheProfilesDir);
  REQUIRE(edited.ok());
  CHECK((*edited)->notify_errno == ENOENT);  // the errno nsbox answers denials with: the edited one
  CHECK((*edited)->filter.back().k != 0x7fff0000u);
  ::setenv("NSBOX_SECCOMP_CACHE", "off", 1);
  CHECK(Same((*edited)->filter, LoadCached(copy.string())));
}

TEST_CASE("the cache can be turned off and keeps a bounded number of entries") {
  CacheDir cache;
  ::setenv("NSBOX_SECCOMP_CACHE", "off", 1);
  CHECK(SeccompCacheDir().empty());
  LoadCached("default");
  CHECK_FALSE(fs::exists(cache.dir()));
  ::unsetenv("NSBOX_SECCOMP_CACHE");

  fs::create_directories(cache.dir());
  fs::permissions(cache.dir(), fs::perms::owner_all, fs::perm_options::replace);
  for (int i = 0; i < kSeccompCacheMaxEntries + 10; ++i) {
    std::ofstream(cache.dir() / ("old-" + std::to_string(i) + ".bpf")) << "stale";
  }
  LoadCached("strict");
  CHECK(cache.Entries().size() == static_cast<size_t>(kSeccompCacheMaxEntries));
  CHECK(Same(LoadCached("strict"), LoadCached("strict")));
}
