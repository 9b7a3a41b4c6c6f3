// Executor: what to run inside the sandbox (argv, environment, stdin, code, output and time limits).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nsbox {

struct Executor {
  std::vector<std::string> argv;          // argv[0] is an absolute path inside the sandbox, or a name found on PATH
  std::map<std::string, std::string> env; // the complete environment (nothing is inherited)
  std::string cwd = "/workspace";
  // The program's umask: the caller's (nsbox run's own; the exec client's in a session), so that files it makes in a
  // --workspace or --bind directory get the modes the caller's own programs would give them.
  mode_t umask = 022;
  // stdin: -1 means /dev/null; otherwise a host fd passed in (not closed by the sandbox).
  int stdin_fd = -1;
  uint64_t output_limit_bytes = 1 << 20;  // bytes kept per stream (head and tail), at most kMaxOutputLimitBytes
  std::chrono::milliseconds wall_timeout{30'000};
  // A session exec's own memory limit, in a group of its own below the sandbox's (which still holds for it too): a
  // compiled language's compile step and its program each get theirs. 0: the sandbox's limit alone.
  uint64_t memory_max_bytes = 0;
  // When set, the program's code: it is sealed in a memfd (no file in the sandbox, so nothing another run or a
  // session's earlier exec could change), and every argv entry equal to code_path is replaced by "/dev/fd/N", from
  // which the interpreter reads it.
  std::string code_path;
  std::string code;
  // Non-empty: the words by which the program's runtime says, on stderr, that it stopped at the heap limit it was given
  // (V8's "JavaScript heap out of memory" under --max-old-space-size, Java's "java.lang.OutOfMemoryError: Java heap
  // space" under -Xmx), where the caller sized that heap from the memory limit: a program that fails with them in
  // its stderr ran out of memory, and its verdict is oom, as if the OOM killer had ended it.
  std::string heap_exhausted_text;
};

// The largest output_limit_bytes: nsbox holds what it keeps of both streams in its own memory, outside every cgroup
// of the sandbox, and copies it again into the result (a JSON string): a limit without a cap would let one run take
// gigabytes of the host's memory. Larger outputs belong in files (--workspace).
constexpr uint64_t kMaxOutputLimitBytes = 64ull << 20;
// "" when the executor's output limit is within kMaxOutputLimitBytes, else the one-line reason it is refused.
std::string CheckOutputLimit(uint64_t bytes);
// "" when the executor can be run as given, else the one-line reason Run() refuses it: an empty argv, a NUL byte in
// an argument or in the environment (a C string ends there: the program would get less than was asked), an
// environment name that is empty or holds '=', a stdin_fd that is not open, or CheckOutputLimit's reason.
std::string CheckExecutor(const Executor& executor);

// The small clean environment a sandbox starts from; callers add --env entries on top.
std::map<std::string, std::string> DefaultSandboxEnv();

}  // namespace nsbox
