// Integration: the sandbox's filesystem: read-only root, nosuid/nodev everywhere, generated /etc, /proc masks,
// no /sys, the minimal /dev, and the size-capped tmpfs mounts.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

TEST_CASE("the root and every host bind are read-only; every mount is nosuid, all but device nodes nodev",
          "[integration][filesystem]") {
  auto r = RunPython(R"(
bad = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    point, opts = f[4], f[5].split(",")
    if "nosuid" not in opts: bad.append(point + " suid")
    if "nodev" not in opts and not (point.startswith("/dev/") and point[5:] in
            ("null", "zero", "full", "random", "urandom", "tty", "pts")) and point not in (
            "/proc/keys", "/proc/key-users",
            "/proc/timer_list", "/proc/kmsg", "/proc/kallsyms", "/proc/config.gz", "/proc/vmallocinfo",
            "/proc/pagetypeinfo", "/proc/slabinfo", "/proc/kcore", "/proc/sched_debug", "/proc/latency_stats",
            "/proc/timer_stats", "/proc/sysrq-trigger", "/proc/cmdline", "/proc/partitions", "/proc/diskstats",
            "/proc/swaps", "/proc/sys/kernel/random/boot_id"):
        bad.append(point + " dev")
    if (point in ("/", "/usr") or point.startswith("/etc")) and "ro" not in opts: bad.append(point + " rw")
print(bad)
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "[]\n");
}

TEST_CASE("the top level holds the host view and nothing of /root, /home, /var, /boot, /srv",
          "[integration][filesystem]") {
  auto r = RunPython("print(sorted(os.listdir('/')), os.getcwd())\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  // lib32/libx32 appear where the host has them.
  std::string out = r.out();
  for (const char* absent : {"'root'", "'var'", "'boot'", "'srv'", "'sys'", "'mnt'", "'opt'"})
    CHECK(out.find(absent) == std::string::npos);
  for (const char* present : {"'bin'", "'dev'", "'etc'", "'home'", "'lib'", "'proc'", "'run'", "'tmp'", "'usr'",
                              "'workspace'"})
    CHECK(out.find(present) != std::string::npos);
  CHECK(out.ends_with(" /workspace\n"));
}

TEST_CASE("/etc is generated: passwd and group name the sandbox user, hosts and hostname the sandbox",
          "[integration][filesystem]") {
  auto r = RunShell(
      "id; whoami; grep sandbox /etc/passwd; cat /etc/hostname; grep -c . /etc/hosts; ls /etc/shadow 2>&1 | grep -c "
      "'No such'");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() ==
        "uid=1000(sandbox) gid=1000(sandbox) groups=1000(sandbox)\nsandbox\n"
        "sandbox:x:1000:1000:nsbox sandbox:/home/sandbox:/bin/sh\nnsbox\n3\n1\n");
}

TEST_CASE("/proc is the sandbox's own, with sensitive entries masked and /proc/sys read-only",
          "[integration][filesystem]") {
  // The first masked entry this kernel has (kcore needs CONFIG_PROC_KCORE).
  std::string masked;
  for (const char* path : {"/proc/kcore", "/proc/keys", "/proc/kallsyms", "/proc/timer_list"})
    if (masked.empty() && ::access(path, F_OK) == 0) masked = path;
  REQUIRE(!masked.empty());
  auto r = RunPython(R"(
st = os.stat(")" + masked + R"(")
print(os.major(st.st_rdev), os.minor(st.st_rdev), len(os.listdir("/proc/acpi")) if os.path.exists("/proc/acpi") else 0,
      bool(os.statvfs("/proc/sys").f_flag & os.ST_RDONLY), err(os.stat, "/sys"), len(os.listdir("/proc/self/task")))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "1 3 0 True ENOENT 1\n");
}

TEST_CASE("/dev: null, zero, full and urandom behave; /dev/shm and /dev/pts are private", "[integration][filesystem]") {
  auto r = RunPython(R"(
open("/dev/null", "w").write("x")
z = open("/dev/zero", "rb").read(4)
u = len(open("/dev/urandom", "rb").read(16))
print(z, u, err(lambda: open("/dev/full", "w", buffering=1).write("x\n")), os.listdir("/dev/shm"),
      os.listdir("/dev/pts"))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "b'\\x00\\x00\\x00\\x00' 16 ENOSPC [] ['ptmx']\n");
}

TEST_CASE("/tmp, /workspace, /dev/shm and the home directory are tmpfs capped at --tmpfs-size",
          "[integration][filesystem]") {
  auto r = RunPython(R"(
sizes = [os.statvfs(p).f_blocks * os.statvfs(p).f_frsize for p in ["/tmp", "/workspace", "/dev/shm", "/home/sandbox"]]
def fill():
    with open("/tmp/big", "wb") as f:
        f.write(b"x" * (9 << 20))
print(sizes, err(fill))
)",
                     {"--tmpfs-size", "8M"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "[8388608, 8388608, 8388608, 8388608] ENOSPC\n");
}

TEST_CASE("the default tmpfs size is 256M and the places are writable by the sandbox user",
          "[integration][filesystem]") {
  auto r = RunShell(
      "for d in /tmp /workspace /dev/shm /home/sandbox; do echo x > $d/f && echo ok; done; df -k /tmp | tail -1 | awk "
      "'{print $2}'");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ok\nok\nok\nok\n262144\n");
}
