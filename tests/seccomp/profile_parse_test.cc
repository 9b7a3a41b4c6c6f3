// Seccomp profile loading without privileges: the format, its error messages, rule gating, and compiling real profiles.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "nsbox_config.h"
#include "sandbox/base/fs.h"
#include "sandbox/seccomp.h"
#include "sandbox/spec/seccomp_profile.h"
#include "tests/support/as_user.h"
#include "tests/support/skip.h"

using namespace nsbox;

namespace {

const std::string kProfilesDir = NSBOX_SOURCE_DIR "/seccomp-profiles";
const std::string kDockerFixture = "/work/shared/fixtures/docker-default-seccomp.json";

std::string ErrorOf(const std::string& json) {
  auto parsed = ParseSeccompProfile(json);
  if (parsed.ok()) return "(parsed fine)";
  return parsed.status().message();
}

SeccompHost HostWithKernel(int major, int minor) {
  SeccompHost host;
  host.kernel = {major, minor};
  return host;
}

}  // namespace

TEST_CASE("a profile in the Docker format parses into plain data") {
  auto profile = ParseSeccompProfile(R"({
    "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1,
    "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]}],
    "syscalls": [
      {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW", "comment": "I/O"},
      {"name": "clone3", "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
      {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
       "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
       "excludes": {"caps": ["CAP_SYS_ADMIN"], "arches": ["s390", "s390x"]}},
      {"names": ["bpf"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_BPF"], "minKernel": "5.8"}}
    ]})");
  REQUIRE(profile.ok());
  CHECK(profile->default_action == SeccompAction::kErrno);
  CHECK(profile->default_errno_ret == 1u);
  REQUIRE(profile->arch_map.size() == 1);
  CHECK(profile->arch_map[0].sub_architectures.size() == 2);
  REQUIRE(profile->syscalls.size() == 4);
  CHECK(profile->syscalls[0].names == std::vector<std::string>{"read", "write"});
  CHECK(profile->syscalls[0].comment == "I/O");
  CHECK(profile->syscalls[1].names == std::vector<std::string>{"clone3"});
  CHECK(profile->syscalls[1].errno_ret == 38u);
  REQUIRE(profile->syscalls[2].args.size() == 1);
  CHECK(profile->syscalls[2].args[0].op == SeccompCompare::kMaskedEq);
  CHECK(profile->syscalls[2].args[0].value == 2114060288u);
  CHECK(profile->syscalls[2].excludes.arches.size() == 2);
  CHECK(profile->syscalls[3].includes.min_kernel == "5.8");
  CHECK(profile->syscalls[3].json_path == "syscalls[3]");
}

TEST_CASE("profile errors name the JSON path of the fault") {
  const std::string head =
      R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}, )";
  CHECK(
      ErrorOf(
          head +
          R"({"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", )"
          R"("args": [{"index": 1, "value": 1, "op": "SCMP_CMP_FOO"}]}]})") ==
      R"(syscalls[1].args[0].op: unknown operator "SCMP_CMP_FOO")");
  CHECK(
      ErrorOf(
          head +
          R"({"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", )"
          R"("args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}]})") ==
      "syscalls[1].args[0].index: argument index 6 is out of range (0..5)");
  CHECK(
      ErrorOf(
          head +
          R"({"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", )"
          R"("args": [{"index": 0, "value": -1, "op": "SCMP_CMP_EQ"}]}]})") ==
      "syscalls[1].args[0].value: expected a non-negative integer, got -1");
  CHECK(ErrorOf(head +
                R"({"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"value": 1, "op": "SCMP_CMP_EQ"}]}]})") ==
        R"(syscalls[1].args[0]: missing "index")");
  CHECK(ErrorOf(head + R"({"names": ["read", "Open"], "action": "SCMP_ACT_ALLOW"}]})") ==
        R"(syscalls[1].names[1]: "Open" is not a system call name)");
  CHECK(ErrorOf(head + R"({"names": ["read"], "action": "SCMP_ACT_ALLOW", "errnoRet": 1}]})") ==
        "syscalls[1].errnoRet: only meaningful with SCMP_ACT_ERRNO or SCMP_ACT_TRACE, not SCMP_ACT_ALLOW");
  CHECK(ErrorOf(head + R"({"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": 5000}]})") ==
        "syscalls[1].errnoRet: errno 5000 is out of range (0..4095)");
  CHECK(ErrorOf(head + R"({"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoret": 1}]})").rfind(
            R"(syscalls[1]: unknown key "errnoret")", 0) == 0);
  CHECK(ErrorOf(head + R"({"names": ["read"], "action": "SCMP_ACT_BLOCK"}]})") ==
        R"(syscalls[1].action: unknown action "SCMP_ACT_BLOCK")");
  CHECK(ErrorOf(head + R"({"names": [], "action": "SCMP_ACT_ALLOW"}]})") ==
        R"(syscalls[1]: the rule names no system call ("names" is missing or empty))");
  CHECK(ErrorOf(head + R"({"names": "read", "action": "SCMP_ACT_ALLOW"}]})") ==
        "syscalls[1].names: expected an array of strings, got string");
  CHECK(ErrorOf(head + R"({"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["vax"]}}]})") ==
        R"(syscalls[1].includes.arches[0]: unknown architecture "vax")");
  CHECK(ErrorOf(head + R"({"names": ["read"], "action": "SCMP_ACT_ALLOW", "excludes": {"minKernel": "four"}}]})") ==
        R"(syscalls[1].excludes.minKernel: "four" is not a kernel version (MAJOR.MINOR))");
  CHECK(ErrorOf(head + R"({"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["SYS_ADMIN"]}}]})") ==
        R"(syscalls[1].includes.caps[0]: "SYS_ADMIN" is not a capability name (CAP_…))");
  CHECK(ErrorOf(R"({"syscalls": []})") == R"((top level): missing "defaultAction")");
  CHECK(ErrorOf(R"({"defaultAction": "SCMP_ACT_ERRNO", "archMap": [{"architecture": "SCMP_ARCH_VAX"}]})") ==
        R"(archMap[0].architecture: unknown architecture "SCMP_ARCH_VAX")");
  CHECK(ErrorOf(R"({"defaultAction": "SCMP_ACT_ALLOW", "defaultErrnoRet": 1})") ==
        "defaultErrnoRet: only meaningful with SCMP_ACT_ERRNO, SCMP_ACT_TRACE or SCMP_ACT_NOTIFY, not SCMP_ACT_ALLOW");
  CHECK(ErrorOf(R"({"defaultAction": "SCMP_ACT_ALLOW", "nsboxNotifyDenials": true})") ==
        "nsboxNotifyDenials: needs defaultAction SCMP_ACT_ERRNO (the errno is what nsbox answers), not SCMP_ACT_ALLOW");
  CHECK(ErrorOf("[1, 2]") == "(top level): expected a JSON object, got array");
  // Echoed strings are JSON-quoted: a message stays on one line and carries no control characters.
  CHECK(ErrorOf("{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"a\\n\\u001b[2Jb\": 1}").rfind(
            R"((top level): unknown key "a\n\u001b[2Jb" (known: )", 0) == 0);
  // Found by the fuzzer: a number too large for a double threw out_of_range past the parse_error handler.
  CHECK(ErrorOf(R"({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1e999999})") ==
        "invalid JSON: number overflow parsing '1e999999'");
  CHECK(ErrorOf("{\n  \"defaultAction\": \"SCMP_ACT_ERRNO\",\n  \"syscalls\": [ }")
            .rfind("line 3, column 17: invalid JSON: ", 0) == 0);
  // A key twice: a reader of the first would see another policy than the last, which nlohmann keeps.
  CHECK(ErrorOf(R"({"defaultAction": "SCMP_ACT_ERRNO", "defaultAction": "SCMP_ACT_ALLOW"})") ==
        R"(invalid JSON: the JSON has the key "defaultAction" twice in one object)");
  CHECK(ErrorOf(head + R"({"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "action": "SCMP_ACT_ALLOW"}]})") ==
        R"(invalid JSON: the JSON has the key "action" twice in one object)");
  // nlohmann stops at a NUL byte: the text after it would never be looked at.
  CHECK(ErrorOf(std::string(R"({"defaultAction": "SCMP_ACT_ALLOW"})") + std::string(1, '\0') + "garbage{{{") ==
        "invalid JSON: the JSON has a NUL byte (at byte 36)");
}

TEST_CASE("kernel versions parse from profile gates and uname releases") {
  CHECK(ParseKernelVersion("4.8").has_value());
  CHECK(ParseKernelVersion("6.18.44-fc-v669")->minor == 18);
  CHECK(ParseKernelVersion("5.15.0-91-generic")->major == 5);
  CHECK_FALSE(ParseKernelVersion("4").has_value());
  CHECK_FALSE(ParseKernelVersion("4.").has_value());
  CHECK_FALSE(ParseKernelVersion("four.eight").has_value());
  CHECK_FALSE(ParseKernelVersion("4.8x").has_value());
  CHECK(KernelVersion{4, 8} < KernelVersion{4, 10});
}

TEST_CASE("rules gated on capabilities do not apply; excludes.caps rules do; arches and kernels gate against x86_64") {
  SeccompRule rule;
  rule.names = {"read"};
  const SeccompHost host = HostWithKernel(6, 1);
  CHECK(RuleAppliesTo(rule, host) == RuleApplicability::kApplies);

  SeccompRule caps = rule;
  caps.includes.caps = {"CAP_SYS_ADMIN"};
  CHECK(RuleAppliesTo(caps, host) == RuleApplicability::kSkippedForCaps);
  SeccompRule excluded_caps = rule;
  excluded_caps.excludes.caps = {"CAP_SYS_ADMIN"};
  CHECK(RuleAppliesTo(excluded_caps, host) == RuleApplicability::kApplies);

  SeccompRule amd64 = rule;
  amd64.includes.arches = {"amd64", "x32"};
  CHECK(RuleAppliesTo(amd64, host) == RuleApplicability::kApplies);
  SeccompRule arm = rule;
  arm.includes.arches = {"arm", "arm64"};
  CHECK(RuleAppliesTo(arm, host) == RuleApplicability::kSkippedForArch);
  SeccompRule not_s390 = rule;
  not_s390.excludes.arches = {"s390", "s390x"};
  CHECK(RuleAppliesTo(not_s390, host) == RuleApplicability::kApplies);
  SeccompRule not_amd64 = rule;
  not_amd64.excludes.arches = {"amd64"};
  CHECK(RuleAppliesTo(not_amd64, host) == RuleApplicability::kSkippedForArch);

  SeccompRule new_kernel = rule;
  new_kernel.includes.min_kernel = "6.2";
  CHECK(RuleAppliesTo(new_kernel, host) == RuleApplicability::kSkippedForKernel);
  CHECK(RuleAppliesTo(new_kernel, HostWithKernel(6, 2)) == RuleApplicability::kApplies);
  SeccompRule old_kernel_only = rule;
  old_kernel_only.excludes.min_kernel = "5.4";
  CHECK(RuleAppliesTo(old_kernel_only, host) == RuleApplicability::kSkippedForKernel);
  CHECK(RuleAppliesTo(old_kernel_only, HostWithKernel(4, 19)) == RuleApplicability::kApplies);
}

TEST_CASE("Docker's published profile loads and compiles unchanged") {
  REQUIRE(PathExists(kDockerFixture));
  auto profile = ReadSeccompProfile(kDockerFixture);
  REQUIRE(profile.ok());
  SeccompSummary summary;
  auto program = CompileSeccompProfile(*profile, "docker", NativeSeccompHost(), &summary);
  INFO(program.status().message());
  REQUIRE(program.ok());
  CHECK_FALSE((*program)->uses_notify);
  CHECK(summary.default_action == "SCMP_ACT_ERRNO(EPERM)");
  CHECK(summary.rules_skipped_for_caps >= 10);
  CHECK(summary.rules_skipped_for_arch >= 3);
  CHECK(summary.syscalls_by_action.at("SCMP_ACT_ALLOW") > 300);
  // RISC-V's riscv_hwprobe is newer than Debian 12's libseccomp; it is reported, not an error.
  CHECK(summary.names_unknown == std::vector<std::string>{"riscv_hwprobe"});
  CHECK(std::find(summary.names_not_on_native_arch.begin(), summary.names_not_on_native_arch.end(), "socketcall") !=
        summary.names_not_on_native_arch.end());
  CHECK((*program)->filter.size() > 100);
}

TEST_CASE("nsbox's own profiles compile, notify denials, and give every rule a comment") {
  for (const char* name : {"default", "strict"}) {
    INFO(name);
    auto path = ResolveSeccompProfilePath(name, kProfilesDir);
    REQUIRE(path.ok());
    auto profile = ReadSeccompProfile(*path);
    REQUIRE(profile.ok());
    for (const SeccompRule& rule : profile->syscalls) {
      INFO(rule.json_path);
      CHECK(rule.comment.size() > 20);
    }
    SeccompSummary summary;
    auto program = CompileSeccompProfile(*profile, name, NativeSeccompHost(), &summary);
    INFO(program.status().message());
    REQUIRE(program.ok());
    CHECK((*program)->uses_notify);
    CHECK((*program)->notify_errno == EPERM);
    // Every name in our own profiles is a real x86_64 system call: a typo would be a silent hole.
    CHECK(summary.names_unknown.empty());
    CHECK(summary.names_not_on_native_arch.empty());
    CHECK(summary.rules_redundant == 0);
    CHECK(summary.enosys_ranges >= 2);
  }
}

TEST_CASE("profile names resolve in the profiles directory; anything with a slash is a path") {
  CHECK(*ResolveSeccompProfilePath("default", kProfilesDir) == kProfilesDir + "/default.json");
  CHECK(*ResolveSeccompProfilePath("./mine.json", kProfilesDir) == "./mine.json");
  auto missing = ResolveSeccompProfilePath("nosuch", kProfilesDir);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("unknown seccomp profile \"nosuch\"") != std::string::npos);
  auto bad = LoadSeccompProfile("/nonexistent/profile.json", kProfilesDir);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("/nonexistent/profile.json") != std::string::npos);
  // A directory that is not there is said so, in no API's or flag's words.
  auto no_dir = ResolveSeccompProfilePath("default", "/nonexistent-profiles");
  REQUIRE_FALSE(no_dir.ok());
  CHECK(no_dir.status().message() ==
        "unknown seccomp profile \"default\": no file /nonexistent-profiles/default.json (give a path to use a profile "
        "file); the profiles directory /nonexistent-profiles does not exist");
}

TEST_CASE("a profiles directory this user cannot read is said so, not that the profile does not exist") {
  if (::geteuid() != 0) return;  // acting as another uid needs root
  char dir[] = "/tmp/nsbox-profiles-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);  // 0700, root's
  REQUIRE(nsbox::WriteFile(std::string(dir) + "/default.json", "{}").ok());
  auto message = nsbox::testing::AsUser(65534, 65534,
                                        [&] { return ResolveSeccompProfilePath("default", dir).status().message(); });
  std::remove((std::string(dir) + "/default.json").c_str());
  ::rmdir(dir);
  REQUIRE(message);
  CHECK(*message == fmt::format("seccomp profile \"default\": stat({}/default.json): Permission denied (EACCES)", dir));
}

TEST_CASE("a conditional rule that an unconditional rule would silently override is an error") {
  // libseccomp keeps only the unconditional rule for a syscall that has both; the kill rule would vanish.
  auto profile = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
    {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["read"], "action": "SCMP_ACT_KILL_PROCESS", )"
                                     R"("args": [{"index": 0, "value": 5, "op": "SCMP_CMP_EQ"}]}]})");
  REQUIRE(profile.ok());
  auto program = CompileSeccompProfile(*profile, "test", NativeSeccompHost());
  REQUIRE_FALSE(program.ok());
  CHECK(
      program.status().message() ==
      R"(syscalls[1]: the conditional SCMP_ACT_KILL_PROCESS rule for "read" can never match: )"
      R"(syscalls[0] gives "read" SCMP_ACT_ALLOW unconditionally)");
  // The same action under a condition is merely redundant.
  auto redundant = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
    {"names": ["read", "execve", "exit_group"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 5, "op": "SCMP_CMP_EQ"}]}]})");
  REQUIRE(redundant.ok());
  CHECK(CompileSeccompProfile(*redundant, "test", NativeSeccompHost()).ok());
}

TEST_CASE("two unconditional rules giving one call different actions are an error, not first-one-wins") {
  // libseccomp would keep the first and drop the second without a word.
  auto profile = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
    {"names": ["getpid", "execve", "exit_group"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["getpid"], "action": "SCMP_ACT_KILL_PROCESS"}]})");
  REQUIRE(profile.ok());
  auto program = CompileSeccompProfile(*profile, "test", NativeSeccompHost());
  REQUIRE_FALSE(program.ok());
  CHECK(
      program.status().message() ==
      R"(syscalls[1]: "getpid" is given SCMP_ACT_KILL_PROCESS here and SCMP_ACT_ALLOW by syscalls[0]: )"
      R"(a call gets one action)");
  // The same action twice, and a name repeated in one rule, change nothing.
  auto repeated = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
    {"names": ["getpid", "getpid", "execve", "exit_group"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["getpid"], "action": "SCMP_ACT_ALLOW"}]})");
  REQUIRE(repeated.ok());
  CHECK(CompileSeccompProfile(*repeated, "test", NativeSeccompHost()).ok());
}

TEST_CASE("two conditional rules giving one call and argument different actions are named as a conflict") {
  // libseccomp answers EEXIST ("File exists"), which said nothing of the profile.
  auto profile = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
    {"names": ["execve", "exit_group"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]},
    {"names": ["socket"], "action": "SCMP_ACT_KILL_PROCESS", )"
                                     R"("args": [{"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]}]})");
  REQUIRE(profile.ok());
  auto program = CompileSeccompProfile(*profile, "test", NativeSeccompHost());
  REQUIRE_FALSE(program.ok());
  CHECK(program.status().message() ==
        "syscalls[2]: a rule for socket with these conditions conflicts with an earlier rule for it (another action "
        "for the same call and arguments); merge or remove one");
}

TEST_CASE("a profile that denies execve or exit_group is refused: nothing could start or end under it") {
  auto none = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": []})");
  REQUIRE(none.ok());
  auto program = CompileSeccompProfile(*none, "test", NativeSeccompHost());
  REQUIRE_FALSE(program.ok());
  CHECK(program.status().message() == R"(the profile denies "execve": no program could start under it)");
  auto no_exit = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
    {"names": ["exit_group"], "action": "SCMP_ACT_KILL_PROCESS"}]})");
  REQUIRE(no_exit.ok());
  program = CompileSeccompProfile(*no_exit, "test", NativeSeccompHost());
  REQUIRE_FALSE(program.ok());
  CHECK(program.status().message() == R"(the profile denies "exit_group": no program could end under it)");
  // SCMP_ACT_LOG allows the call (and logs it): as a default or as execve's own rule, it is not a denial.
  for (const char* text : {R"({"defaultAction": "SCMP_ACT_LOG"})",
                           R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
                                {"names": ["execve", "exit_group"], "action": "SCMP_ACT_LOG"}]})"}) {
    auto logged = ParseSeccompProfile(text);
    REQUIRE(logged.ok());
    CHECK(CompileSeccompProfile(*logged, "test", NativeSeccompHost()).ok());
  }
}

TEST_CASE("under a default that allows, a rule denying a name libseccomp does not know is refused") {
  // The misspelt ptrace stayed allowed, without a word: the rule that was to deny it denied nothing.
  auto typo = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
    {"names": ["getpid", "ptarce"], "action": "SCMP_ACT_ERRNO"}]})");
  REQUIRE(typo.ok());
  auto program = CompileSeccompProfile(*typo, "test", NativeSeccompHost());
  REQUIRE_FALSE(program.ok());
  CHECK(program.status().message() ==
        R"(syscalls[0]: "ptarce" is no system call libseccomp knows: under the default action SCMP_ACT_ALLOW, this )"
        "rule would deny nothing (fix or remove the name)");
  // Under a default that denies, such a name is denied anyway: ignored, as Docker's profiles need.
  auto denied_anyway = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
    {"names": ["execve", "exit_group", "nosuchcall"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["ptarce"], "action": "SCMP_ACT_KILL_PROCESS"}]})");
  REQUIRE(denied_anyway.ok());
  SeccompSummary summary;
  CHECK(CompileSeccompProfile(*denied_anyway, "test", NativeSeccompHost(), &summary).ok());
  CHECK(summary.names_unknown == std::vector<std::string>{"nosuchcall", "ptarce"});
}

TEST_CASE("a profile with more rules than any filter could hold is refused before libseccomp's slow work") {
  // 20000 conditional rules took libseccomp over a minute before the instruction count was checked.
  std::string rules;
  for (int i = 0; i < 20000; ++i)
    rules += fmt::format(
        R"(,{{"names": ["read"], "action": "SCMP_ACT_ALLOW", )"
        R"("args": [{{"index": 0, "value": {}, "op": "SCMP_CMP_EQ"}}]}})",
        i);
  auto profile = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
    {"names": ["execve", "exit_group"], "action": "SCMP_ACT_ALLOW"})" + rules + "]}");
  REQUIRE(profile.ok());
  const auto started = std::chrono::steady_clock::now();
  auto program = CompileSeccompProfile(*profile, "test", NativeSeccompHost());
  REQUIRE_FALSE(program.ok());
  CHECK(program.status().message() ==
        "syscalls[4095]: more than 4096 syscall rules; a filter that large cannot fit the kernel's limit of 4096 "
        "instructions");
  INFO("took "
       << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count()
       << " ms");
}

TEST_CASE("a notifying profile must allow the calls the child makes after installing it") {
  auto profile = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ERRNO", "nsboxNotifyDenials": true, "syscalls": [
    {"names": ["close", "write", "exit_group", "execve"], "action": "SCMP_ACT_ALLOW"}]})");
  REQUIRE(profile.ok());
  auto program = CompileSeccompProfile(*profile, "test", NativeSeccompHost());
  REQUIRE_FALSE(program.ok());
  CHECK(program.status().message().rfind(R"(a profile that notifies must allow "sendmsg" unconditionally)", 0) == 0);
  profile->notify_denials = false;
  CHECK(CompileSeccompProfile(*profile, "test", NativeSeccompHost()).ok());
  // Under an allow default the calls need no rule of their own.
  auto allow_default = ParseSeccompProfile(R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
    {"names": ["mount"], "action": "SCMP_ACT_NOTIFY"}]})");
  REQUIRE(allow_default.ok());
  auto notifying = CompileSeccompProfile(*allow_default, "test", NativeSeccompHost());
  REQUIRE(notifying.ok());
  CHECK((*notifying)->uses_notify);
}

TEST_CASE("SyscallName names x86_64 calls, including ones newer than libseccomp's table") {
  CHECK(SyscallName(0) == "read");
  CHECK(SyscallName(165) == "mount");
  CHECK(SyscallName(462) == "mseal");
  CHECK(SyscallName(1000) == "syscall_1000");
  CHECK(SyscallName(-1) == "syscall_-1");
}

TEST_CASE("nsbox profile check prints a summary, or one line naming the fault, with exit 0 or 125") {
  const char* bin = std::getenv("NSBOX_BIN");
  if (!bin || !PathExists(bin)) {
    nsbox::testing::RecordSkip("seccomp_tests", "nsbox profile check",
                               "NSBOX_BIN is not set to a built nsbox (tools/test sets it)");
    return;
  }
  auto run = [&](const std::string& args, std::string& output) {
    const std::string command = fmt::format("{} profile check {} 2>&1", bin, args);
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe);
    char buffer[4096];
    output.clear();
    while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
    int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string output;
  CHECK(run("default --profiles-dir " + kProfilesDir, output) == 0);
  CHECK(output.find("default action: SCMP_ACT_ERRNO(EPERM), delivered by user notification") != std::string::npos);
  CHECK(output.find("rules applied: 37 (allow 33, errno 4, kill 0, notify 0, other 0)") != std::string::npos);
  CHECK(run(kDockerFixture, output) == 0);
  CHECK(output.find("rules skipped: 14 need capabilities") != std::string::npos);

  char dir_template[] = "/tmp/nsbox-seccomp-test-XXXXXX";
  REQUIRE(mkdtemp(dir_template));
  const std::string bad = std::string(dir_template) + "/bad.json";
  REQUIRE(WriteFile(bad,
                    R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 1, "op": "SCMP_CMP_FOO"}]}]})")
              .ok());
  CHECK(run(bad, output) == 125);
  CHECK(output == "nsbox: profile check: " + bad + ": syscalls[1].args[0].op: unknown operator \"SCMP_CMP_FOO\"\n");
  std::remove(bad.c_str());
  // A FIFO nobody writes to would block the open forever.
  const std::string fifo = std::string(dir_template) + "/fifo.json";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(run(fifo, output) == 125);
  CHECK(output == "nsbox: profile check: " + fifo + " is not a regular file\n");
  std::remove(fifo.c_str());
  rmdir(dir_template);
}
