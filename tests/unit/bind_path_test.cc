// Unit tests: the by-descriptor walk of bind sources and mount points (sandbox/bind_path.h) in a temp directory.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <filesystem>
#include <fstream>
#include <string>

#include "sandbox/base/unique_fd.h"
#include "sandbox/bind_path.h"

using namespace nsbox;
namespace fs = std::filesystem;

namespace {

struct Tree {
  fs::path root;
  UniqueFd root_fd;
  Tree() {
    char tmpl[] = "/tmp/bind-path-test-XXXXXX";
    root = ::mkdtemp(tmpl);
    ::chmod(root.c_str(), 0755);
    fs::create_directories(root / "real/sub");
    std::ofstream(root / "real/sub/file") << "x";
    root_fd.reset(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  }
  ~Tree() { fs::remove_all(root); }
  // The inode of what OpenHostPath opened, or of the path given.
  static ino_t Inode(int fd) {
    struct stat st;
    return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
  }
  ino_t Inode(const std::string& path) const {
    struct stat st;
    return ::stat((root / path).c_str(), &st) == 0 ? st.st_ino : 0;
  }
};

struct Opened {
  UniqueFd fd;
  int err = 0;
  std::string bad_link;
};

Opened Open(const Tree& t, const std::string& path) {
  char bad[NAME_MAX + 1] = "";
  Opened o;
  o.fd.reset(OpenHostPath(t.root_fd.get(), path.c_str(), bad, sizeof bad));
  o.err = o.fd ? 0 : errno;
  o.bad_link = bad;
  return o;
}

}  // namespace

TEST_CASE("OpenHostPath opens plain paths, never climbs above its root, and restarts absolute links there") {
  Tree t;
  auto plain = Open(t, "/real/sub/file");
  REQUIRE(plain.fd);
  CHECK(Tree::Inode(plain.fd.get()) == t.Inode("real/sub/file"));
  auto above = Open(t, "/../../real/../..");
  REQUIRE(above.fd);
  CHECK(Tree::Inode(above.fd.get()) == t.Inode(""));
  CHECK(Open(t, "/real/sub/file/x").err == ENOTDIR);
  CHECK(Open(t, "/missing/x").err == ENOENT);
}

TEST_CASE("OpenHostPath follows a link only where root made it in a directory only root writes") {
  Tree t;
  fs::create_directory_symlink("/real/sub", t.root / "real/abs");  // absolute: from the walk's root
  fs::create_directory_symlink("sub", t.root / "real/rel");
  const bool root = ::geteuid() == 0;
  for (const char* link : {"/real/abs/file", "/real/rel/file"}) {
    auto o = Open(t, link);
    if (root) {  // root-owned links in a root-owned 0755 directory
      REQUIRE(o.fd);
      CHECK(Tree::Inode(o.fd.get()) == t.Inode("real/sub/file"));
    } else {  // the caller's links: a sandbox running as the caller could have made them
      CHECK(o.err == ELOOP);
    }
  }
  // A directory others may write: a link there is refused whoever owns it (it could have been moved in).
  fs::create_directories(t.root / "shared");
  ::chmod((t.root / "shared").c_str(), 01777);
  fs::create_directory_symlink("/real/sub", t.root / "shared/data");
  auto shared = Open(t, "/shared/data/file");
  CHECK(shared.err == ELOOP);
  CHECK(shared.bad_link == "data");
  if (root) {  // a link a sandbox's unprivileged host uid made, in a root-only directory: refused
    REQUIRE(::lchown((t.root / "real/rel").c_str(), 65534, 65534) == 0);
    auto planted = Open(t, "/real/rel");
    CHECK(planted.err == ELOOP);
    CHECK(planted.bad_link == "rel");
  }
}

// A loop of root's own links was reported as a link "not made by root" (the count of links set bad_link too).
TEST_CASE("OpenHostPath: a loop of links root made is ELOOP with no link to blame") {
  Tree t;
  if (::geteuid() != 0) {
    WARN("SKIP: the links must be root's to be followed at all");
    return;
  }
  fs::create_symlink("loop2", t.root / "real/loop1");
  fs::create_symlink("loop1", t.root / "real/loop2");
  auto loop = Open(t, "/real/loop1");
  CHECK(loop.err == ELOOP);
  CHECK(loop.bad_link.empty());
}

TEST_CASE("OpenMountPoint makes missing directories and the last component, and follows no link at all") {
  Tree t;
  char bad[NAME_MAX + 1] = "";
  UniqueFd dir(OpenMountPoint(t.root_fd.get(), "/made/a/b", true, bad, sizeof bad));
  REQUIRE(dir);
  CHECK(fs::is_directory(t.root / "made/a/b"));
  UniqueFd file(OpenMountPoint(t.root_fd.get(), "/made/f", false, bad, sizeof bad));
  REQUIRE(file);
  CHECK(fs::is_regular_file(t.root / "made/f"));
  fs::create_directory_symlink("real", t.root / "link");
  for (const char* path : {"/link", "/link/sub", "/link/new"}) {
    bad[0] = '\0';
    errno = 0;
    UniqueFd refused(OpenMountPoint(t.root_fd.get(), path, true, bad, sizeof bad));
    CHECK_FALSE(refused);
    CHECK(errno == ELOOP);
    CHECK(std::string(bad) == "link");
  }
  CHECK_FALSE(fs::exists(t.root / "real/new"));
  // The plan has no "." or ".." in a mount point: refused, whether or not the parent exists.
  for (const char* path : {"/made/../x", "/made/./x", "/made/a/..", "/missing/../x"}) {
    errno = 0;
    UniqueFd refused(OpenMountPoint(t.root_fd.get(), path, true, bad, sizeof bad));
    CHECK_FALSE(refused);
    CHECK(errno == EINVAL);
  }
  // A link as the last component below an existing parent is refused like one on the way.
  fs::create_symlink("/etc/passwd", t.root / "made/a/planted");
  bad[0] = '\0';
  errno = 0;
  UniqueFd planted(OpenMountPoint(t.root_fd.get(), "/made/a/planted", false, bad, sizeof bad));
  CHECK_FALSE(planted);
  CHECK(errno == ELOOP);
  CHECK(std::string(bad) == "planted");
  // A file where a directory is on the way.
  errno = 0;
  UniqueFd through_file(OpenMountPoint(t.root_fd.get(), "/made/f/x", true, bad, sizeof bad));
  CHECK_FALSE(through_file);
  CHECK(errno == ENOTDIR);
}

TEST_CASE("KernelFsBindRefusal refuses the root itself and proc, and allows an ordinary directory") {
  UniqueFd host_root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  UniqueFd proc(::open("/proc/self", O_PATH | O_CLOEXEC));
  Tree t;
  UniqueFd ordinary(::open((t.root / "real").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(proc);
  CHECK(KernelFsBindRefusal(host_root.get(), host_root.get()) != nullptr);
  CHECK(KernelFsBindRefusal(host_root.get(), proc.get()) != nullptr);
  CHECK(KernelFsBindRefusal(host_root.get(), ordinary.get()) == nullptr);
}
