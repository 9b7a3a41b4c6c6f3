// McpServer: the Model Context Protocol over stdio (JSON-RPC 2.0, one message per line) serving nsbox's code tools.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/runtime/sandbox_runtime.h"

namespace nsbox::mcp {

struct ServerOptions {
  // The operator's settings (nsbox mcp --timeout, --max-timeout, --output-limit): a model's timeout_seconds is cut
  // to max_timeout, and default_timeout is at most max_timeout.
  std::chrono::milliseconds default_timeout{30'000};
  std::chrono::milliseconds max_timeout{600'000};
  uint64_t output_limit_bytes = 1 << 20;  // bytes the sandbox keeps per stream
  size_t result_budget_bytes = 20'000;  // text shown to the model per stream, head and tail
  size_t max_message_bytes = 32 << 20;  // a longer line is answered with a parse error and skipped
  bool open_world = false;              // the sandbox has a network: the code tools' openWorldHint
};

// Protocol versions this server speaks, newest first.
const std::vector<std::string>& SupportedProtocolVersions();

class McpServer {
 public:
  using RuntimeFactory = std::function<StatusOr<std::unique_ptr<runtime::SandboxRuntime>>()>;
  McpServer(RuntimeFactory factory, ServerOptions options);
  ~McpServer();
  // Serves until end of input on `in_fd`, every message written to `out_fd`. End of input is a half-close: calls in
  // flight still run to their end and are answered. A failed write (the client is gone) cancels them instead.
  // Returns when all calls are done.
  void Serve(int in_fd, int out_fd);
  // Handles one line synchronously and returns the response it produced, if any (for tests); tools run inline.
  std::vector<nlohmann::json> HandleForTest(const std::string& line);
  // Ends the runtime's sandbox (safe to call more than once, from a signal-watching thread).
  void Shutdown();

 private:
  struct Call {
    std::atomic<bool> cancelled{false};
  };
  // Each returns the response to send, if any. A tools/call that does not run inline answers later, itself, by Send().
  // A tools/call that is deferred: registered (so that it can be cancelled), to be run by whoever holds it.
  using DeferredCall = std::function<std::optional<nlohmann::json>()>;
  std::optional<nlohmann::json> HandleLine(const std::string& line, bool inline_tools);
  // With `defer`, a tools/call is not run but handed back in *defer.
  std::optional<nlohmann::json> HandleMessage(const nlohmann::json& msg, bool inline_tools,
                                              DeferredCall* defer = nullptr);
  std::optional<nlohmann::json> HandleBatch(const nlohmann::json& batch, bool inline_tools);
  std::optional<nlohmann::json> HandleRequest(const nlohmann::json& msg, bool inline_tools, DeferredCall* defer);
  // Runs `work` on a worker thread; false when no thread could be started.
  bool StartWorker(std::function<void()> work, std::string* error);
  void HandleNotification(const nlohmann::json& msg);
  // progress_token: the call's params._meta.progressToken (null: none), for notifications/progress of its output.
  nlohmann::json CallTool(const std::string& name, const nlohmann::json& args, const std::atomic<bool>* cancel,
                          const nlohmann::json& progress_token);
  StatusOr<runtime::SandboxRuntime*> Runtime();
  // Writes one message to the output; when that fails, the client is gone and every call still running is cancelled.
  void Send(const nlohmann::json& msg);
  // The client is gone: cancels the calls running, and any that start later.
  void CancelAll();

  RuntimeFactory factory_;
  ServerOptions options_;
  int out_fd_ = 1;
  std::mutex out_mutex_;
  std::mutex runtime_mutex_;
  std::unique_ptr<runtime::SandboxRuntime> runtime_;
  bool initialized_ = false;
  // False once initialize settled on 2025-06-18 or later (before any initialize: allowed, as older clients send them).
  std::atomic<bool> batches_allowed_{true};
  std::mutex calls_mutex_;
  std::map<std::string, std::shared_ptr<Call>> calls_;  // by request id (dumped JSON)
  bool output_broken_ = false;  // under calls_mutex_: a write failed, so new calls start cancelled
  // Tool calls' threads, each with a flag it sets when done: finished ones are joined as new calls come, so a long
  // connection does not keep a thread (and its stack) per call it ever served.
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void JoinWorkers(bool finished_only);
  std::vector<Worker> workers_;
};

}  // namespace nsbox::mcp
