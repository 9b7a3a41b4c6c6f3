// x86_64 syscall numbers past libseccomp: the calls newer than its table, the numbers no call owns, and the ENOSYS
// prologue that answers those.
#include "sandbox/seccomp_syscalls.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <seccomp.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdlib>

namespace nsbox {
namespace {

// x86_64 calls newer than the syscall table of Debian 12's libseccomp (2.5.4 knows up to 456).
// Numbers from the kernel's arch/x86/entry/syscalls/syscall_64.tbl.
constexpr std::array<std::pair<std::string_view, int>, 14> kNewerSyscalls = {{
    {"uretprobe", 335},
    {"statmount", 457},
    {"listmount", 458},
    {"lsm_get_self_attr", 459},
    {"lsm_set_self_attr", 460},
    {"lsm_list_modules", 461},
    {"mseal", 462},
    {"setxattrat", 463},
    {"getxattrat", 464},
    {"listxattrat", 465},
    {"removexattrat", 466},
    {"open_tree_attr", 467},
    {"file_getattr", 468},
    {"file_setattr", 469},
}};

// Bit 30 marks the x32 ABI on the x86_64 audit arch; libseccomp sends those to the bad-arch action.
constexpr uint32_t kX32SyscallBit = 0x40000000;
// Syscall numbers scanned for names; x86_64's table ends far below this.
constexpr int kSyscallScanLimit = 1024;

bool SyscallNumberKnown(int nr) {
  if (!NewerSyscallName(nr).empty()) return true;
  char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
  const bool known = name != nullptr;
  std::free(name);
  return known;
}

// Numbers below the x32 bit that no x86_64 call owns, as [first, end) ranges.
std::vector<std::pair<uint32_t, uint32_t>> ScanUnassignedSyscallRanges() {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  int start = -1;
  for (int nr = 0; nr < kSyscallScanLimit; ++nr) {
    const bool known = SyscallNumberKnown(nr);
    if (!known && start < 0) start = nr;
    if (known && start >= 0) {
      ranges.emplace_back(static_cast<uint32_t>(start), static_cast<uint32_t>(nr));
      start = -1;
    }
  }
  // Everything from the first unknown number past the table up to the x32 bit: future calls.
  ranges.emplace_back(static_cast<uint32_t>(start >= 0 ? start : kSyscallScanLimit), kX32SyscallBit);
  return ranges;
}

}  // namespace

int NewerSyscallNumber(std::string_view name) {
  for (const auto& [known, nr] : kNewerSyscalls) {
    if (known == name) return nr;
  }
  return __NR_SCMP_ERROR;
}

std::string_view NewerSyscallName(int nr) {
  for (const auto& [name, number] : kNewerSyscalls) {
    if (number == nr) return name;
  }
  return {};
}

// The table is fixed for the life of the process; scanning it costs a thousand lookups.
const std::vector<std::pair<uint32_t, uint32_t>>& UnassignedSyscallRanges() {
  static const auto* const ranges = new std::vector<std::pair<uint32_t, uint32_t>>(ScanUnassignedSyscallRanges());
  return *ranges;
}

std::vector<sock_filter> EnosysPrologue(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  const auto n = static_cast<uint32_t>(ranges.size());
  std::vector<sock_filter> code;
  code.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  // Other arches: straight to libseccomp's program, whose first instruction is at 3 + 2n + 2.
  code.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, static_cast<uint8_t>(2 * n + 3)));
  code.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
  for (uint32_t k = 0; k < n; ++k) {
    // nr < first: try the next range; nr >= end: next range; else ENOSYS at index 3 + 2n + 1.
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, ranges[k].first, 0, 1));
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, ranges[k].second, 0, static_cast<uint8_t>(2 * (n - k) - 1)));
  }
  code.push_back(BPF_STMT(BPF_JMP | BPF_JA, 1));
  code.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
  return code;
}

}  // namespace nsbox
