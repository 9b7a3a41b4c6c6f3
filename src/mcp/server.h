// McpServer: the Model Context Protocol over stdio (JSON-RPC 2.0, one message per line) serving nsbox's code tools.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/runtime/sandbox_runtime.h"

namespace nsbox::mcp {

struct ServerOptions {
  std::chrono::milliseconds default_timeout{30'000};
  std::chrono::milliseconds max_timeout{600'000};
  uint64_t output_limit_bytes = 1 << 20;
  size_t result_budget_bytes = 20'000;  // text shown to the model per stream, head and tail
  size_t max_message_bytes = 32 << 20;  // a longer line is answered with a parse error and skipped
};

// Protocol versions this server speaks, newest first.
const std::vector<std::string>& SupportedProtocolVersions();

class McpServer {
 public:
  using RuntimeFactory = std::function<StatusOr<std::unique_ptr<runtime::SandboxRuntime>>()>;
  McpServer(RuntimeFactory factory, ServerOptions options);
  ~McpServer();
  // Serves until end of input on `in_fd`; every message written to `out_fd`. Returns when all calls are done.
  void Serve(int in_fd, int out_fd);
  // Handles one message synchronously and returns the responses it produced (for tests); tools run inline.
  std::vector<nlohmann::json> HandleForTest(const std::string& line);
  // Ends the runtime's sandbox (safe to call more than once, from a signal-watching thread).
  void Shutdown();

 private:
  struct Call {
    std::atomic<bool> cancelled{false};
  };
  void HandleLine(const std::string& line, bool inline_tools);
  void HandleRequest(const nlohmann::json& msg, bool inline_tools);
  void HandleNotification(const nlohmann::json& msg);
  nlohmann::json CallTool(const std::string& name, const nlohmann::json& args, const std::atomic<bool>* cancel);
  StatusOr<runtime::SandboxRuntime*> Runtime();
  void Send(const nlohmann::json& msg);
  void SendError(const nlohmann::json& id, int code, const std::string& message);

  RuntimeFactory factory_;
  ServerOptions options_;
  int out_fd_ = 1;
  std::mutex out_mutex_;
  std::vector<nlohmann::json>* captured_ = nullptr;  // for HandleForTest
  std::mutex runtime_mutex_;
  std::unique_ptr<runtime::SandboxRuntime> runtime_;
  bool initialized_ = false;
  std::mutex calls_mutex_;
  std::map<std::string, std::shared_ptr<Call>> calls_;  // by request id (dumped JSON)
  std::vector<std::thread> workers_;
};

}  // namespace nsbox::mcp
