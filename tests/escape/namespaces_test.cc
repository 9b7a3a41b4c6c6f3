// Escape suite: namespace and mount attacks (unshare, setns, clone flags, mount(2), the new mount API, pivot_root).
#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

bool Denied(const NsboxResult& r, const std::string& name) {
  for (const auto& d : r.json.value("denied_syscalls", nlohmann::json::array()))
    if (d.value("name", "") == name && d.value("count", 0) > 0) return true;
  return false;
}

}  // namespace

// CVE-2022-0185 (fsconfig overflow) and most container escapes need CAP_SYS_ADMIN over a fresh mount, net or pid
// namespace: without capabilities, unsharing any namespace but a user namespace must fail.
TEST_CASE("unshare of mount, net, pid, ipc, uts and cgroup namespaces fails with EPERM", "[escape][namespaces]") {
  auto r = RunPython(R"(
flags = [0x00020000, 0x40000000, 0x20000000, 0x08000000, 0x04000000, 0x02000000]
print(" ".join(sc(272, f) for f in flags))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM EPERM EPERM EPERM EPERM\n");
}

// Unprivileged user namespaces hand out a full capability set over new namespaces: the entry point of
// CVE-2022-0185, CVE-2023-32233 (nf_tables) and CVE-2024-1086. The default profile denies them.
TEST_CASE("unshare(CLONE_NEWUSER) is denied and reported", "[escape][namespaces][seccomp]") {
  auto r = RunPython("print(sc(272, 0x10000000))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM\n");
  CHECK(Denied(r, "unshare"));
}

// The same user namespace through clone(2) flags instead of unshare(2).
TEST_CASE("clone with CLONE_NEWUSER is denied", "[escape][namespaces][seccomp]") {
  auto r = RunPython(R"(
ctypes.set_errno(0)
pid = libc.syscall(ctypes.c_long(56), ctypes.c_long(0x10000000 | 17), ctypes.c_long(0), ctypes.c_long(0),
                   ctypes.c_long(0), ctypes.c_long(0))
if pid == 0:
    os._exit(0)
if pid > 0:
    os.waitpid(pid, 0)
    print("created")
else:
    print(errno.errorcode[ctypes.get_errno()])
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM\n");
}

// A nested user namespace plus a mount namespace is the classic way to get a writable mount table (and from there
// the kernel's mount and filesystem code): `unshare -Urm` must not work.
TEST_CASE("a nested user namespace cannot be used to mount anything", "[escape][namespaces][seccomp]") {
  auto r = RunShell("unshare -Urm sh -c 'mount -t tmpfs none /tmp && echo mounted' 2>/dev/null; echo \"rc=$?\"");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out().find("mounted") == std::string::npos);
  CHECK(r.out() != "rc=0\n");
}

// clone3 passes its flags in memory, out of seccomp's reach: the profile answers ENOSYS so libc falls back to clone,
// whose flags the filter can inspect.
TEST_CASE("clone3 answers ENOSYS", "[escape][namespaces][seccomp]") {
  auto r = RunPython("print(sc(435, ctypes.create_string_buffer(88), 88))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ENOSYS\n");
}

// Joining another process's namespaces (setns) is how an attacker uses a leaked namespace descriptor; the host's are
// out of reach, pid 1's cannot be opened (not dumpable) and even our own cannot be re-entered without capabilities.
TEST_CASE("setns fails with EPERM and pid 1's namespace files cannot be opened", "[escape][namespaces]") {
  auto r = RunPython(R"(
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
print(sc(308, fd, 0), err(os.open, "/proc/1/ns/mnt", os.O_RDONLY))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EACCES\n");
}

// Remounting the root read-write, mounting a fresh proc or binding a path elsewhere would undo the read-only view.
TEST_CASE("mount(2): tmpfs, proc, a bind and a read-write remount of / all fail with EPERM", "[escape][namespaces]") {
  auto r = RunPython(R"(
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
def m(src, dst, fstype, flags):
    ctypes.set_errno(0)
    return "ok" if libc.mount(src, dst, fstype, flags, None) == 0 else errno.errorcode[ctypes.get_errno()]
print(m(b"none", b"/tmp", b"tmpfs", 0), m(b"proc", b"/tmp", b"proc", 0),
      m(b"/usr", b"/tmp", None, 4096), m(None, b"/", None, 32 | 4096))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM EPERM EPERM\n");
}

// CVE-2022-0185 sits behind fsconfig; filters that match only mount(2) miss the new mount API entirely.
TEST_CASE("the new mount API (fsopen, fspick, open_tree, move_mount, mount_setattr) fails with EPERM",
          "[escape][namespaces]") {
  auto r = RunPython(R"(
AT_FDCWD = -100
attr = ctypes.create_string_buffer(32)
ctypes.c_uint64.from_buffer(attr, 8).value = 1   # attr_clr = MOUNT_ATTR_RDONLY
print(sc(430, b"tmpfs", 0), sc(433, AT_FDCWD, b"/", 0), sc(428, AT_FDCWD, b"/proc", 1),
      sc(429, AT_FDCWD, b"/tmp", AT_FDCWD, b"/workspace", 0), sc(442, AT_FDCWD, b"/", 0, attr, 32))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM EPERM EPERM EPERM\n");
}

// Unmounting a mask reveals what it covers (runc's masked-path bypasses, CVE-2019-16884 and CVE-2023-27561 class).
TEST_CASE("the /proc masks cannot be unmounted", "[escape][namespaces]") {
  auto r = RunPython(R"(
print(sc(166, b"/proc/keys", 2), sc(166, b"/proc/sys", 2), sc(166, b"/proc", 2))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM EPERM\n");
}

// chroot and pivot_root are the building blocks of the classic chroot breakout (chroot into a subdirectory, then
// walk ".." past the old root).
TEST_CASE("chroot and pivot_root fail with EPERM", "[escape][namespaces]") {
  auto r = RunPython(R"(
os.mkdir("/tmp/r"); os.mkdir("/tmp/r/old")
print(err(os.chroot, "/tmp"), sc(155, b"/tmp/r", b"/tmp/r/old"))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM\n");
}
