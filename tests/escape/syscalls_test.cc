// Escape suite: the kernel attack surface the default profile closes (bpf, perf, userfaultfd, io_uring, keyrings,
// ptrace, kexec/modules/reboot/swap/acct/iopl, personality, non-native ABIs) and privileged calls that need caps.
#include <sstream>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

bool SyscallDenied(const NsboxResult& r, const std::string& name) {
  for (const auto& d : r.json.value("denied_syscalls", nlohmann::json::array()))
    if (d.value("name", "") == name && d.value("count", 0) > 0) return true;
  return false;
}

NsboxResult RunProbe(const std::string& probe) {
  std::string path = ProbePath(probe);
  return RunNsboxJson({"--ro-bind", path + ":/probe", "--", "/probe"});
}

}  // namespace

// eBPF verifier bugs (CVE-2021-3490, CVE-2021-31440, CVE-2023-2163) turn BPF_PROG_LOAD into kernel code execution.
TEST_CASE("bpf(BPF_PROG_LOAD) fails with EPERM", "[escape][syscalls]") {
  auto r = RunPython(R"(
import struct
insns = ctypes.create_string_buffer(struct.pack("<BBhi", 0xb7, 0, 0, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0))
license = ctypes.create_string_buffer(b"GPL")
prog = ctypes.create_string_buffer(128)
struct.pack_into("<IIQQ", prog, 0, 1, 2, ctypes.addressof(insns), ctypes.addressof(license))  # SOCKET_FILTER, 2 insns
hashmap = ctypes.create_string_buffer(struct.pack("<IIII", 1, 4, 4, 1).ljust(128, b"\0"))  # HASH, 4/4 bytes, 1 entry
print(sc(321, 5, prog, 128), sc(321, 0, hashmap, 128))   # BPF_PROG_LOAD, BPF_MAP_CREATE
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM\n");
}

// perf_event_open: CVE-2013-2094 (perf_swevent_init) and a steady stream of perf races; counting one's own
// user-space events is allowed at perf_event_paranoid=2, so only the profile can close it.
TEST_CASE("perf_event_open on the process itself is denied", "[escape][syscalls][seccomp]") {
  auto r = RunPython(R"(
attr = ctypes.create_string_buffer(128)
ctypes.c_uint32.from_buffer(attr, 4).value = 128              # size
ctypes.c_uint64.from_buffer(attr, 40).value = (1 << 5) | (1 << 6)  # exclude_kernel | exclude_hv
print(sc(298, attr, 0, -1, -1, 0))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM\n");
  CHECK(SyscallDenied(r, "perf_event_open"));
}

// userfaultfd stalls the kernel mid-copy: the standard trick to win kernel races (CVE-2016-5195 exploits,
// CVE-2021-22555). UFFD_USER_MODE_ONLY keeps it open to unprivileged users, so only the profile closes it.
TEST_CASE("userfaultfd is denied", "[escape][syscalls][seccomp]") {
  auto r = RunPython("print(sc(323, 1))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM\n");
  CHECK(SyscallDenied(r, "userfaultfd"));
}

// io_uring bypasses per-syscall filtering and has had many privilege escalations (CVE-2022-29582, CVE-2023-2598).
TEST_CASE("io_uring_setup is denied", "[escape][syscalls][seccomp]") {
  auto r = RunPython("print(sc(425, 4, ctypes.create_string_buffer(120)))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM\n");
  CHECK(SyscallDenied(r, "io_uring_setup"));
}

// Keyrings are not namespaced (CVE-2016-0728 refcount overflow to root).
TEST_CASE("add_key and keyctl are denied", "[escape][syscalls][seccomp]") {
  auto r = RunPython("print(sc(248, b'user', b'k', b'v', 1, -3), sc(250, 0, -3, 0))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM\n");
  CHECK(SyscallDenied(r, "add_key"));
}

// CVE-2019-13272 (PTRACE_TRACEME credential confusion); ptrace is also the tool for hijacking a neighbour.
TEST_CASE("ptrace is denied and listed in denied_syscalls", "[escape][syscalls][seccomp]") {
  auto r = RunPython("print(sc(101, 0, 0, 0, 0))\n");  // PTRACE_TRACEME
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM\n");
  CHECK(SyscallDenied(r, "ptrace"));
}

// runc CVE-2019-5736 variants attack the runtime's process living in the container: pid 1 here is nsbox's own
// code, and it is not dumpable, so neither ptrace nor process_vm_readv may touch it.
TEST_CASE("ptrace and process_vm_readv on the sandbox's pid 1 fail with EPERM", "[escape][syscalls]") {
  auto r = RunPython(R"(
buf = ctypes.create_string_buffer(16)
iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 16)
remote = (ctypes.c_void_p * 2)(0x400000, 16)
print(sc(101, 16, 1, 0, 0), sc(310, 1, iov, 1, remote, 1, 0), err(open, "/proc/1/mem", "rb"))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM EACCES\n");
}

// Every word must be EPERM, or ENOSYS where this kernel was built without the call (CONFIG_KEXEC, CONFIG_MODULES,
// CONFIG_X86_IOPL_IOPERM): either way the call does nothing.
static void CheckAllRefused(const std::string& out, size_t count) {
  std::istringstream words(out);
  size_t n = 0;
  for (std::string word; words >> word; ++n) CHECK((word == "EPERM" || word == "ENOSYS"));
  CHECK(n == count);
}

// Loading kernel code or replacing the kernel: kexec and module loading need CAP_SYS_BOOT / CAP_SYS_MODULE.
TEST_CASE("kexec_load, kexec_file_load, init_module, finit_module and delete_module are refused",
          "[escape][syscalls]") {
  auto r = RunPython(R"(
fd = os.open("/dev/null", os.O_RDONLY)
print(sc(246, 0, 0, 0, 0), sc(320, fd, fd, 0, b"", 0), sc(175, ctypes.create_string_buffer(64), 64, b""),
      sc(313, fd, b"", 0), sc(176, b"ext4", 0))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CheckAllRefused(r.out(), 5);
}

// Host-wide switches: reboot, swap, process accounting (acct writes a file of the caller's choice as root).
TEST_CASE("reboot, swapon, swapoff and acct fail with EPERM", "[escape][syscalls]") {
  auto r = RunPython(R"(
print(sc(169, 0xfee1dead, 672274793, 0x01234567, 0), sc(167, b"/tmp/swap", 0), sc(168, b"/tmp/swap"),
      sc(163, b"/tmp/acct"))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CheckAllRefused(r.out(), 4);
}

// Direct port I/O (iopl/ioperm) reaches hardware around every kernel check.
TEST_CASE("iopl and ioperm are refused", "[escape][syscalls]") {
  auto r = RunPython("print(sc(172, 3), sc(173, 0x80, 1, 1))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CheckAllRefused(r.out(), 2);
}

// personality(READ_IMPLIES_EXEC | ADDR_NO_RANDOMIZE) weakens exploit mitigations (CVE-2009-1895 used
// personality flags to map page zero); only the harmless values stay allowed.
TEST_CASE("personality allows PER_LINUX but denies READ_IMPLIES_EXEC and ADDR_NO_RANDOMIZE",
          "[escape][syscalls][seccomp]") {
  auto r = RunPython("print(sc(135, 0x0400000), sc(135, 0x0040000), sc(135, 0))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM ok\n");
}

// "Shocker" (Docker, 2014): open_by_handle_at with a guessed handle opens any file of the host filesystem.
TEST_CASE("open_by_handle_at fails with EPERM", "[escape][syscalls]") {
  auto r = RunPython(R"(
handle = ctypes.create_string_buffer(8 + 8)
ctypes.c_uint32.from_buffer(handle, 0).value = 8
ctypes.c_int32.from_buffer(handle, 4).value = 1
ctypes.c_uint64.from_buffer(handle, 8).value = 2     # inode 2: the root of an ext4 filesystem
fd = os.open("/usr", os.O_RDONLY)
print(sc(304, fd, handle, 0))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM\n");
}

// A filter written for x86_64 alone can be bypassed through the i386 entry point (int 0x80), which uses other
// syscall numbers; the profile kills any non-native call.
TEST_CASE("an i386 system call (int 0x80) ends the sandbox as a violation", "[escape][syscalls][seccomp]") {
  auto host = RunProcess({ProbePath("probe_int80")});
  if (host.out.find("returned") == std::string::npos) {
    RecordSkip("escape_tests", "an i386 system call (int 0x80) ends the sandbox as a violation",
               "this kernel has no IA32 emulation: int 0x80 cannot be reached at all");
    return;
  }
  auto r = RunProbe("probe_int80");
  INFO(r.Describe());
  CHECK(r.status() == "violation");
  CHECK(r.out().find("returned 1000") == std::string::npos);
}

// The x32 ABI is the other non-native door (syscall numbers with bit 30 set). This kernel or the profile must refuse
// it: ENOSYS from a kernel without x32, or a violation from the profile; never the real getuid.
TEST_CASE("an x32 system call never runs", "[escape][syscalls]") {
  auto r = RunProbe("probe_x32");
  INFO(r.Describe());
  if (r.status() == "violation") SUCCEED("killed by the profile");
  else {
    REQUIRE(r.status() == "ok");
    CHECK(r.out() == "x32 getuid returned -38\n");
  }
}

// Syscall numbers the kernel does not know yet (future calls) must answer ENOSYS, never succeed or hang.
TEST_CASE("an unknown syscall number answers ENOSYS", "[escape][syscalls]") {
  auto r = RunPython("print(sc(1000), sc(467 + 100))\n");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "ENOSYS ENOSYS\n");
}

// Regaining privilege directly: setuid(0) (EINVAL: uid 0 has no mapping in the sandbox's user namespace), raising
// capabilities, the ambient set, clearing no_new_privs.
TEST_CASE("setuid(0), capset, ambient raise and clearing no_new_privs all fail", "[escape][syscalls]") {
  auto r = RunPython(R"(
import struct
hdr = ctypes.create_string_buffer(struct.pack("II", 0x20080522, 0))
data = ctypes.create_string_buffer(struct.pack("IIIIII", 0xffffffff, 0xffffffff, 0, 0xffffffff, 0xffffffff, 0))
print(err(os.setuid, 0), err(os.setgroups, [0]), sc(126, hdr, data),
      sc(157, 47, 2, 21, 0, 0), sc(157, 38, 0, 0, 0, 0))   # PR_CAP_AMBIENT_RAISE(CAP_SYS_ADMIN), PR_SET_NO_NEW_PRIVS 0
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EINVAL EPERM EPERM EPERM EINVAL\n");
}

// Changing the host's identity or clock.
TEST_CASE("sethostname, settimeofday and clock_settime fail with EPERM", "[escape][syscalls]") {
  auto r = RunPython(R"(
ts = ctypes.create_string_buffer(16)
print(sc(170, b"evil", 4), sc(164, ts, 0), sc(227, 0, ts))
)");
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "EPERM EPERM EPERM\n");
}
