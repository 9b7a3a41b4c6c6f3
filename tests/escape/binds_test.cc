// Escape suite: binds: links a sandbox planted in a workspace, followed by a later run's bind source or destination,
// and binds of the host's kernel filesystems or over the sandbox's own /proc, /sys and /dev.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
namespace fs = std::filesystem;

namespace {

// A host directory with a workspace in it that the sandbox user (an unprivileged host uid) may write.
struct SharedWorkspace {
  TempDir dir;
  std::string path;
  SharedWorkspace() : path(dir.path() + "/ws") {
    REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
    REQUIRE(::mkdir(path.c_str(), 0777) == 0);
    REQUIRE(::chmod(path.c_str(), 0777) == 0);
  }
  // Run 1: the sandbox leaves links behind in the workspace.
  void Plant(const std::string& shell) const {
    auto r = RunNsboxRaw({"run", "--workspace", path, "--", "/bin/sh", "-c", shell});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }
};

// A directory in the host's /var/tmp that anyone may write: what a writable bind through a planted link reached.
struct HostVarTmpDir {
  std::string path = "/var/tmp/" + UniqueMarker("bind-target");
  HostVarTmpDir() {
    REQUIRE(::mkdir(path.c_str(), 0777) == 0);
    REQUIRE(::chmod(path.c_str(), 0777) == 0);
  }
  ~HostVarTmpDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// One line on stderr, exit 125, and the program never ran.
void RequireRefused(const ProcessResult& r, const std::string& must_name) {
  INFO("exit " << r.exit_code << "\nstdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.exit_code == 125);
  CHECK(r.out.find("RAN") == std::string::npos);
  CHECK_THAT(r.err, Catch::Contains(must_name));
  CHECK(r.err.find('\n') == r.err.size() - 1);
}

}  // namespace

TEST_CASE("a link planted in a workspace by one run is not followed by a later run's --ro-bind (host /etc stays out)",
          "[escape][filesystem][binds]") {
  SharedWorkspace ws;
  ws.Plant("ln -s /etc /workspace/data && ln -s ../../../../../../etc /workspace/rel");
  for (std::string link : {"data", "rel"}) {
    auto r = RunNsboxRaw({"run", "--ro-bind", ws.path + "/" + link + ":/mnt", "--", "/bin/sh", "-c",
                          "echo RAN; cat /mnt/passwd"});
    RequireRefused(r, "symbolic link '" + link + "'");
    CHECK(r.out.find("root:x:0:0") == std::string::npos);
  }
  // Through a link in the middle of the path too.
  auto r =
      RunNsboxRaw({"run", "--ro-bind", ws.path + "/data/passwd:/mnt/p", "--", "/bin/sh", "-c", "echo RAN; cat /mnt/p"});
  RequireRefused(r, "symbolic link 'data'");
}

TEST_CASE("a writable bind through a planted link does not write into the host's /var/tmp",
          "[escape][filesystem][binds]") {
  SharedWorkspace ws;
  HostVarTmpDir target;
  ws.Plant("ln -s " + target.path + " /workspace/out && ln -s /var/tmp /workspace/tmp");
  auto last =
      RunNsboxRaw({"run", "--bind", ws.path + "/out:/mnt", "--", "/bin/sh", "-c", "echo RAN; echo x > /mnt/planted"});
  RequireRefused(last, "symbolic link 'out'");
  std::string name = fs::path(target.path).filename();
  auto middle = RunNsboxRaw({"run", "--bind", ws.path + "/tmp/" + name + ":/mnt", "--", "/bin/sh", "-c",
                             "echo RAN; echo x > /mnt/planted"});
  RequireRefused(middle, "symbolic link 'tmp'");
  // --workspace is a bind source like any other.
  auto workspace = RunNsboxRaw(
      {"run", "--workspace", ws.path + "/out", "--", "/bin/sh", "-c", "echo RAN; echo x > /workspace/planted"});
  RequireRefused(workspace, "symbolic link 'out'");
  CHECK_FALSE(fs::exists(target.path + "/planted"));
}

// The sandbox's mount points are made before the pivot, with the host at /oldroot: a planted relative link in a
// persistent workspace would carry a later run's --bind destination (its mkdir and its mount) out to the host.
TEST_CASE("a bind destination does not pass through a link planted in the workspace (no mount point on the host)",
          "[escape][filesystem][binds]") {
  SharedWorkspace ws;
  HostVarTmpDir target;
  std::string name = fs::path(target.path).filename();
  ws.Plant("ln -s ../../oldroot/var/tmp/" + name + " /workspace/sub && ln -s /etc /workspace/abs");
  TempDir source;
  REQUIRE(::chmod(source.path().c_str(), 0755) == 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/workspace/sub/made", "sub"}, {"/workspace/abs", "abs"}, {"/workspace/abs/made", "abs"}};
  for (const auto& [dest, link] : cases) {
    auto r = RunNsboxRaw({"run", "--workspace", ws.path, "--ro-bind", source.path() + ":" + dest, "--", "/bin/sh", "-c",
                          "echo RAN"});
    RequireRefused(r, "symbolic link '" + link + "'");
  }
  CHECK_FALSE(fs::exists(target.path + "/made"));
  CHECK(fs::is_empty(target.path));
}

TEST_CASE("bind sources with links root made are still followed, and a new destination in a workspace is made there",
          "[escape][filesystem][binds]") {
  SharedWorkspace ws;
  TempDir source;
  REQUIRE(::chmod(source.path().c_str(), 0755) == 0);
  source.Write("f", "inside\n");
  // /bin is a link root made in a directory only root writes (on Debian, /bin -> usr/bin).
  auto r = RunNsboxJson({"--workspace", ws.path, "--ro-bind", "/bin/sh:/mnt/sh", "--ro-bind",
                         source.path() + ":/workspace/new/dir", "--", "/mnt/sh", "-c", "cat /workspace/new/dir/f"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "inside\n");
  CHECK(fs::is_directory(ws.path + "/new/dir"));
}

TEST_CASE("the host's kernel filesystems and its root are refused as bind sources and workspaces",
          "[escape][filesystem][binds]") {
  const std::vector<std::vector<std::string>> cases = {
      {"--bind", "/proc:/mnt"},          {"--ro-bind", "/proc"},         {"--ro-bind", "/proc/1:/mnt"},
      {"--ro-bind", "/proc/cmdline:/x"}, {"--ro-bind", "/sys:/mnt"},     {"--ro-bind", "/sys/kernel:/mnt"},
      {"--ro-bind", "/sys/fs/cgroup:/mnt"},  // a tmpfs on this host, holding the cgroup hierarchies
      {"--ro-bind", "/dev:/mnt"},        {"--ro-bind", "/dev/pts:/mnt"}, {"--bind", "/:/mnt"},
      {"--workspace", "/proc"},          {"--workspace", "/sys"},        {"--workspace", "/dev"},
      {"--workspace", "/"},
  };
  for (const auto& option : cases) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), option.begin(), option.end());
    args.insert(args.end(), {"--", "/bin/sh", "-c", "echo RAN; cat /proc/1/cmdline"});
    DYNAMIC_SECTION(option[0] << " " << option[1]) {
      auto r = RunNsboxRaw(args);
      std::string path = option[1].substr(0, option[1].find(':'));
      RequireRefused(r, "'" + path + "' is refused");
    }
  }
}

TEST_CASE("binds over the sandbox's own /proc, /sys and /dev are refused; below /dev they are allowed",
          "[escape][filesystem][binds]") {
  TempDir source;
  REQUIRE(::chmod(source.path().c_str(), 0755) == 0);
  source.Write("f", "shm\n");
  for (std::string dest : {"/proc", "/proc/sys", "/proc/1", "/sys", "/sys/kernel", "/dev", "/dev/"}) {
    DYNAMIC_SECTION(dest) {
      auto r = RunNsboxRaw({"run", "--ro-bind", source.path() + ":" + dest, "--", "/bin/sh", "-c", "echo RAN"});
      RequireRefused(r, "would cover the sandbox's own");
    }
  }
  auto r = RunNsboxJson({"--ro-bind", source.path() + ":/dev/shm", "--", "/bin/cat", "/dev/shm/f"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "shm\n");
}

TEST_CASE("a bind without a destination appears at its source's real path; one through the root's own links is refused",
          "[escape][filesystem][binds]") {
  TempDir host;
  REQUIRE(::chmod(host.path().c_str(), 0755) == 0);
  REQUIRE(::mkdir((host.path() + "/real").c_str(), 0755) == 0);
  host.Write("real/f", "real\n");
  REQUIRE(::symlink("real", (host.path() + "/link").c_str()) == 0);  // root's link, in a directory only root writes
  auto r = RunNsboxJson({"--ro-bind", host.path() + "/link", "--", "/bin/sh", "-c",
                         "cat " + host.path() + "/real/f; test -e " + host.path() + "/link || echo no-link"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "real\nno-link\n");
  // On a merged-/usr host the sandbox's /bin is a link (to usr/bin): a destination follows no link, whoever made it.
  // (Elsewhere /bin is a read-only bind, where no mount point can be made: refused too, for another reason.)
  auto through =
      RunNsboxRaw({"run", "--ro-bind", host.path() + "/real:/bin/nsbox-x", "--", "/bin/sh", "-c", "echo RAN"});
  RequireRefused(through, fs::is_symlink("/bin") ? "symbolic link 'bin'" : "/bin/nsbox-x");
}

namespace {

// Every way the program has to give a file set-id bits (x86_64 numbers for the calls Python has no wrapper for), then
// a plain mode, which must still work. Prints one answer per way.
const char* const kSetIdAttempts = R"PY(
import struct
os.chdir("/workspace")
open("f", "w").close()
os.mkdir("d")
fd = os.open("f", os.O_RDONLY)
answers = [
    err(os.chmod, "f", 0o4755), err(os.chmod, "f", 0o2755), err(os.chmod, "d", 0o2777),
    err(os.fchmod, fd, 0o4755), err(os.chmod, "f", 0o4755 | 0o10000000),  # bits beyond umode_t
    sc(268, -100, b"f", 0o4755), sc(452, -100, b"f", 0o6755, 0),  # fchmodat, fchmodat2
    err(os.open, "o", os.O_CREAT | os.O_WRONLY, 0o4755), sc(2, b"o2", os.O_CREAT | os.O_WRONLY, 0o2755),  # open
    sc(85, b"c", 0o4755),  # creat
    err(os.open, ".", os.O_TMPFILE | os.O_WRONLY, 0o4755),
    err(os.mknod, "m", 0o104755), sc(259, -100, b"m2", 0o102755, 0),  # mknod, mknodat
    sc(437, -100, b"h", ctypes.create_string_buffer(struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, 0o4755, 0)), 24),
]
print(" ".join(answers))
os.chmod("f", 0o700)
print(oct(os.stat("f").st_mode & 0o7777))
)PY";

}  // namespace

// The program's files in a host directory are host files, and the host mounts nothing nosuid: a set-id program the
// program left there would run, for any host user, as the sandbox's uid (the caller's own when rootless; a leased id
// that a later sandbox gets when root). nsbox's own filter refuses the bits under every profile.
TEST_CASE("a program cannot leave a set-id file in a host workspace, under any profile", "[escape][binds]") {
  TempDir profiles;
  const std::string allow_all =
      profiles.Write("allow-all.json", R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []})");
  for (const std::vector<std::string>& profile : {std::vector<std::string>{}, {"--profile", allow_all}}) {
    INFO((profile.empty() ? "default profile" : "allow-all profile"));
    SharedWorkspace ws;
    std::vector<std::string> args = {"--workspace", ws.path};
    args.insert(args.end(), profile.begin(), profile.end());
    auto r = RunPython(kSetIdAttempts, args);
    INFO(r.Describe());
    CHECK(r.status() == "ok");
    CHECK(r.out() == "EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM ENOSYS\n0o700\n");
    for (const auto& entry : fs::recursive_directory_iterator(ws.path)) {
      struct stat st;
      REQUIRE(::lstat(entry.path().c_str(), &st) == 0);
      INFO(entry.path());
      CHECK((st.st_mode & (S_ISUID | S_ISGID)) == 0);
    }
  }
}
