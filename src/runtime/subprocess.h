// Subprocess: runs one host program in its own session with stdin data, head-and-tail output capture, a deadline and
// cancellation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox::runtime {

struct SubprocessSpec {
  std::vector<std::string> argv;  // argv[0] is an absolute path
  std::vector<std::string> env;   // "KEY=VALUE": the complete environment
  std::string cwd;                // empty: the caller's
  std::optional<std::string> stdin_data;  // written then closed; nullopt: /dev/null
  uint64_t output_limit_bytes = 1 << 20;  // kept per stream
  // When it passes, the process group is killed and deadline_passed is reported.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  const std::atomic<bool>* cancel = nullptr;
  // 0: SIGKILL at once. Otherwise SIGTERM first, and SIGKILL after this grace (lets a child clean up).
  std::chrono::milliseconds term_grace{0};
  // When set: each whole line of stdout (without its newline) goes here as it comes, on the calling thread, while
  // the program runs. A line it returns false for is captured as without it; a line longer than output_limit_bytes
  // is captured without being shown to it, and so is a last line without a newline.
  std::function<bool(std::string_view line)> on_stdout_line;
};

struct SubprocessOutcome {
  bool exited = false;  // exited normally (exit_code valid)
  int exit_code = -1;
  int signal = 0;
  bool deadline_passed = false;
  bool cancelled = false;
  std::string stdout_data;
  std::string stderr_data;
  uint64_t stdout_bytes = 0;
  uint64_t stderr_bytes = 0;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  int64_t wall_ms = 0;
  int64_t cpu_ms = 0;
  uint64_t peak_rss_bytes = 0;
};

// Runs the program in a new session (so its process group can be killed whole and a terminal's
// Ctrl-C reaches only us), waits for it, then kills what is left of its process group. A failure
// to start it is a Status; everything after that is in the outcome.
StatusOr<SubprocessOutcome> RunSubprocess(const SubprocessSpec& spec);

// The environment of this process as "KEY=VALUE" strings (for children that should inherit it).
std::vector<std::string> InheritedEnvironment();

// Finds an executable by name on PATH (or checks an absolute path); empty when absent.
std::string FindExecutable(const std::string& name);

}  // namespace nsbox::runtime
