// The Python REPL's wire protocol (one JSON request and one JSON answer per cell on fd 3), the cell's result built
// from the engine's ResidentTurn, and the changed-files report of an exec or a cell.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sandbox/result.h"
#include "sandbox/session.h"
#include "sandbox/workspace_snapshot.h"

namespace nsbox::session {

// The most one answer of the REPL driver takes on its channel: the driver cuts a value and an exception to 64 Ki
// characters and a traceback to 256 Ki, at most 12 bytes each once JSON-escaped. More is a cell writing to the
// channel itself, and is not buffered.
inline constexpr size_t kMaxReplyBytes = 8 << 20;

// The request line for cell `id`, with the environment the driver sets in os.environ before the cell.
std::string ReplRequest(uint64_t id, const std::string& code, const std::map<std::string, std::string>& env);
// Whether `line` is the driver's answer to cell `id`: one JSON object with that id, and parts of the driver's types.
bool ParseReplReply(std::string_view line, uint64_t id, nlohmann::json* reply);
// ResidentTurnOptions::frame for cell `id`: complete at the first newline if it ends the bytes and parses as the
// answer; out of step if anything else is there, or more than kMaxReplyBytes without a newline.
int FrameReplReply(std::string_view bytes, uint64_t id, std::string* why);

// Runs one cell in the session's interpreter. extra["repl"] = {value, exception, traceback, state_lost,
// interpreter_killed}. `driver_argv`: the interpreter with the driver (e.g. python3 -u -c <driver source>).
Result RunCell(SessionSandbox& session, const std::string& code, const ResidentOptions& driver,
               const ResidentTurnOptions& limits, int cancel_fd);

// The most of an answer the changed-files list takes, as JSON (the exec answer's allowance is 64 MiB beside output).
inline constexpr size_t kMaxChangedFilesBytes = 8 << 20;

// The memory that the workspace snapshots of all the calls running at once in a process may hold together. Each is
// bounded (kMaxSnapshotBytes), but a session runs up to 64 execs at once, in its supervisor, outside the sandbox's
// limits: past the budget, a call's snapshot is cut short and its list reported truncated.
class SnapshotBudget {
 public:
  explicit SnapshotBudget(size_t total_bytes) : total_(total_bytes) {}
  size_t Reserve(size_t wanted);  // up to `wanted` bytes, as many as are left (0: none)
  void Release(size_t bytes);
  size_t held() const { return held_.load(); }

 private:
  const size_t total_;
  std::atomic<size_t> held_{0};
};
// This process's: 64 MiB.
SnapshotBudget& ProcessSnapshotBudget();

// Snapshots /workspace before a call and reports, after it, the files it created or changed as
// extra["changed_files"] ([{path, size}], paths as the sandbox sees them).
class ChangedFilesReport {
 public:
  explicit ChangedFilesReport(const SessionSandbox& session);
  ChangedFilesReport(UniqueFd workspace, SnapshotBudget& budget);
  ~ChangedFilesReport();
  ChangedFilesReport(const ChangedFilesReport&) = delete;
  ChangedFilesReport& operator=(const ChangedFilesReport&) = delete;
  void AddTo(Result& result) const;

 private:
  SnapshotBudget& budget_;
  UniqueFd workspace_;
  size_t bound_ = 0;     // the walks' bound: what budget_ gave the walk before
  size_t reserved_ = 0;  // of budget_, for before_
  StatusOr<WorkspaceSnapshot> before_;
};

}  // namespace nsbox::session
