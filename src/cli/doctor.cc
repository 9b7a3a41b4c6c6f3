// `nsbox doctor [--json]`: runs every host check and says, for each, pass/warn/fail, what was found and the fix;
// exits 0 only when nsbox can run with its defaults.
#include <pwd.h>
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "nsbox_config.h"
#include "src/cli/commands.h"
#include "src/cli/doctor_checks.h"

namespace nsbox::cli {
namespace {

// Exit code when a required check failed: not an nsbox failure (125), a verdict.
constexpr int kExitHostNotReady = 1;

void PrintText(const std::vector<doctor::Check>& checks, const doctor::Caller& caller, const std::string& user,
               bool ready) {
  fmt::print("nsbox doctor: checking this host for uid {} ({}){}\n\n", caller.uid, user, caller.root() ? ", root" : "");
  for (const auto& c : checks) {
    const char* mark = c.verdict == doctor::Verdict::kPass   ? "pass"
                       : c.verdict == doctor::Verdict::kWarn ? "WARN"
                                                             : "FAIL";
    fmt::print("  {}  {:<20} {}\n", mark, c.id, c.title);
    fmt::print("        {}\n", c.detail);
    if (!c.fix.empty()) fmt::print("        fix: {}\n", c.fix);
  }
  std::vector<std::string> failed;
  for (const auto& c : checks)
    if (c.required && c.verdict == doctor::Verdict::kFail) failed.push_back(c.id);
  if (ready)
    fmt::print("\nnsbox can run here with its defaults.\n");
  else
    fmt::print("\nnsbox cannot run here with its defaults: {} failed.\n", fmt::join(failed, ", "));
}

}  // namespace

void RegisterDoctor(CLI::App& app, ExitCode& exit_code) {
  auto* doctor = app.add_subcommand("doctor", "check what this host offers nsbox, and how to fix what it lacks");
  static bool json = false;
  doctor->add_flag("--json", json,
                   "print one JSON object: {ok, version, uid, user, checks: [{id, title, status, detail, fix, required}]}");
  doctor->callback([&exit_code] {
    doctor::Caller caller{::geteuid(), ::getegid()};
    std::string user = std::to_string(caller.uid);
    if (struct passwd* pw = ::getpwuid(caller.uid)) user = pw->pw_name;
    auto checks = doctor::RunAllChecks(doctor::HostPaths{}, caller);
    bool ready = doctor::CanRunWithDefaults(checks);
    if (json) {
      nlohmann::json out;
      out["ok"] = ready;
      out["version"] = NSBOX_VERSION;
      out["uid"] = caller.uid;
      out["user"] = user;
      out["checks"] = nlohmann::json::array();
      for (const auto& c : checks)
        out["checks"].push_back({{"id", c.id}, {"title", c.title}, {"status", doctor::VerdictName(c.verdict)},
                                 {"detail", c.detail}, {"fix", c.fix}, {"required", c.required}});
      fmt::print("{}\n", out.dump(2));
    } else {
      PrintText(checks, caller, user, ready);
    }
    std::fflush(stdout);
    exit_code.value = ready ? 0 : kExitHostNotReady;
  });
}

}  // namespace nsbox::cli
