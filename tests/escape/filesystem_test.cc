// Escape suite: the filesystem: host secrets and other users' files, writes to the root, /proc/sys, sysrq,
// core_pattern and cgroups, overwriting the runtime (/proc/self/exe, /proc/1/exe), setuid binaries, device nodes.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

// Host credentials: password hashes, sudo rules and the host's SSH private keys are the first thing an attacker reads.
TEST_CASE("host secrets in /etc are absent: shadow, gshadow, sudoers, ssh host keys", "[escape][filesystem]") {
  auto r = RunPython(R"(
print(*[err(open, p) for p in ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_ed25519_key",
                                "/etc/ssh/ssh_host_rsa_key"]])
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ENOENT ENOENT ENOENT ENOENT ENOENT\n");
}

// root's home (/root/.ssh, shell history, cloud credentials) and the host's /home must not exist inside; a marker
// directory the test creates in the host's /home proves the sandbox's /home is not the host's.
TEST_CASE("/root is absent and /home holds only the sandbox user", "[escape][filesystem]") {
  std::string marker = UniqueMarker("home");
  std::string host_dir = "/home/" + marker;
  REQUIRE(::mkdir(host_dir.c_str(), 0755) == 0);
  auto r = RunPython(R"(
print(err(os.listdir, "/root"), sorted(os.listdir("/home")), err(os.stat, "/home/)" + marker + R"("))
)");
  ::rmdir(host_dir.c_str());
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ENOENT ['sandbox'] ENOENT\n");
}

// /var (databases, logs, docker's state), /run (sockets: docker.sock, dbus, systemd) and /boot (kernel images) are
// the classic places for host secrets and control sockets.
TEST_CASE("/var, /boot and /srv are absent, /run is empty", "[escape][filesystem]") {
  auto r = RunPython(R"(
print(err(os.stat, "/var"), err(os.stat, "/boot"), err(os.stat, "/srv"), os.listdir("/run"),
      err(os.stat, "/run/docker.sock"), err(os.stat, "/var/run/docker.sock"))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ENOENT ENOENT ENOENT [] ENOENT ENOENT\n");
}

// Files left in the host's /tmp by other users (sockets, tokens) must not be visible in the sandbox's /tmp.
TEST_CASE("the host's /tmp is not visible", "[escape][filesystem]") {
  TempDir dir;  // lives in the host's /tmp
  std::string name = std::filesystem::path(dir.path()).filename();
  auto r = RunPython("print(err(os.stat, '/tmp/" + name + "'), os.listdir('/tmp'))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ENOENT []\n");
}

// Another user's private file, even when bound in: the sandbox user maps to an unprivileged host uid and holds no
// CAP_DAC_OVERRIDE, so a root-owned 0600 file stays unreadable.
TEST_CASE("a root-owned 0600 file bound into the sandbox is unreadable (EACCES)", "[escape][filesystem]") {
  TempDir dir;
  std::string secret = dir.Write("secret", "TOP-SECRET\n", 0600);
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  auto r = RunPython("print(err(open, '/mnt/secret'))\n", {"--ro-bind", dir.path() + ":/mnt"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EACCES\n");
}

// Writing the root filesystem would let one run persist or plant binaries: everything outside the tmpfs mounts is
// read-only, including the generated /etc.
TEST_CASE("the root filesystem is read-only: /, /usr, /etc, /bin writes fail with EROFS", "[escape][filesystem]") {
  auto r = RunPython(R"(
def create(p):
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
print(err(os.mkdir, "/evil"), err(create, "/usr/bin/evil"), err(create, "/etc/evil"), err(open, "/etc/passwd", "a"),
      err(create, "/bin/evil"), err(os.symlink, "/tmp", "/usr/lib/evil"))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EROFS EROFS EROFS EROFS EROFS EROFS\n");
}

// Host binaries must not be replaceable (the root of the CVE-2019-5736 class of attacks): even ignoring the
// read-only mount, the sandbox user does not own them (EACCES); chmod meets the read-only mount first (EROFS).
TEST_CASE("host binaries cannot be opened for writing", "[escape][filesystem]") {
  auto r = RunPython(R"(
print(err(open, "/usr/bin/python3", "r+b"), err(open, "/bin/sh", "r+b"), err(os.chmod, "/usr/bin/env", 0o777))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EACCES EACCES EROFS\n");
}

// CVE-2019-5736: a container overwrote runc through /proc/self/exe or /proc/<runc pid>/exe. Here pid 1 is nsbox's own
// process: its exe must be neither openable (not even read-only, which the exploit re-opens for writing later) nor
// resolvable, and the program's own exe cannot be opened for writing.
TEST_CASE("the runtime cannot be reached through /proc/1/exe or /proc/self/exe (CVE-2019-5736)",
          "[escape][filesystem]") {
  auto r = RunPython(R"(
print(err(open, "/proc/1/exe", "rb"), err(open, "/proc/1/exe", "r+b"), err(os.readlink, "/proc/1/exe"),
      err(open, "/proc/self/exe", "r+b"), err(os.stat, "/proc/1/root/"))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EACCES EACCES EACCES EACCES EACCES\n");
}

// /proc/sys is the kernel's control panel (core_pattern, modprobe, and the usermode-helper escapes built on them):
// it is mounted read-only (EROFS), on top of its files being root's. modprobe is absent on kernels without modules.
TEST_CASE("/proc/sys, core_pattern and modprobe cannot be written", "[escape][filesystem]") {
  auto r = RunPython(R"(
print(err(open, "/proc/sys/kernel/core_pattern", "w"), err(open, "/proc/sys/kernel/modprobe", "w"),
      err(open, "/proc/sys/vm/drop_caches", "w"), bool(os.statvfs("/proc/sys").f_flag & os.ST_RDONLY))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  std::string modprobe = ::access("/proc/sys/kernel/modprobe", F_OK) == 0 ? "EROFS" : "ENOENT";
  CHECK(r.out() == "EROFS " + modprobe + " EROFS True\n");
}

// core_pattern with a pipe ("|/path") runs a program as host root on the next crash: the famous container escape.
// A crash inside must not have changed it, and its value must be the host's.
TEST_CASE("a crashing program does not change the host's core_pattern", "[escape][filesystem]") {
  std::string before;
  {
    FILE* f = std::fopen("/proc/sys/kernel/core_pattern", "r");
    REQUIRE(f);
    char buf[256] = {};
    REQUIRE(std::fgets(buf, sizeof buf, f));
    std::fclose(f);
    before = buf;
  }
  auto r = RunPython(R"(
try:
    open("/proc/sys/kernel/core_pattern", "w").write("|/tmp/evil")
except OSError:
    pass
os.kill(os.getpid(), 11)
)");
  INFO(r.Describe());
  CHECK(r.status() == "signal");
  CHECK(r.json.value("signal", 0) == 11);
  FILE* f = std::fopen("/proc/sys/kernel/core_pattern", "r");
  REQUIRE(f);
  char buf[256] = {};
  REQUIRE(std::fgets(buf, sizeof buf, f));
  std::fclose(f);
  CHECK(std::string(buf) == before);
}

// /proc/sysrq-trigger reboots or crashes the host with one byte. On kernels without it the file is absent;
// otherwise it must be masked by /dev/null.
TEST_CASE("/proc/sysrq-trigger is absent or the null device", "[escape][filesystem]") {
  auto r = RunPython(R"(
try:
    st = os.stat("/proc/sysrq-trigger")
    print("masked" if (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3) else "REAL")
except OSError as e:
    print(errno.errorcode[e.errno])
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  bool host_has_sysrq = ::access("/proc/sysrq-trigger", F_OK) == 0;
  CHECK(r.out() == (host_has_sysrq ? "masked\n" : "ENOENT\n"));
}

// Kernel memory and addresses (/proc/kcore, kallsyms for KASLR bypass, timer_list, keys) read as empty.
TEST_CASE("/proc/kcore, kallsyms, keys, timer_list and sched_debug read as empty", "[escape][filesystem]") {
  auto r = RunPython(R"(
def size(p):
    try:
        return str(len(open(p, "rb").read()))
    except OSError as e:
        return errno.errorcode[e.errno]
print(*[size(p) for p in ["/proc/kcore", "/proc/kallsyms", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"]])
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  // Masked entries are /dev/null (0 bytes); entries this kernel lacks are absent inside too.
  std::string expected;
  for (const char* path : {"/proc/kcore", "/proc/kallsyms", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"})
    expected += std::string(expected.empty() ? "" : " ") + (::access(path, F_OK) == 0 ? "0" : "ENOENT");
  CHECK(r.out() == expected + "\n");
}

// CVE-2022-0492: mounting a cgroup v1 hierarchy and writing release_agent runs a program as host root. No /sys at
// all, and no cgroup filesystem can be mounted.
TEST_CASE("cgroup files are out of reach: no /sys, and cgroup filesystems cannot be mounted", "[escape][filesystem]") {
  auto r = RunPython(R"(
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
def m(fstype, data):
    ctypes.set_errno(0)
    return "ok" if libc.mount(b"cgroup", b"/tmp", fstype, 0, data) == 0 else errno.errorcode[ctypes.get_errno()]
print(err(os.stat, "/sys"), err(os.stat, "/sys/fs/cgroup"), m(b"cgroup", b"memory"), m(b"cgroup2", None))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ENOENT ENOENT EPERM EPERM\n");
}

// Escaping the cgroup: the cgroup namespace shows the sandbox's cgroup as "/", so there is no path upwards to name,
// and no cgroup.procs file exists to move a process into another group.
TEST_CASE("the sandbox sees its own cgroup as the root and cannot move itself", "[escape][filesystem]") {
  auto r = RunPython(R"(
lines = open("/proc/self/cgroup").read().split()
print(all(l.endswith(":/") for l in lines), err(open, "/sys/fs/cgroup/cgroup.procs", "w"))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "True ENOENT\n");
}

// Setuid binaries must be inert (nosuid mounts and no_new_privs): mount(8) and su(1) are setuid root on the host.
TEST_CASE("setuid mount and su gain nothing", "[escape][filesystem]") {
  auto r = RunShell(R"(
ls -l /usr/bin/mount | cut -c1-4
mount -t tmpfs none /tmp >/dev/null 2>&1; echo "mount=$?"
su -c 'id -u' root </dev/null 2>/dev/null; echo "su=$?"
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "-rws\nmount=32\nsu=1\n");
}

// The same with a setuid-root copy of a probe that prints its ids: the bit is there, nothing changes.
TEST_CASE("a setuid-root probe runs with the sandbox user's ids and no capabilities", "[escape][filesystem]") {
  TempDir dir;
  std::filesystem::copy_file(ProbePath("probe_ids"), dir.path() + "/probe_ids");
  REQUIRE(::chown((dir.path() + "/probe_ids").c_str(), 0, 0) == 0);
  REQUIRE(::chmod((dir.path() + "/probe_ids").c_str(), 04755) == 0);
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  auto r = RunNsboxJson({"--ro-bind", dir.path() + ":/probes", "--", "/probes/probe_ids"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "uid=1000 euid=1000 gid=1000 egid=1000 capeff=0000000000000000\n");
}

// Device nodes: a program that can mknod /dev/mem or a disk reads the host's memory or filesystem.
TEST_CASE("mknod of character and block devices fails with EPERM", "[escape][devices]") {
  auto r = RunPython(R"(
import stat
print(err(os.mknod, "/tmp/mem", stat.S_IFCHR | 0o666, os.makedev(1, 1)),
      err(os.mknod, "/tmp/vda", stat.S_IFBLK | 0o666, os.makedev(254, 0)),
      err(os.mknod, "/dev/kmsg", stat.S_IFCHR | 0o666, os.makedev(1, 11)))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  // In /dev the read-only tmpfs answers first (EROFS); elsewhere the kernel refuses the node itself (EPERM).
  CHECK(r.out() == "EPERM EPERM EROFS\n");
}

// /dev holds the listed nodes only: no /dev/mem, /dev/kmsg, /dev/port, disks or other hardware.
TEST_CASE("/dev holds only null, zero, full, random, urandom, tty, pts, ptmx, shm, mqueue and std links",
          "[escape][devices]") {
  auto r = RunPython(R"(
import stat
print(" ".join(sorted(os.listdir("/dev"))))
print(err(os.stat, "/dev/mem"), err(os.stat, "/dev/kmsg"), err(os.stat, "/dev/port"), err(os.stat, "/dev/vda"),
      err(os.stat, "/dev/sda"))
blocks = []
for root, dirs, files in os.walk("/dev"):
    for name in dirs + files:
        try:
            if stat.S_ISBLK(os.lstat(os.path.join(root, name)).st_mode):
                blocks.append(name)
        except OSError:
            pass
print("block devices:", blocks)
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() ==
        "fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero\n"
        "ENOENT ENOENT ENOENT ENOENT ENOENT\n"
        "block devices: []\n");
}

// /dev/tty is present but the program has no controlling terminal (new session): it cannot talk to the user's.
TEST_CASE("/dev/tty cannot be opened: no controlling terminal", "[escape][devices]") {
  auto r = RunPython("print(err(open, '/dev/tty', 'r+b'))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ENXIO\n");
}
