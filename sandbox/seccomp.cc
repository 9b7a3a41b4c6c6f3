// Seccomp: libseccomp compiles a profile (and pid 1's guard) to BPF held in memory; the child installs it.
// Profiles are found and loaded in seccomp_load.cc; the parent answers notifications in seccomp_notifier.cc; the
// syscall numbers libseccomp lacks, and the ENOSYS prologue for those no call owns, are in seccomp_syscalls.cc.
#include "sandbox/seccomp.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/seccomp_syscalls.h"

namespace nsbox {
namespace {

struct FilterContextDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using FilterContext = std::unique_ptr<void, FilterContextDeleter>;

uint32_t ErrnoOf(const std::optional<uint32_t>& errno_ret) { return errno_ret.value_or(EPERM); }

uint32_t LibseccompAction(SeccompAction action, const std::optional<uint32_t>& errno_ret) {
  switch (action) {
    case SeccompAction::kAllow: return SCMP_ACT_ALLOW;
    case SeccompAction::kErrno: return SCMP_ACT_ERRNO(ErrnoOf(errno_ret));
    // Every kill ends the whole process: a thread killed alone would leave a half-dead program
    // behind, and nsbox reports a kill as the run's `violation` verdict.
    case SeccompAction::kKill:
    case SeccompAction::kKillThread:
    case SeccompAction::kKillProcess: return SCMP_ACT_KILL_PROCESS;
    case SeccompAction::kTrap: return SCMP_ACT_TRAP;
    case SeccompAction::kTrace: return SCMP_ACT_TRACE(errno_ret.value_or(0));
    case SeccompAction::kLog: return SCMP_ACT_LOG;
    case SeccompAction::kNotify: return SCMP_ACT_NOTIFY;
  }
  return SCMP_ACT_KILL_PROCESS;
}

std::string ActionLabel(SeccompAction action, const std::optional<uint32_t>& errno_ret) {
  if (action == SeccompAction::kErrno)
    return fmt::format("SCMP_ACT_ERRNO({})", ErrnoName(static_cast<int>(ErrnoOf(errno_ret))));
  return std::string(SeccompActionName(action));
}

scmp_compare LibseccompCompare(SeccompCompare op) {
  switch (op) {
    case SeccompCompare::kNe: return SCMP_CMP_NE;
    case SeccompCompare::kLt: return SCMP_CMP_LT;
    case SeccompCompare::kLe: return SCMP_CMP_LE;
    case SeccompCompare::kEq: return SCMP_CMP_EQ;
    case SeccompCompare::kGe: return SCMP_CMP_GE;
    case SeccompCompare::kGt: return SCMP_CMP_GT;
    case SeccompCompare::kMaskedEq: return SCMP_CMP_MASKED_EQ;
  }
  return SCMP_CMP_EQ;
}

scmp_arg_cmp LibseccompCondition(const SeccompArg& arg) {
  // The format's MASKED_EQ carries the mask in value and the datum in valueTwo, as libseccomp's datum_a/datum_b.
  return scmp_arg_cmp{arg.index, LibseccompCompare(arg.op), arg.value, arg.value_two};
}

// Docker's rule: conditions on distinct arguments all have to hold (one libseccomp rule); when two
// conditions name the same argument, each becomes a rule of its own (either may hold), as runc does.
std::vector<std::vector<scmp_arg_cmp>> ConditionSets(const std::vector<SeccompArg>& args) {
  std::array<int, 6> per_index{};
  for (const SeccompArg& arg : args) ++per_index[arg.index];
  const bool repeated = std::any_of(per_index.begin(), per_index.end(), [](int n) { return n > 1; });
  std::vector<std::vector<scmp_arg_cmp>> sets;
  if (repeated) {
    for (const SeccompArg& arg : args) sets.push_back({LibseccompCondition(arg)});
  } else {
    std::vector<scmp_arg_cmp> all;
    for (const SeccompArg& arg : args) all.push_back(LibseccompCondition(arg));
    sets.push_back(std::move(all));
  }
  return sets;
}

StatusOr<std::vector<sock_filter>> ExportBpf(void* ctx) {
  // libseccomp 2.5.4 exports only to a file descriptor; a memfd keeps the program off the disk.
  UniqueFd memfd(memfd_create("nsbox-seccomp-bpf", MFD_CLOEXEC));
  if (!memfd) return Status::Errno("memfd_create(nsbox-seccomp-bpf)");
  if (int rc = seccomp_export_bpf(ctx, memfd.get()); rc < 0) return Status::Errno("seccomp_export_bpf", -rc);
  const off_t size = lseek(memfd.get(), 0, SEEK_END);
  if (size < 0) return Status::Errno("lseek(bpf memfd, SEEK_END)");
  if (size == 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0) {
    return Status::Error(
        fmt::format("seccomp_export_bpf wrote {} bytes, not a whole number of BPF instructions", size));
  }
  std::vector<sock_filter> filter(static_cast<size_t>(size) / sizeof(sock_filter));
  size_t done = 0;
  auto* bytes = reinterpret_cast<char*>(filter.data());
  while (done < static_cast<size_t>(size)) {
    ssize_t n = pread(memfd.get(), bytes + done, static_cast<size_t>(size) - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Errno("pread(bpf memfd)");
    if (n == 0) return Status::Error("pread(bpf memfd): unexpected end of file");
    done += static_cast<size_t>(n);
  }
  return filter;
}

// Rules (a syscall with one set of conditions) past which no filter fits the kernel's 4096 instructions.
constexpr size_t kMaxFilterRules = 4096;

Status AddRule(void* ctx, const SeccompRule& rule, const std::string& name, int nr, uint32_t action) {
  for (const auto& conditions : ConditionSets(rule.args)) {
    int rc = seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(conditions.size()),
                                    conditions.empty() ? nullptr : conditions.data());
    if (rc == -EEXIST)  // libseccomp's word for a rule that contradicts one the profile gave before
      return Status::Error(
          fmt::format("{}: a rule for {} with these conditions conflicts with an earlier rule for it "
                      "(another action for the same call and arguments); merge or remove one",
                      rule.json_path, name));
    if (rc < 0) {
      return Status::Errno(fmt::format("seccomp_rule_add({}, {} condition(s))", name, conditions.size()), -rc)
          .Wrap(rule.json_path);
    }
  }
  return OkStatus();
}

// Whether an action lets the call through: SCMP_ACT_LOG allows it too (and logs it).
bool AllowsCall(uint32_t action) { return action == SCMP_ACT_ALLOW || action == SCMP_ACT_LOG; }

}  // namespace

StatusOr<std::shared_ptr<const SeccompProgram>> CompileSeccompProfile(const SeccompProfile& profile,
                                                                      const std::string& name, const SeccompHost& host,
                                                                      SeccompSummary* summary) {
  SeccompSummary local_summary;
  SeccompSummary& sum = summary ? *summary : local_summary;
  sum = SeccompSummary{};
  auto program = std::make_shared<SeccompProgram>();
  program->name = name;
  program->notify_errno = static_cast<int>(ErrnoOf(profile.default_errno_ret));

  uint32_t default_action = LibseccompAction(profile.default_action, profile.default_errno_ret);
  sum.default_action = ActionLabel(profile.default_action, profile.default_errno_ret);
  if (profile.notify_denials) {
    // The kernel still answers with the errno: the notifier replies with notify_errno, never "continue".
    default_action = SCMP_ACT_NOTIFY;
    sum.notify_denials = true;
  }
  if (default_action == SCMP_ACT_NOTIFY) program->uses_notify = true;
  sum.architectures = profile.architectures;
  for (const auto& entry : profile.arch_map) sum.architectures.push_back(entry.architecture);

  FilterContext ctx(seccomp_init(default_action));
  if (!ctx) return Status::Error(fmt::format("seccomp_init({}) failed", sum.default_action));
  // Only the native arch is in the filter: i386 (int 0x80) and x32 calls end the process.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc < 0) {
    return Status::Errno("seccomp_attr_set(SCMP_FLTATR_ACT_BADARCH, KILL_PROCESS)", -rc);
  }
  // A binary search over syscall numbers instead of a linear scan of a few hundred allowed calls.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); rc < 0) {
    return Status::Errno("seccomp_attr_set(SCMP_FLTATR_CTL_OPTIMIZE, 2)", -rc);
  }

  std::map<std::string, std::set<std::string>> names_by_action;
  std::set<std::string> not_native, unknown;
  // Per syscall number: its unconditional rule and its conditional ones, to find rules that cannot match.
  struct RuleRef {
    std::string path;
    std::string label;
    uint32_t action;
  };
  std::map<int, RuleRef> unconditional;
  std::map<int, std::vector<RuleRef>> conditional;
  size_t rule_count = 0;
  for (const SeccompRule& rule : profile.syscalls) {
    switch (RuleAppliesTo(rule, host)) {
      case RuleApplicability::kApplies: break;
      case RuleApplicability::kSkippedForCaps: ++sum.rules_skipped_for_caps; continue;
      case RuleApplicability::kSkippedForArch: ++sum.rules_skipped_for_arch; continue;
      case RuleApplicability::kSkippedForKernel: ++sum.rules_skipped_for_kernel; continue;
    }
    const uint32_t action = LibseccompAction(rule.action, rule.errno_ret);
    if (action == default_action) {
      // libseccomp refuses a rule that only repeats the default (EACCES); it would change nothing.
      ++sum.rules_redundant;
      continue;
    }
    if (action == SCMP_ACT_NOTIFY) program->uses_notify = true;
    const std::string label = ActionLabel(rule.action, rule.errno_ret);
    ++sum.rules_by_action[label];
    for (const std::string& syscall : rule.names) {
      int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, syscall.c_str());
      if (nr == __NR_SCMP_ERROR) nr = NewerSyscallNumber(syscall);
      if (nr == __NR_SCMP_ERROR) {
        // Under a default that allows, a rule that denies a misspelt name ("ptarce") would deny nothing, silently.
        // (Under a default that denies, the call is denied anyway; Docker's profiles list names of other kernels.)
        if (AllowsCall(default_action) && !AllowsCall(action))
          return Status::Error(
              fmt::format("{}: \"{}\" is no system call libseccomp knows: under the default action "
                          "{}, this rule would deny nothing (fix or remove the name)",
                          rule.json_path, syscall, sum.default_action));
        unknown.insert(syscall);
        continue;
      }
      if (nr < 0) {  // libseccomp's pseudo-number: a call of another architecture (socketcall, arm_fadvise64_64 …)
        not_native.insert(syscall);
        continue;
      }
      if (rule.args.empty()) {
        // libseccomp keeps the first unconditional rule of a syscall and drops a later one with another action
        // without a word: the author's second rule (a kill, say) would never apply.
        auto [it, added] = unconditional.emplace(nr, RuleRef{rule.json_path, label, action});
        if (!added && it->second.action != action) {
          return Status::Error(fmt::format("{}: \"{}\" is given {} here and {} by {}: a call gets one action",
                                           rule.json_path, syscall, label, it->second.label, it->second.path));
        }
        if (!added) continue;  // the same action again changes nothing
      }
      // Each rule costs the filter instructions, and libseccomp's work grows faster than the rule count: a profile
      // with more rules than the kernel's instruction limit can never load, so it is refused before that work.
      rule_count += std::max<size_t>(1, ConditionSets(rule.args).size());
      if (rule_count > kMaxFilterRules) {
        return Status::Error(fmt::format("{}: more than {} syscall rules; a filter that large cannot fit the kernel's "
                                         "limit of 4096 instructions", rule.json_path, kMaxFilterRules));
      }
      NSBOX_RETURN_IF_ERROR(AddRule(ctx.get(), rule, syscall, nr, action));
      names_by_action[label].insert(syscall);
      if (!rule.args.empty()) {
        conditional[nr].push_back(RuleRef{rule.json_path, label, action});
      }
    }
  }
  // libseccomp keeps only the unconditional rule of a syscall that has both: a conditional rule with
  // another action would silently never match (an author's "kill on this argument" would vanish).
  for (const auto& [nr, rules] : conditional) {
    auto it = unconditional.find(nr);
    if (it == unconditional.end()) continue;
    for (const RuleRef& rule : rules) {
      if (rule.action == it->second.action) continue;
      return Status::Error(fmt::format(
          "{}: the conditional {} rule for \"{}\" can never match: {} gives \"{}\" {} unconditionally",
          rule.path, rule.label, SyscallName(nr), it->second.path, SyscallName(nr), it->second.label));
    }
  }
  // Every profile: the program is started with execve and ends with exit_group. A profile that denies either could
  // run nothing, and the failure would show as a crash of the program (nsbox's own error report would be denied).
  for (const char* needed : {"execve", "exit_group"}) {
    const int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, needed);
    auto it = unconditional.find(nr);
    const bool allowed = it != unconditional.end() ? AllowsCall(it->second.action)
                                                   : AllowsCall(default_action) || conditional.count(nr) > 0;
    if (!allowed)
      return Status::Error(fmt::format("the profile denies \"{}\": no program could {} under it", needed,
                                       std::string_view(needed) == "execve" ? "start" : "end"));
  }
  if (program->uses_notify) {
    for (const char* needed : kSyscallsAfterInstall) {
      const int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, needed);
      auto it = unconditional.find(nr);
      const bool allowed = it != unconditional.end()
                               ? it->second.action == SCMP_ACT_ALLOW
                               : default_action == SCMP_ACT_ALLOW && conditional.count(nr) == 0;
      if (!allowed) {
        return Status::Error(fmt::format(
            "a profile that notifies must allow \"{}\" unconditionally: the sandbox hands its notification "
            "listener to nsbox with sendmsg and close before execve, and reports failures with write and exit_group",
            needed));
      }
    }
  }
  for (const auto& [label, names] : names_by_action) sum.syscalls_by_action[label] = static_cast<int>(names.size());
  sum.names_not_on_native_arch.assign(not_native.begin(), not_native.end());
  sum.names_unknown.assign(unknown.begin(), unknown.end());

  auto bpf = ExportBpf(ctx.get());
  if (!bpf.ok()) return bpf.status();
  if (profile.default_action == SeccompAction::kErrno || profile.default_action == SeccompAction::kNotify) {
    const auto& ranges = UnassignedSyscallRanges();
    // BPF jump offsets are 8 bits wide; the prologue's longest jump is 2n + 3.
    if (2 * ranges.size() + 3 > 255) return Status::Error("too many unassigned syscall ranges for the ENOSYS prologue");
    sum.enosys_ranges = static_cast<int>(ranges.size());
    program->filter = EnosysPrologue(ranges);
  }
  program->filter.insert(program->filter.end(), bpf->begin(), bpf->end());
  // The kernel's BPF_MAXINSNS.
  if (program->filter.size() > BPF_MAXINSNS) {
    return Status::Error(fmt::format("the compiled filter has {} instructions; the kernel takes at most {}",
                                     program->filter.size(), BPF_MAXINSNS));
  }
  sum.bpf_instructions = program->filter.size();
  return std::shared_ptr<const SeccompProgram>(std::move(program));
}

StatusOr<const SeccompProgram*> GuardProgram() {
  static const StatusOr<SeccompProgram> compiled = []() -> StatusOr<SeccompProgram> {
    FilterContext ctx(seccomp_init(SCMP_ACT_ALLOW));
    if (!ctx) return Status::Error("seccomp_init(SCMP_ACT_ALLOW) for nsbox's guard filter failed");
    // Other architectures are the profile's to judge (it kills them); this filter only adds refusals.
    if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ALLOW); rc < 0)
      return Status::Errno("seccomp_attr_set(SCMP_FLTATR_ACT_BADARCH, ALLOW)", -rc);
    struct Rule {
      const char* syscall;
      const char* what;
      std::vector<scmp_arg_cmp> args;
      int err = EPERM;
    };
    std::vector<Rule> rules;
    // 1. Pid 1. Each rule refuses one lever the program, running as pid 1's user, has on pid 1; reading stays
    // allowed, and the program's own pid (0, or its number) is never 1. The program has no CAP_SYS_NICE in the host's
    // user namespace, so it could only lower pid 1 (nice 19, SCHED_IDLE, the idle I/O class, one CPU), which under a
    // CPU limit shared with a busy program starves pid 1 of its time-out and reaping duties.
    constexpr uint64_t kPrioProcess = 0, kPrioPgrp = 1, kPrioUser = 2;               // <sys/resource.h>
    constexpr uint64_t kIoprioWhoProcess = 1, kIoprioWhoPgrp = 2, kIoprioWhoUser = 3;  // <linux/ioprio.h>
    // The kernel reads these arguments as 32-bit ints and drops a register's upper half; seccomp sees all 64 bits. An
    // equality on the whole register would let 1 | 1 << 32 pass as "not pid 1", and the kernel act on pid 1: every
    // comparison is of the low 32 bits.
    auto is = [](unsigned int arg, uint64_t value) {
      return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, 0xffffffffULL, value};
    };
    rules.insert(
        rules.end(),
        {
            // prlimit64(pid, resource, new_limit, old_limit): a new limit for pid 1 (new_limit is a pointer: 64 bits).
            {"prlimit64", "prlimit64(1, ..., new limit)", {is(0, 1), SCMP_A2(SCMP_CMP_NE, 0)}},
            // setpriority(which, who, prio): pid 1, process group 1, or a whole user, pid 1's included (who 0 is the
            // caller's own uid, which is pid 1's).
            {"setpriority", "setpriority(PRIO_PROCESS, 1)", {is(0, kPrioProcess), is(1, 1)}},
            {"setpriority", "setpriority(PRIO_PGRP, 1)", {is(0, kPrioPgrp), is(1, 1)}},
            {"setpriority", "setpriority(PRIO_USER)", {is(0, kPrioUser)}},
            {"sched_setscheduler", "sched_setscheduler(1)", {is(0, 1)}},
            {"sched_setparam", "sched_setparam(1)", {is(0, 1)}},
            {"sched_setattr", "sched_setattr(1)", {is(0, 1)}},
            {"sched_setaffinity", "sched_setaffinity(1)", {is(0, 1)}},
            // ioprio_set(which, who, ioprio): the same three scopes as setpriority.
            {"ioprio_set", "ioprio_set(IOPRIO_WHO_PROCESS, 1)", {is(0, kIoprioWhoProcess), is(1, 1)}},
            {"ioprio_set", "ioprio_set(IOPRIO_WHO_PGRP, 1)", {is(0, kIoprioWhoPgrp), is(1, 1)}},
            {"ioprio_set", "ioprio_set(IOPRIO_WHO_USER)", {is(0, kIoprioWhoUser)}},
        });
    // 2. Set-user-id and set-group-id bits. A file the program makes in a writable host directory (--workspace DIR,
    // --bind) is a file on the host, where nothing is mounted nosuid: a set-id program left there runs, for any host
    // user, as the sandbox's uid (the caller's own when rootless, a leased id that a later sandbox gets when root).
    // No program in a sandbox can use the bits (no_new_privs), so every call that sets a mode refuses them: chmod and
    // its kin, and the calls that create with a mode (open with O_CREAT or O_TMPFILE, creat, mknod). The kernel reads
    // a mode as a 16-bit umode_t: only its own bits are tested, whatever the register's other bits hold.
    auto bit = [](unsigned int arg, uint64_t mask) { return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, mask, mask}; };
    constexpr uint64_t kTmpfileBit = 020000000;  // __O_TMPFILE without O_DIRECTORY
    for (uint64_t setid : {uint64_t{S_ISUID}, uint64_t{S_ISGID}}) {
      rules.insert(rules.end(), {
                                    {"chmod", "chmod(set-id mode)", {bit(1, setid)}},
                                    {"fchmod", "fchmod(set-id mode)", {bit(1, setid)}},
                                    {"fchmodat", "fchmodat(set-id mode)", {bit(2, setid)}},
                                    {"fchmodat2", "fchmodat2(set-id mode)", {bit(2, setid)}},
                                    {"creat", "creat(set-id mode)", {bit(1, setid)}},
                                    {"mknod", "mknod(set-id mode)", {bit(1, setid)}},
                                    {"mknodat", "mknodat(set-id mode)", {bit(2, setid)}},
                                });
      for (uint64_t creating : {uint64_t{O_CREAT}, kTmpfileBit}) {
        rules.insert(rules.end(),
                     {
                         {"open", "open(O_CREAT|O_TMPFILE, set-id mode)", {bit(1, creating), bit(2, setid)}},
                         {"openat", "openat(O_CREAT|O_TMPFILE, set-id mode)", {bit(2, creating), bit(3, setid)}},
                     });
      }
    }
    // 3. Classic BPF socket filters. The kernel compiles each one it attaches to native code, out of one host-wide
    // budget (net.core.bpf_jit_limit, a few hundred MiB) that no cgroup charges: one sandbox attaching thousands of
    // long filters took it whole, and then no unprivileged process on the host (nor any new sandbox) could load a
    // seccomp filter until the sandbox ended. Programs of a sandbox have no use for them (no raw sockets).
    for (uint64_t option : {uint64_t{SO_ATTACH_FILTER}, uint64_t{SO_ATTACH_REUSEPORT_CBPF}})
      rules.push_back({"setsockopt", "setsockopt(SOL_SOCKET, SO_ATTACH_*)", {is(1, SOL_SOCKET), is(2, option)}});
    // openat2's mode is in a structure, out of a filter's sight: it answers ENOSYS, as from a kernel without it, which
    // its callers meet by falling back to openat. (io_uring's opens are out of sight too; every shipped profile denies
    // io_uring_setup, and a profile that allows it lets the ring's calls past all filters, this one included.)
    rules.push_back({"openat2", "openat2", {}, ENOSYS});
    for (const Rule& rule : rules) {
      int nr = seccomp_syscall_resolve_name(rule.syscall);
      if (nr == __NR_SCMP_ERROR) nr = NewerSyscallNumber(rule.syscall);
      if (nr == __NR_SCMP_ERROR) return Status::Error(fmt::format("seccomp: unknown system call {}", rule.syscall));
      if (int rc = seccomp_rule_add_array(ctx.get(), SCMP_ACT_ERRNO(static_cast<uint16_t>(rule.err)), nr,
                                          static_cast<unsigned int>(rule.args.size()), rule.args.data());
          rc < 0)
        return Status::Errno(fmt::format("seccomp_rule_add({} -> {})", rule.what, ErrnoName(rule.err)), -rc);
    }
    auto bpf = ExportBpf(ctx.get());
    if (!bpf.ok()) return bpf.status();
    SeccompProgram program;
    program.name = "nsbox's guard";
    program.filter = std::move(*bpf);
    return program;
  }();
  if (!compiled.ok()) return compiled.status().Wrap("compiling nsbox's guard filter");
  return &*compiled;
}

int InstallSeccompProgram(const SeccompProgram& program, int* listener_fd) {
  // Only raw system calls from here: this runs between clone and execve.
  if (program.filter.empty() || program.filter.size() > BPF_MAXINSNS) return -EINVAL;
  if (program.uses_notify && listener_fd == nullptr) return -EINVAL;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -errno;
  struct sock_fprog fprog {};
  fprog.len = static_cast<unsigned short>(program.filter.size());
  fprog.filter = const_cast<sock_filter*>(program.filter.data());
  unsigned long flags = 0;
  if (program.uses_notify) {
    // WAIT_KILLABLE_RECV (5.19+): once nsbox has the notification, an ordinary signal cannot restart
    // the call and have one denial counted twice. Older kernels refuse the flag; they get without it.
    flags = SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
  }
  long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog);
  if (rc < 0 && errno == EINVAL && (flags & SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV)) {
    flags &= ~static_cast<unsigned long>(SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV);
    rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog);
  }
  if (rc < 0) return -errno;
  if (program.uses_notify) *listener_fd = static_cast<int>(rc);
  return 0;
}

std::string SyscallName(int nr) {
  if (nr >= 0) {
    if (char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr)) {
      std::string result = name;
      std::free(name);
      return result;
    }
    if (std::string_view name = NewerSyscallName(nr); !name.empty()) return std::string(name);
  }
  return fmt::format("syscall_{}", nr);
}

}  // namespace nsbox
