// LocalRuntime: runs code with the host's own interpreters, WITHOUT ANY ISOLATION (trusted code in development only).
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "src/runtime/sandbox_runtime.h"

namespace nsbox::runtime {

// Each call runs the interpreter directly as this user, in a scratch directory kept for the
// conversation (so files persist between calls, like a session) and removed by close().
// Time-out and cancellation kill the interpreter's whole process group; output keeps head and tail.
// Calls may run concurrently: each writes its own script file.
class LocalRuntime : public SandboxRuntime {
 public:
  LocalRuntime() = default;
  ~LocalRuntime() override { close(); }
  LocalRuntime(const LocalRuntime&) = delete;
  LocalRuntime& operator=(const LocalRuntime&) = delete;

  std::string name() const override { return "local"; }
  StatusOr<ExecutionResult> execute(const std::string& language, const std::string& code,
                                    const ExecuteOptions& options) override;
  void close() override;

  // The interpreter for a language name (python, bash, sh, node and their usual aliases), or an error.
  struct Interpreter {
    std::string path;
    std::string extension;  // of the script file in the scratch directory
  };
  static StatusOr<Interpreter> InterpreterFor(const std::string& language);

 private:
  std::mutex mutex_;  // guards workdir_
  std::string workdir_;
  std::atomic<int> scripts_{0};
};

}  // namespace nsbox::runtime
