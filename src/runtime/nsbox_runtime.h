// NsboxRuntime: the default runtime; one nsbox session per conversation, driven through the nsbox CLI as a subprocess.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "src/runtime/sandbox_runtime.h"

namespace nsbox::runtime {

struct NsboxRuntimeOptions {
  // The nsbox binary; empty: $NSBOX_BIN when set, else this program (/proc/self/exe).
  std::string nsbox_bin;
  // Extra isolation/limit options given to `session create` (and to `run` in one-shot mode).
  std::vector<std::string> sandbox_args;
  // Passed to `session create --max-lifetime`: the session ends by itself even if this process is
  // killed without a chance to remove it.
  std::optional<std::chrono::milliseconds> max_lifetime;
  // Time nsbox gets beyond the sandbox's own wall limit to set up and report before it is killed.
  std::chrono::milliseconds setup_grace{15'000};
  // Progress and fallback notes (for --verbose); may be empty.
  std::function<void(const std::string&)> log;
};

// The first execute() creates the session (`nsbox session create --json`); each call runs
// `nsbox exec ID --json --timeout … --output-limit … --lang … --file -` with the code on stdin;
// close() (also the destructor) runs `nsbox session rm ID`. A session that ended by itself (its idle time-out or
// lifetime passed, or someone removed it) is noticed when exec finds no such session, before anything ran: a fresh
// session is created, the call runs there, and the result's "session_restarted" says that earlier files and state
// are gone, and why. Calls may come from several threads at
// once (the MCP server), and close() from a signal-watching thread. When this nsbox has no sessions
// (`session create` fails as an unknown subcommand) every call is a one-shot `nsbox run --json`.
class NsboxRuntime : public SandboxRuntime {
 public:
  explicit NsboxRuntime(NsboxRuntimeOptions options = {});
  ~NsboxRuntime() override { close(); }
  NsboxRuntime(const NsboxRuntime&) = delete;
  NsboxRuntime& operator=(const NsboxRuntime&) = delete;

  std::string name() const override { return "nsbox"; }
  StatusOr<ExecutionResult> execute(const std::string& language, const std::string& code,
                                    const ExecuteOptions& options) override;
  void close() override;

  const std::string& nsbox_bin() const { return options_.nsbox_bin; }
  std::string session_id() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return session_id_;
  }
  bool one_shot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return mode_ == Mode::kOneShot;
  }

  // The argv of one execution (pure, for tests): session exec when session_id is non-empty, else run. `stream`
  // (session exec only): output chunks as JSON lines before the result (exec --stream). `compile_timeout`: the
  // compile step's time-out, when it is not the language table's.
  static std::vector<std::string> ExecArgv(const std::string& nsbox_bin, const std::string& session_id,
                                           const std::vector<std::string>& sandbox_args, const std::string& language,
                                           std::chrono::milliseconds timeout, uint64_t output_limit_bytes, bool repl,
                                           bool stream = false,
                                           std::optional<std::chrono::milliseconds> compile_timeout = std::nullopt);
  // Whether `session create`'s error output says that this nsbox has no such subcommand.
  static bool LooksLikeUnknownSubcommand(const std::string& stderr_text);

 private:
  enum class Mode { kUnknown, kSession, kOneShot };
  StatusOr<ExecutionResult> ExecuteOnce(const std::string& language, const std::string& code,
                                        const ExecuteOptions& options);
  Status CreateSession(const ExecuteOptions& options);  // with mutex_ held
  // Why session `id` (gone now) ended, from what create said of it and when it was last used; with mutex_ held.
  std::string WhySessionEnded(const std::string& id) const;
  void Log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  NsboxRuntimeOptions options_;
  mutable std::mutex mutex_;  // guards mode_ and session_id_; held while the session is created
  Mode mode_ = Mode::kUnknown;
  std::string session_id_;
  // From `session create --json`: when the session ends by itself. 0 when unknown.
  int64_t created_unix_ms_ = 0, idle_timeout_ms_ = 0, max_lifetime_ms_ = 0;
  std::chrono::steady_clock::time_point last_used_{};  // the end of the last exec in the session
};

}  // namespace nsbox::runtime
