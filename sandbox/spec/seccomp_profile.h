// Seccomp profiles as plain data: the Docker/OCI JSON format parsed and checked, with errors naming the JSON path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox {

// The SCMP_ACT_* actions of the format. kKill is Docker's SCMP_ACT_KILL, which libseccomp defines as
// killing the thread (SCMP_ACT_KILL_THREAD); nsbox compiles all three kills to kill the process.
enum class SeccompAction { kAllow, kErrno, kKill, kKillThread, kKillProcess, kTrap, kTrace, kLog, kNotify };

// The SCMP_CMP_* operators. For kMaskedEq the format puts the mask in `value` and the datum in
// `valueTwo`: the condition is (arg & value) == valueTwo.
enum class SeccompCompare { kNe, kLt, kLe, kEq, kGe, kGt, kMaskedEq };

struct SeccompArg {
  unsigned index = 0;  // 0..5
  uint64_t value = 0;
  uint64_t value_two = 0;
  SeccompCompare op = SeccompCompare::kEq;
};

// includes/excludes: a rule applies only when every `includes` gate holds and no `excludes` gate does.
struct SeccompGate {
  std::vector<std::string> caps;    // CAP_* names
  std::vector<std::string> arches;  // Go names ("amd64", "x32", "arm64" …) or SCMP_ARCH_* names
  std::string min_kernel;           // "4.8"; empty when absent
};

struct SeccompRule {
  std::vector<std::string> names;  // `names`, or the older single `name`
  SeccompAction action = SeccompAction::kErrno;
  std::optional<uint32_t> errno_ret;  // only with SCMP_ACT_ERRNO / SCMP_ACT_TRACE
  std::vector<SeccompArg> args;
  SeccompGate includes;
  SeccompGate excludes;
  std::string comment;
  std::string json_path;  // "syscalls[12]", for messages about this rule
};

struct SeccompArchMapEntry {
  std::string architecture;
  std::vector<std::string> sub_architectures;
};

struct SeccompProfile {
  SeccompAction default_action = SeccompAction::kErrno;
  std::optional<uint32_t> default_errno_ret;
  std::vector<std::string> architectures;  // the older flat list
  std::vector<SeccompArchMapEntry> arch_map;
  std::vector<std::string> flags;  // SECCOMP_FILTER_FLAG_* (recorded; nsbox chooses its own flags)
  std::string listener_path;       // OCI's external notify agent: not supported, recorded for the summary
  std::string listener_metadata;
  std::vector<SeccompRule> syscalls;
  // nsbox extension "nsboxNotifyDenials": the errno default action is delivered through seccomp user
  // notification; nsbox answers each one with the same errno and counts it by syscall name.
  bool notify_denials = false;
  std::string comment;  // top-level "comment" (nsbox extension, ignored by Docker)
};

// Parses a profile and checks it for everything that can be checked without libseccomp; the error
// names the JSON path of the fault: `syscalls[12].args[0].op: unknown operator "SCMP_CMP_FOO"`.
StatusOr<SeccompProfile> ParseSeccompProfile(std::string_view json_text);

std::string_view SeccompActionName(SeccompAction action);  // "SCMP_ACT_ERRNO"

struct KernelVersion {
  int major = 0;
  int minor = 0;
  friend bool operator<(const KernelVersion& a, const KernelVersion& b) {
    return a.major != b.major ? a.major < b.major : a.minor < b.minor;
  }
};
// "6.1", "5.15.0-91-generic" → {6,1} / {5,15}.
std::optional<KernelVersion> ParseKernelVersion(std::string_view text);
KernelVersion RunningKernelVersion();

// The host a profile is evaluated for: nsbox's sandbox holds no capabilities at all.
struct SeccompHost {
  std::string go_arch = "amd64";  // Docker names arches as Go does
  std::string scmp_arch = "SCMP_ARCH_X86_64";
  KernelVersion kernel;
};
SeccompHost NativeSeccompHost();

enum class RuleApplicability { kApplies, kSkippedForCaps, kSkippedForArch, kSkippedForKernel };
// includes.caps never holds (no capabilities); excludes.caps never excludes.
RuleApplicability RuleAppliesTo(const SeccompRule& rule, const SeccompHost& host);

}  // namespace nsbox
