// The `nsbox profile` verb: `profile check FILE|NAME` validates a seccomp profile and prints what it does.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "sandbox/seccomp.h"
#include "src/cli/commands.h"

namespace nsbox::cli {
namespace {

struct ProfileCheckOptions {
  std::string profile;
  std::string profiles_dir;
};

// "SCMP_ACT_ERRNO(EIO)" → "errno": the families a reader compares at a glance.
std::string ActionFamily(const std::string& label) {
  if (label == "SCMP_ACT_ALLOW") return "allow";
  if (label.rfind("SCMP_ACT_ERRNO", 0) == 0) return "errno";
  if (label.rfind("SCMP_ACT_KILL", 0) == 0 || label == "SCMP_ACT_TRAP") return "kill";
  if (label == "SCMP_ACT_NOTIFY") return "notify";
  return "other";  // SCMP_ACT_LOG, SCMP_ACT_TRACE
}

std::string JoinNames(const std::vector<std::string>& names, size_t limit) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += fmt::format("{}{}", i ? ", " : "", names[i]);
  if (names.size() > limit) out += fmt::format(" … ({} more)", names.size() - limit);
  return out;
}

int RunProfileCheck(const ProfileCheckOptions& options) {
  const std::string dir = options.profiles_dir.empty() ? DefaultSeccompProfilesDir() : options.profiles_dir;
  auto path = ResolveSeccompProfilePath(options.profile, dir);
  if (!path.ok()) {
    fmt::print(stderr, "nsbox: profile check: {}\n", path.status().message());
    return kExitNsboxFailure;
  }
  auto profile = ReadSeccompProfile(*path);
  if (!profile.ok()) {
    fmt::print(stderr, "nsbox: profile check: {}\n", profile.status().message());
    return kExitNsboxFailure;
  }
  SeccompSummary summary;
  auto program = CompileSeccompProfile(*profile, options.profile, NativeSeccompHost(), &summary);
  if (!program.ok()) {
    fmt::print(stderr, "nsbox: profile check: {}: {}\n", *path, program.status().message());
    return kExitNsboxFailure;
  }

  std::map<std::string, int> families = {{"allow", 0}, {"errno", 0}, {"kill", 0}, {"notify", 0}, {"other", 0}};
  int applied = 0;
  for (const auto& [label, count] : summary.rules_by_action) {
    families[ActionFamily(label)] += count;
    applied += count;
  }
  if (*path == options.profile) {
    fmt::print("profile: {}\n", *path);
  } else {
    fmt::print("profile: {} ({})\n", options.profile, *path);
  }
  fmt::print("default action: {}{}\n", summary.default_action,
             summary.notify_denials
                 ? ", delivered by user notification: nsbox answers with the errno and reports denied_syscalls"
                 : "");
  fmt::print("rules applied: {} (allow {}, errno {}, kill {}, notify {}, other {})\n", applied, families["allow"],
             families["errno"], families["kill"], families["notify"], families["other"]);
  for (const auto& [label, count] : summary.rules_by_action) {
    const int names = summary.syscalls_by_action.count(label) ? summary.syscalls_by_action.at(label) : 0;
    fmt::print("  {}: {} rule{}, {} syscall{}\n", label, count, count == 1 ? "" : "s", names, names == 1 ? "" : "s");
  }
  fmt::print("rules skipped: {} need capabilities (the sandbox holds none), {} for other architectures, {} for the "
             "kernel version, {} repeat the default action\n",
             summary.rules_skipped_for_caps, summary.rules_skipped_for_arch, summary.rules_skipped_for_kernel,
             summary.rules_redundant);
  fmt::print(
      "architectures: x86_64 only; i386 and x32 calls kill the process{}\n",
      summary.architectures.empty() ? "" : fmt::format(" (the profile lists {})", JoinNames(summary.architectures, 8)));
  if (!summary.names_not_on_native_arch.empty()) {
    fmt::print("names ignored, not x86_64 calls: {}\n", JoinNames(summary.names_not_on_native_arch, 10));
  }
  if (!summary.names_unknown.empty()) {
    fmt::print("names ignored, unknown system calls: {}\n", JoinNames(summary.names_unknown, 20));
  }
  if (summary.enosys_ranges > 0) {
    fmt::print("unassigned and future syscall numbers: ENOSYS ({} ranges)\n", summary.enosys_ranges);
  }
  fmt::print("filter: {} BPF instructions\n", summary.bpf_instructions);
  return 0;
}

}  // namespace

void RegisterProfile(CLI::App& app, ExitCode& exit_code) {
  CLI::App* profile = app.add_subcommand("profile", "Work with seccomp profiles (Docker/OCI JSON format)");
  profile->require_subcommand(1);
  auto options = std::make_shared<ProfileCheckOptions>();
  CLI::App* check = profile->add_subcommand(
      "check",
      "Validate a profile and summarise it; a fault is named by its JSON path. Exit 0 when valid, 125 when not.");
  check->add_option("profile", options->profile, "A profile name (default, strict) or a path to a JSON file")
      ->required();
  check->add_option("--profiles-dir", options->profiles_dir,
                    "Where named profiles live (default: nsbox's data directory)");
  check->callback([options, &exit_code] { exit_code.value = RunProfileCheck(*options); });
}

}  // namespace nsbox::cli
