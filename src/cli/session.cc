// `nsbox session create|ls|rm`: long-lived sandboxes that keep files, packages, processes and Python state.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <set>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"
#include "sandbox/spec/units.h"
#include "src/cli/commands.h"
#include "src/cli/parse_error.h"
#include "src/cli/sandbox_options.h"
#include "src/session/state.h"
#include "src/session/supervisor.h"

namespace nsbox::cli {
namespace {

// Calls f(0) … f(count - 1) on up to 16 threads at once: sessions are asked in parallel, so that one that does not
// answer costs its deadline once, not once per session behind it. f must not throw.
template <typename F>
void ForEachAtOnce(size_t count, F f) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next++) < count;) f(k);
  };
  std::vector<std::thread> workers;
  for (size_t i = 1; i < std::min<size_t>(count, 16); ++i) {
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // out of threads: fewer workers, the same work
    }
  }
  work();
  for (auto& worker : workers) worker.join();
}

std::string FormatAge(int64_t ms) {
  int64_t s = ms / 1000;
  if (s < 120) return fmt::format("{}s", s);
  if (s < 7200) return fmt::format("{}m", s / 60);
  return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
}

// The options of `nsbox session create` that choose the sandbox and its life (not how the result is printed).
struct CreateOptions {
  SandboxOptions sandbox;
  std::string name, idle_timeout = "15m", max_lifetime = "2h";
  bool name_given = false;  // --name '' is a bad name, not no name
};

void AddCreateOptions(CLI::App* app, CreateOptions& o) {
  AddSandboxOptions(app, o.sandbox);
  app->add_option("--name", o.name, "a name to find the session by, unique among live sessions")
      ->each([&o](const std::string&) { o.name_given = true; });
  app->add_option("--idle-timeout", o.idle_timeout, "end the session after this long without a request")
      ->capture_default_str();
  app->add_option("--max-lifetime", o.max_lifetime, "end the session this long after its start")->capture_default_str();
}

struct CheckedCreate {
  Policy policy;
  std::optional<NetworkAllowSpec> network;
  std::chrono::milliseconds idle_timeout, max_lifetime;
};

// Everything create checks before it makes anything.
StatusOr<CheckedCreate> CheckCreate(const CreateOptions& o, bool hold_image) {
  auto policy = BuildPolicy(o.sandbox, hold_image);
  if (!policy.ok()) return policy.status();
  auto network = BuildNetworkSpec(o.sandbox);
  if (!network.ok()) return network.status();
  auto idle = ParseDuration(o.idle_timeout);
  if (!idle.ok()) return idle.status().Wrap("--idle-timeout");
  auto lifetime = ParseDuration(o.max_lifetime);
  if (!lifetime.ok()) return lifetime.status().Wrap("--max-lifetime");
  if (o.name_given && !session::ValidSessionName(o.name))
    return Status::Error(fmt::format("--name '{}': use 1 to 64 of A-Z a-z 0-9 . _ - (not first . or -)", o.name));
  return CheckedCreate{std::move(*policy), std::move(*network), *idle, *lifetime};
}

}  // namespace

Status CheckSessionCreateArgs(const std::vector<std::string>& args, const std::string& help) {
  CLI::App app;
  CreateOptions options;
  AddCreateOptions(&app, options);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // An option session create does not have, by name (CLI11 says "The following argument was not expected").
    if (std::string unknown = FirstUnknownOption(app, args); !unknown.empty())
      return Status::Error(fmt::format("unknown option '{}' (see {} --help)", unknown, help));
    return Status::Error(ExplainParseError(app, "", help, e.what()));
  }
  return CheckCreate(options, /*hold_image=*/false).status();  // the session itself is made later, by another call
}

std::string SessionCreateOptionsHelp() {
  CLI::App app;
  CreateOptions options;
  AddCreateOptions(&app, options);
  CLI::Formatter formatter;
  std::string lines;
  for (const CLI::Option* option : app.get_options())
    if (option != app.get_help_ptr()) lines += formatter.make_option(option, false);
  return lines;
}

void RegisterSession(CLI::App& app, ExitCode& exit_code) {
  auto* session = app.add_subcommand("session", "long-lived sandboxes for many execs: create, ls, rm");
  session->require_subcommand(1);

  // create
  auto* create = session->add_subcommand("create", "start a session and print its id");
  static CreateOptions create_options;
  static bool create_json = false;
  AddCreateOptions(create, create_options);
  create->add_flag("--json", create_json, "print the session as a JSON object");
  static pid_t end_with_pid = 0;
  create->add_option("--end-with-pid", end_with_pid,
                     "end the session as soon as this process ends (for a program that owns the session)");
  create->callback([&exit_code, create] {
    auto fail = [&](const Status& status) {
      fmt::print(stderr, "nsbox session create: {}\n", InCliTerms(status.message()));
      exit_code.value = kExitNsboxFailure;
    };
    auto checked = CheckCreate(create_options, /*hold_image=*/true);
    if (!checked.ok()) return fail(checked.status());
    const std::string& name = create_options.name;
    std::string root = session::StateRoot();
    if (Status s = session::EnsureStateRoot(root); !s.ok()) return fail(s);
    auto live = session::ListSessions(root);
    for (const auto& s : live)
      if (!name.empty() && (s.name() == name || s.id() == name))
        return fail(Status::Error(fmt::format("--name '{}': a live session already has it ({})", name, s.id())));

    // 0 is no process: given, it would tie the session to nothing (the option's unset value).
    if (end_with_pid < 0 || (end_with_pid == 0 && create->count("--end-with-pid") > 0))
      return fail(Status::Error("--end-with-pid must be a process id"));
    // A process that is gone already would end the session as soon as it started: refused, not an id that is dead.
    if (end_with_pid > 0 && ::kill(end_with_pid, 0) != 0 && errno == ESRCH)
      return fail(Status::Error(fmt::format("--end-with-pid {}: no such process", end_with_pid)));
    session::SupervisorConfig config;
    config.id = session::NewSessionId();
    config.name = name;
    config.dir = root + "/" + config.id;
    config.policy = std::move(checked->policy);
    config.idle_timeout = checked->idle_timeout;
    config.owner_pid = end_with_pid;
    if (checked->network) config.network_allow = std::make_shared<const NetworkAllowSpec>(std::move(*checked->network));
    config.max_lifetime = checked->max_lifetime;
    auto driver = ReadFile(DataDir() + "/rootfs/repl/driver.py", 1 << 20);
    if (driver.ok())
      config.repl_driver_source = std::move(*driver);
    else
      config.repl_driver_error = driver.status().message();  // an unreadable one is not "not found"
    const SandboxOptions& o = create_options.sandbox;
    config.record = {
        {"owner_uid", ::geteuid()},
        {"rootfs", o.rootfs},
        {"rootfs_dir", config.policy.rootfs_dir()},
        {"network", o.network},
        {"limits",
         {{"memory", o.no_limits ? "none" : o.memory},
          {"memory_swap", o.memory_swap},
          {"pids", o.no_limits ? 0 : o.pids},
          {"cpus", o.no_limits ? 0.0 : o.cpus},
          {"tmpfs_size", o.tmpfs_size}}},
    };
    auto launched = session::LaunchSupervisor(std::move(config));
    if (!launched.ok()) return fail(launched.status());
    const nlohmann::json* record = &launched->record;
    const std::string id = (*record)["id"].get<std::string>();
    std::string line = id + "\n";
    if (create_json) {
      nlohmann::json out = {{"id", (*record)["id"]},
                            {"name", (*record)["name"]},
                            {"idle_timeout_ms", (*record)["idle_timeout_ms"]},
                            {"max_lifetime_ms", (*record)["max_lifetime_ms"]},
                            {"created_unix_ms", (*record)["created_unix_ms"]},
                            {"network", (*record)["network"]},
                            {"limits", (*record)["limits"]},
                            {"state_dir", root + "/" + (*record)["id"].get<std::string>()}};
      line = out.dump() + "\n";
    }
    // An id the caller never gets is a session no one would end before its idle time-out: unclaimed, it ends (also
    // when this command is killed before it got here).
    if (int err = WriteAll(1, line); err != 0) {
      launched->Disown(session::kRemoveDeadline);
      return fail(Status::Errno("writing the new session's id (the session was ended again)", err));
    }
    launched->Claim();
  });

  // ls
  auto* ls = session->add_subcommand("ls", "list live sessions");
  static bool ls_json = false;
  ls->add_flag("--json", ls_json, "print a JSON array");
  ls->callback([&exit_code] {
    std::string root = session::StateRoot();
    if (Status safe = session::CheckStateRootIfPresent(root); !safe.ok()) {
      fmt::print(stderr, "nsbox session ls: {}\n", safe.message());
      exit_code.value = kExitNsboxFailure;
      return;
    }
    // Asked all at once, each within its own deadline: one supervisor that does not answer (stopped, hung) delays
    // the listing by kInfoDeadline at most and hides no other session.
    auto sessions = session::ListSessions(root);
    std::vector<StatusOr<nlohmann::json>> infos(sessions.size(), Status::Error("not asked"));
    std::vector<session::RequestOutcome> outcomes(sessions.size());
    ForEachAtOnce(sessions.size(), [&](size_t k) {
      infos[k] = session::Request(sessions[k], {{"op", "info"}},
                                  {.deadline = session::kInfoDeadline, .outcome = &outcomes[k]});
    });
    nlohmann::json rows = nlohmann::json::array();
    for (size_t k = 0; k < sessions.size(); ++k) {
      const auto& s = sessions[k];
      if (!infos[k].ok()) {
        if (!outcomes[k].timed_out) continue;  // ended meanwhile
        // Listed from its record, marked: it is there (its processes, its limits) but does not answer.
        fmt::print(stderr, "nsbox session ls: {}\n", infos[k].status().message());
        const auto& r = s.json;
        rows.push_back({{"id", s.id()},
                        {"name", s.name()},
                        {"state", "not_answering"},
                        {"error", infos[k].status().message()},
                        {"idle_timeout_ms", r.value("idle_timeout_ms", int64_t{0})},
                        {"max_lifetime_ms", r.value("max_lifetime_ms", int64_t{0})},
                        {"created_unix_ms", r.value("created_unix_ms", int64_t{0})},
                        {"network", r.value("network", "")},
                        {"limits", r.value("limits", nlohmann::json::object())}});
        continue;
      }
      const auto& i = *infos[k];
      rows.push_back({{"id", s.id()},
                      {"name", s.name()},
                      {"state", "live"},
                      {"age_ms", i.value("age_ms", int64_t{0})},
                      {"idle_ms", i.value("idle_ms", int64_t{0})},
                      {"idle_timeout_ms", i.value("idle_timeout_ms", int64_t{0})},
                      {"max_lifetime_ms", i.value("max_lifetime_ms", int64_t{0})},
                      {"created_unix_ms", i.value("created_unix_ms", int64_t{0})},
                      {"network", i.value("network", "")},
                      {"limits", i.value("limits", nlohmann::json::object())},
                      {"memory_bytes", i.value("memory_bytes", uint64_t{0})},
                      {"running_requests", i.value("running_requests", 0)}});
    }
    std::string text;
    if (ls_json) {
      text = rows.dump() + "\n";
    } else {
      text = fmt::format("{:<14} {:<16} {:>7} {:>7} {:>9}  {}\n", "ID", "NAME", "AGE", "IDLE", "MEMORY", "LIMITS");
      for (const auto& r : rows) {
        const auto& l = r["limits"];
        if (r["state"] == "not_answering") {
          text += fmt::format("{:<14} {:<16} {:>7} {:>7} {:>9}  (not answering: see the error above)\n",
                              r["id"].get<std::string>(), r["name"].get<std::string>(), "?", "?", "?");
          continue;
        }
        text += fmt::format(
            "{:<14} {:<16} {:>7} {:>7} {:>9}  memory={} pids={} cpus={} network={} idle-timeout={}\n",
            r["id"].get<std::string>(), r["name"].get<std::string>(), FormatAge(r["age_ms"].get<int64_t>()),
            FormatAge(r["idle_ms"].get<int64_t>()), FormatSize(r["memory_bytes"].get<uint64_t>()),
            l.value("memory", ""), l.value("pids", 0), l.value("cpus", 0.0), r["network"].get<std::string>(),
            FormatAge(r["idle_timeout_ms"].get<int64_t>()));
      }
    }
    if (int err = WriteAll(1, text); err != 0) {
      fmt::print(stderr, "nsbox session ls: writing the list: {} ({})\n", std::strerror(err), ErrnoName(err));
      exit_code.value = kExitNsboxFailure;
    }
  });

  // rm
  auto* rm = session->add_subcommand("rm", "end sessions: every process, mount and state file goes");
  static std::vector<std::string> refs;
  static bool all = false;
  rm->add_option("sessions", refs, "session ids or names");
  rm->add_flag("--all", all, "end every live session of yours");
  rm->callback([&exit_code] {
    auto fail = [&](const Status& status) {
      fmt::print(stderr, "nsbox session rm: {}\n", status.message());
      exit_code.value = kExitNsboxFailure;
    };
    if (all == !refs.empty()) return fail(Status::Error("give session ids or names, or --all (not both)"));
    std::string root = session::StateRoot();
    std::vector<session::SessionRecord> targets;
    if (all) {
      if (Status safe = session::CheckStateRootIfPresent(root); !safe.ok()) return fail(safe);
      targets = session::ListSessions(root);
    } else {
      // Every name must resolve before anything ends: a typo disturbs nothing.
      // One session named twice (by id and by name, say) is ended once.
      std::set<std::string> seen;
      for (const auto& ref : refs) {
        auto s = session::FindSession(root, ref);
        if (!s.ok()) return fail(s.status());
        if (seen.insert(s->id()).second) targets.push_back(std::move(*s));
      }
    }
    // All at once, each within its own deadline; a session whose supervisor does not answer (stopped, hung, died
    // on the way) is ended here instead: its verified supervisor killed, its state removed.
    std::vector<Status> ended(targets.size());
    std::vector<std::string> notes(targets.size());
    ForEachAtOnce(targets.size(), [&](size_t k) {
      session::RequestOutcome outcome;
      auto answer =
          session::Request(targets[k], {{"op", "rm"}}, {.deadline = session::kRemoveDeadline, .outcome = &outcome});
      if (answer.ok()) return;
      if (outcome.answered) {  // a refusal: the supervisor is there and said no
        ended[k] = answer.status();
        return;
      }
      // Timed out: it does not answer, kill it now. Otherwise (no socket, a refused or closed connection) it may be
      // ending on its own (idle time-out, another rm): it gets the time its own shutdown takes first.
      Status forced = session::EndUnresponsiveSession(
          targets[k], outcome.timed_out ? std::chrono::milliseconds(0) : session::kRemoveDeadline);
      if (!forced.ok()) {
        ended[k] = forced.Wrap(answer.status().message());
        return;
      }
      if (outcome.timed_out) notes[k] = answer.status().message() + ": its supervisor was killed and its state removed";
    });
    for (size_t k = 0; k < targets.size(); ++k) {
      if (!notes[k].empty()) fmt::print(stderr, "nsbox session rm: {}\n", notes[k]);
      if (!ended[k].ok()) fail(ended[k]);
    }
  });
}

}  // namespace nsbox::cli
