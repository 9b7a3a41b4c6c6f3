// x86_64 syscall numbers that libseccomp cannot give: calls newer than its table, and the numbers no call owns, which
// a BPF prologue answers with ENOSYS. Internal to the seccomp compiler (seccomp.cc).
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#if !defined(__x86_64__)
#error "nsbox's seccomp filters are written for x86_64 (the prologue and the syscall tables are)"
#endif

namespace nsbox {

// The number of an x86_64 call newer than libseccomp's syscall table; __NR_SCMP_ERROR for any other name.
int NewerSyscallNumber(std::string_view name);
// The name of such a call; empty for any other number.
std::string_view NewerSyscallName(int nr);

// Numbers below the x32 bit that no x86_64 call owns (gaps in the table, and every number past its end), as
// [first, end) ranges.
const std::vector<std::pair<uint32_t, uint32_t>>& UnassignedSyscallRanges();

// A prologue ahead of libseccomp's program: on x86_64, numbers no call owns return ENOSYS. libseccomp
// cannot express number ranges, and an errno default would answer them EPERM, which tells libc
// "forbidden" instead of "this kernel lacks it" (clone3, future calls) and breaks its fallbacks.
std::vector<sock_filter> EnosysPrologue(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

}  // namespace nsbox
