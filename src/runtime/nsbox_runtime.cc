// NsboxRuntime: session create/exec/rm (or one-shot run) as nsbox subprocesses, and their JSON results read back.
#include "src/runtime/nsbox_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sandbox/result_json.h"
#include "src/cli/languages.h"
#include "src/runtime/subprocess.h"

namespace nsbox::runtime {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::string ResolveSelf() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buf, static_cast<size_t>(n));
}

std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 300 ? line.substr(0, 300) + "…" : line;
}

}  // namespace

NsboxRuntime::NsboxRuntime(NsboxRuntimeOptions options) : options_(std::move(options)) {
  if (options_.nsbox_bin.empty()) {
    const char* env = getenv("NSBOX_BIN");
    options_.nsbox_bin = env && *env ? env : ResolveSelf();
  }
}

std::vector<std::string> NsboxRuntime::ExecArgv(const std::string& nsbox_bin, const std::string& session_id,
                                                const std::vector<std::string>& sandbox_args,
                                                const std::string& language, milliseconds timeout,
                                                uint64_t output_limit_bytes, bool repl, bool stream,
                                                std::optional<milliseconds> compile_timeout) {
  std::vector<std::string> argv{nsbox_bin};
  if (!session_id.empty()) {
    argv.insert(argv.end(), {"exec", session_id});
  } else {
    argv.push_back("run");
    argv.insert(argv.end(), sandbox_args.begin(), sandbox_args.end());
  }
  argv.insert(argv.end(), {"--json", "--timeout", fmt::format("{}ms", std::max<int64_t>(timeout.count(), 1)),
                           "--output-limit", std::to_string(output_limit_bytes), "--lang", language, "--file", "-"});
  if (repl && !session_id.empty()) argv.push_back("--repl");
  if (stream && !repl && !session_id.empty()) argv.push_back("--stream");
  if (compile_timeout)
    argv.insert(argv.end(), {"--compile-timeout", fmt::format("{}ms", std::max<int64_t>(compile_timeout->count(), 1))});
  return argv;
}

bool NsboxRuntime::LooksLikeUnknownSubcommand(const std::string& stderr_text) {
  std::string lower = stderr_text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  // CLI11 says "A subcommand is required" or "The following argument was not expected: session"; other parsers say
  // "unknown/invalid command". A message that names an unexpected *option* ("not expected: --bogus") is a bad option
  // of a binary that has sessions, not a binary without them.
  for (const char* phrase : {"a subcommand is required", "unknown subcommand", "unknown command", "invalid subcommand",
                             "invalid command"})
    if (lower.find(phrase) != std::string::npos) return true;
  bool names_session = false;  // the word itself, not an option such as --session-dir
  std::string word;
  for (char c : lower + " ") {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
      word += c;
    } else {
      names_session = names_session || word == "session";
      word.clear();
    }
  }
  for (const char* phrase : {"not expected", "unrecognized", "extraneous"})
    if (names_session && lower.find(phrase) != std::string::npos) return true;
  return false;
}

Status NsboxRuntime::CreateSession(const ExecuteOptions& options) {
  SubprocessSpec spec;
  // The session ends with this process, however it ends (SIGKILL included): nothing outlives the conversation.
  spec.argv = {options_.nsbox_bin, "session", "create", "--json", "--end-with-pid", std::to_string(::getpid())};
  spec.argv.insert(spec.argv.end(), options_.sandbox_args.begin(), options_.sandbox_args.end());
  if (options_.max_lifetime)
    spec.argv.insert(spec.argv.end(), {"--max-lifetime", fmt::format("{}ms", options_.max_lifetime->count())});
  spec.env = InheritedEnvironment();
  spec.deadline = Clock::now() + options_.setup_grace;
  if (options.deadline) spec.deadline = std::min(*spec.deadline, *options.deadline);
  spec.cancel = options.cancel;
  spec.term_grace = milliseconds(2000);
  auto outcome = RunSubprocess(spec);
  if (!outcome.ok()) return outcome.status().Wrap("starting nsbox session create");
  if (outcome->cancelled) return Status::Error("nsbox session create: cancelled");
  if (outcome->deadline_passed) return Status::Error("nsbox session create: did not answer in time");
  if (!outcome->exited || outcome->exit_code != 0) {
    if (outcome->exited && LooksLikeUnknownSubcommand(outcome->stderr_data)) {
      mode_ = Mode::kOneShot;
      Log(fmt::format("nsbox runtime: {} has no sessions ({}); each tool call runs in a fresh `nsbox run` sandbox",
                      options_.nsbox_bin, FirstLine(outcome->stderr_data)));
      return OkStatus();
    }
    return Status::Error(fmt::format("nsbox session create failed (exit {}): {}", outcome->exit_code,
                                     FirstLine(outcome->stderr_data)));
  }
  auto json = nlohmann::json::parse(outcome->stdout_data, nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("id") || !json["id"].is_string())
    return Status::Error(fmt::format("nsbox session create --json printed no {{\"id\": …}} object: {}",
                                     FirstLine(outcome->stdout_data)));
  session_id_ = json["id"].get<std::string>();
  created_unix_ms_ = json.value("created_unix_ms", int64_t{0});
  idle_timeout_ms_ = json.value("idle_timeout_ms", int64_t{0});
  max_lifetime_ms_ = json.value("max_lifetime_ms", int64_t{0});
  last_used_ = Clock::now();
  mode_ = Mode::kSession;
  Log(fmt::format("nsbox runtime: session {} created", session_id_));
  return OkStatus();
}

std::string NsboxRuntime::WhySessionEnded(const std::string& id) const {
  auto seconds = [](int64_t ms) { return fmt::format("{:g} s", static_cast<double>(ms) / 1000); };
  const int64_t now_unix_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const int64_t idle_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - last_used_).count();
  std::string why;
  if (max_lifetime_ms_ > 0 && now_unix_ms - created_unix_ms_ >= max_lifetime_ms_)
    why = fmt::format("it reached its maximum lifetime of {}", seconds(max_lifetime_ms_));
  else if (idle_timeout_ms_ > 0 && idle_ms >= idle_timeout_ms_)
    why = fmt::format("it was idle for {}, longer than its idle time-out of {}", seconds(idle_ms),
                      seconds(idle_timeout_ms_));
  else
    why = "it was ended from outside (nsbox session rm, or its supervisor died)";
  return fmt::format(
      "the sandbox session {} had ended ({}); this call ran in a fresh sandbox, so files, installed "
      "packages and Python state from earlier calls are gone",
      id, why);
}

StatusOr<ExecutionResult> NsboxRuntime::execute(const std::string& language, const std::string& code,
                                                const ExecuteOptions& options) {
  std::string restarted;  // non-empty: the session was gone, and this call runs in a new one
  for (int attempt = 0;; ++attempt) {
    auto result = ExecuteOnce(language, code, options);
    if (!result.ok()) return result;
    std::string gone_id;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const nlohmann::json not_found = GetExtra(*result, "session_not_found");  // nsbox exec --json's
      const bool session_gone =
          attempt == 0 && mode_ == Mode::kSession && result->status == RunStatus::kSetupError && not_found.is_string();
      if (!session_gone) {
        last_used_ = Clock::now();
        if (!restarted.empty()) SetExtra(*result, "session_restarted", restarted);
        return result;
      }
      // exec found no session, so nothing ran: the call is safe to run again. Another call may have made the new
      // session already; else the next ExecuteOnce makes it.
      gone_id = not_found.get<std::string>();
      if (gone_id == session_id_) {
        restarted = WhySessionEnded(session_id_);
        session_id_.clear();
        mode_ = Mode::kUnknown;
      } else {
        restarted = fmt::format(
            "the sandbox session {} had ended; this call ran in a fresh sandbox, so files, "
            "installed packages and Python state from earlier calls are gone",
            gone_id);
      }
    }
    Log(fmt::format("nsbox runtime: {}", restarted));
  }
}

StatusOr<ExecutionResult> NsboxRuntime::ExecuteOnce(const std::string& language, const std::string& code,
                                                    const ExecuteOptions& options) {
  Mode mode;
  std::string session_id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mode_ == Mode::kUnknown) NSBOX_RETURN_IF_ERROR(CreateSession(options));
    mode = mode_;
    session_id = session_id_;
  }

  // The sandbox's own wall limit is the tighter of the call's limit and the caller's deadline, so
  // that the sandbox itself reports the time-out (with the output so far) rather than being killed.
  Clock::time_point now = Clock::now();
  milliseconds sandbox_timeout = options.timeout;
  bool caller_deadline_tighter = false;
  if (options.deadline) {
    auto left = std::chrono::duration_cast<milliseconds>(*options.deadline - now);
    if (left < sandbox_timeout) {
      sandbox_timeout = std::max(left, milliseconds(1));
      caller_deadline_tighter = true;
    }
  }
  // A compiled language builds first, under the table's compile time-out or the caller's cap if that is shorter:
  // nsbox may take that as well.
  milliseconds compile_timeout{0};
  std::optional<milliseconds> capped_compile;
  if (auto lang = cli::LookupLanguage(language); lang.ok() && lang->compile) {
    compile_timeout = lang->compile->timeout;
    if (options.compile_timeout_cap && *options.compile_timeout_cap < compile_timeout)
      capped_compile = compile_timeout = *options.compile_timeout_cap;
  }
  SubprocessSpec spec;
  const bool stream = options.on_output && mode == Mode::kSession && !options.repl;
  spec.argv = ExecArgv(options_.nsbox_bin, mode == Mode::kSession ? session_id : "", options_.sandbox_args, language,
                       sandbox_timeout, options.output_limit_bytes, options.repl, stream, capped_compile);
  if (stream) {
    // exec --json --stream: {"type":"stdout"|"stderr","data":…} lines (type first) before the result line.
    spec.on_stdout_line = [&options](std::string_view line) {
      if (!line.starts_with(R"({"type":)")) return false;
      auto chunk = nlohmann::json::parse(line, nullptr, false);
      if (chunk.is_discarded() || !chunk.is_object() || !chunk.contains("data") || !chunk["data"].is_string())
        return false;
      const std::string type = chunk["type"].is_string() ? chunk["type"].get<std::string>() : "";
      if (type != "stdout" && type != "stderr") return false;
      options.on_output(type == "stderr" ? 2 : 1, chunk["data"].get<std::string>());
      return true;
    };
  }
  spec.env = InheritedEnvironment();
  spec.stdin_data = code;
  // The JSON result holds both streams, escaped: leave room for it.
  spec.output_limit_bytes = 8 * options.output_limit_bytes + (4 << 20);
  spec.deadline = now + compile_timeout + sandbox_timeout + options_.setup_grace;
  // The caller's own deadline (the agent's --timeout) holds over the compile step too.
  if (options.deadline) spec.deadline = std::min(*spec.deadline, *options.deadline + options_.setup_grace);
  spec.cancel = options.cancel;
  spec.term_grace = milliseconds(2000);
  auto outcome = RunSubprocess(spec);
  if (!outcome.ok()) return outcome.status().Wrap("starting nsbox");

  ExecutionResult result;
  if (outcome->cancelled || outcome->deadline_passed) {
    result.status = RunStatus::kTimeout;
    result.reason = outcome->cancelled ? "cancelled" : "nsbox did not report within its time limit and was killed";
    result.wall_ms = outcome->wall_ms;
    return result;
  }
  auto json = nlohmann::json::parse(outcome->stdout_data, nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("status")) {
    return Status::Error(
        fmt::format("{} returned no JSON result (exit {}): {}", spec.argv[1],
                    outcome->exited ? outcome->exit_code : 128 + outcome->signal,
                    FirstLine(outcome->stderr_data.empty() ? outcome->stdout_data : outcome->stderr_data)));
  }
  result = ResultFromJson(json);
  if (caller_deadline_tighter && result.status == RunStatus::kTimeout)
    result.reason += " (the caller's deadline was the tighter limit)";
  SetExtra(result, "runtime", mode == Mode::kSession ? "nsbox-session" : "nsbox-run");
  return result;
}

void NsboxRuntime::close() {
  std::string session_id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    session_id.swap(session_id_);
    mode_ = Mode::kUnknown;
  }
  if (session_id.empty()) return;
  SubprocessSpec spec;
  spec.argv = {options_.nsbox_bin, "session", "rm", session_id};
  spec.env = InheritedEnvironment();
  spec.deadline = Clock::now() + milliseconds(20'000);
  auto outcome = RunSubprocess(spec);
  if (!outcome.ok() || !outcome->exited || outcome->exit_code != 0)
    Log(fmt::format("nsbox runtime: session rm {} failed: {}", session_id,
                    outcome.ok() ? FirstLine(outcome->stderr_data) : outcome.status().message()));
  else
    Log(fmt::format("nsbox runtime: session {} removed", session_id));
}

}  // namespace nsbox::runtime
