// SandboxRuntime: the interface the agent loop and the MCP server use to run code; nsbox, local and docker implement
// it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "sandbox/base/status.h"
#include "sandbox/result.h"

namespace nsbox::runtime {

struct ExecuteOptions {
  std::chrono::milliseconds timeout{30'000};   // the sandbox's own wall limit for this call
  // The most a compiled language's compile step may take (an operator's cap); unset: the language table's time-out.
  std::optional<std::chrono::milliseconds> compile_timeout_cap;
  uint64_t output_limit_bytes = 1 << 20;
  // The caller's deadline: execution is cut short (and reported as a time-out) when it passes.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Set from another thread to cancel a running execution (reported as status "timeout", reason "cancelled").
  const std::atomic<bool>* cancel = nullptr;
  bool repl = false;  // python only: run in the persistent interpreter, where the runtime has one
  // When set: the output as it comes (stream 1 stdout, 2 stderr), chunk by chunk, called on the executing thread while
  // the program runs; the result still holds the whole output, clipped as always. Runtimes that cannot stream (and
  // REPL cells) leave it uncalled.
  std::function<void(int stream, std::string_view text)> on_output;
};

// The same record nsbox's JSON result holds (status, exit code, output, truncation, timing).
using ExecutionResult = nsbox::Result;

class SandboxRuntime {
 public:
  virtual ~SandboxRuntime() = default;
  virtual std::string name() const = 0;
  // Blocks until the code has run. A failure to run at all is a Status; the program's own failure is a result.
  virtual StatusOr<ExecutionResult> execute(const std::string& language, const std::string& code,
                                            const ExecuteOptions& options) = 0;
  // Ends the runtime's sandbox (session), if any. Also called by the destructor.
  virtual void close() {}
};

}  // namespace nsbox::runtime
