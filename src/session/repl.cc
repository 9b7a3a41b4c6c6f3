// The REPL's wire protocol and cell results over SessionSandbox::AskResident; the changed-files report.
#include "src/session/repl.h"

#include <signal.h>

#include <mutex>

#include <fmt/format.h>

#include "sandbox/base/bounded_json.h"
#include "sandbox/result_json.h"
#include "src/session/workspace_copy.h"

namespace nsbox::session {
namespace {

// The cell ids of this process's sessions: each answer echoes its request's id.
std::mutex cell_id_mutex;
uint64_t last_cell_id = 0;

uint64_t NextCellId() {
  std::lock_guard lock(cell_id_mutex);
  return ++last_cell_id;
}

}  // namespace

std::string ReplRequest(uint64_t id, const std::string& code, const std::map<std::string, std::string>& env) {
  return nlohmann::json{{"id", id}, {"code", code}, {"env", env}}.dump() + "\n";
}

bool ParseReplReply(std::string_view line, uint64_t id, nlohmann::json* reply) {
  *reply = ParseBoundedJsonOrDiscarded(line);  // the sandbox's own bytes
  if (!reply->is_object()) return false;  // a parse error (discarded) too
  auto got = reply->find("id");
  if (got == reply->end() || !got->is_number_unsigned() || got->get<uint64_t>() != id) return false;
  for (const char* key : {"value", "exception", "traceback"}) {
    auto part = reply->find(key);
    if (part != reply->end() && !part->is_null() && !part->is_string()) return false;
  }
  auto exit_code = reply->find("exit_code");
  return exit_code == reply->end() || exit_code->is_null() || exit_code->is_number_integer();
}

int FrameReplReply(std::string_view bytes, uint64_t id, std::string* why) {
  const size_t newline = bytes.find('\n');
  if (newline == std::string_view::npos) {
    if (bytes.size() <= kMaxReplyBytes) return 0;
    *why = fmt::format("the cell wrote more than {} MiB to the REPL's channel (fd 3)", kMaxReplyBytes >> 20);
    return -1;
  }
  nlohmann::json reply;
  if (newline + 1 != bytes.size() || !ParseReplReply(bytes.substr(0, newline), id, &reply)) {
    *why = "the cell wrote to the REPL's channel (fd 3), which put it out of step";
    return -1;
  }
  return 1;
}

Result RunCell(SessionSandbox& session, const std::string& code, const ResidentOptions& driver,
               const ResidentTurnOptions& limits, int cancel_fd) {
  const uint64_t cell_id = NextCellId();
  ResidentTurnOptions options = limits;
  options.frame = [cell_id](std::string_view bytes, std::string* why) { return FrameReplReply(bytes, cell_id, why); };
  ChangedFilesReport changed(session);
  ResidentTurn turn = session.AskResident(driver, ReplRequest(cell_id, code, driver.env), options, cancel_fd);
  nlohmann::json repl = {{"value", nullptr}, {"exception", nullptr}, {"traceback", nullptr},
                         {"state_lost", turn.state_lost}, {"interpreter_killed", false}};
  Result result = std::move(turn.result);
  if (turn.answered) {
    nlohmann::json reply;
    (void)ParseReplReply(std::string_view(turn.answer).substr(0, turn.answer.size() - 1), cell_id, &reply);
    repl["value"] = reply.value("value", nlohmann::json(nullptr));
    repl["exception"] = reply.value("exception", nlohmann::json(nullptr));
    repl["traceback"] = reply.value("traceback", nlohmann::json(nullptr));
    const nlohmann::json exit_code = reply.value("exit_code", nlohmann::json(nullptr));
    result.signal = 0;
    if (exit_code.is_number_integer()) {
      // sys.exit ends the cell, as it would end a script, with its code; the interpreter lives on.
      result.exit_code = static_cast<int>(exit_code.get<int64_t>() & 0xff);
      result.status = result.exit_code == 0 ? RunStatus::kOk : RunStatus::kExit;
      result.reason = fmt::format("the cell called sys.exit (exit code {}); the interpreter keeps its state",
                                  result.exit_code);
    } else if (repl["exception"].is_null()) {
      result.status = RunStatus::kOk;
      result.exit_code = 0;
      result.reason = "the cell ran";
    } else {
      result.status = RunStatus::kExit;
      result.exit_code = 1;
      result.reason = fmt::format("the cell raised {}", repl["exception"].get<std::string>());
    }
  } else if (!turn.started) {
    // Nothing ran (the session is ending, the interpreter could not start, or an earlier cell held it for the whole
    // time limit): the result says why, and the interpreter, if any, is as it was.
    if (result.status == RunStatus::kTimeout)
      result.reason = fmt::format("an earlier cell held the interpreter for the whole time limit of {} ms: this cell "
                                  "did not run, and the interpreter keeps its state", limits.wall_timeout.count());
  } else {
    // Timed out, cancelled, crashed or out of step: the interpreter went, and the next cell starts a fresh one.
    if (!turn.out_of_step.empty()) {
      result.reason = fmt::format("{}; the interpreter was killed and its state is lost (the next cell starts a "
                                  "fresh one)", turn.out_of_step);
    } else if (turn.timed_out) {
      result.reason = fmt::format("wall-clock time limit of {} ms exceeded; the interpreter was killed and its "
                                  "state is lost (the session lives on)", limits.wall_timeout.count());
    } else if (!turn.session_ended.empty() && result.status == RunStatus::kSignal && result.signal == SIGKILL) {
      result.reason = turn.session_ended + "; the interpreter was killed";
    } else if (!turn.cancelled && result.status != RunStatus::kSetupError) {
      result.reason = fmt::format("the interpreter died ({}); its state is lost", result.reason);
    }
    if (result.status == RunStatus::kOk) result.status = RunStatus::kExit;  // it may not just stop
    repl["interpreter_killed"] = true;
  }
  if (turn.restarted_out_of_step)
    result.reason += "; an earlier cell wrote to the REPL's channel (fd 3), which put it out of step: the "
                     "interpreter was restarted before this cell and its state is lost";
  SetExtra(result, "repl", repl);
  changed.AddTo(result);
  return result;
}

size_t SnapshotBudget::Reserve(size_t wanted) {
  size_t held = held_.load();
  for (;;) {
    const size_t take = held >= total_ ? 0 : std::min(wanted, total_ - held);
    if (take == 0) return 0;
    if (held_.compare_exchange_weak(held, held + take)) return take;
  }
}

void SnapshotBudget::Release(size_t bytes) { held_.fetch_sub(bytes); }

SnapshotBudget& ProcessSnapshotBudget() {
  static SnapshotBudget budget(64 << 20);
  return budget;
}

ChangedFilesReport::ChangedFilesReport(const SessionSandbox& session)
    : ChangedFilesReport(
          [&] {
            auto workspace = session.OpenWorkspace();
            return workspace.ok() ? std::move(*workspace) : UniqueFd();
          }(),
          ProcessSnapshotBudget()) {}

ChangedFilesReport::ChangedFilesReport(UniqueFd workspace, SnapshotBudget& budget)
    : budget_(budget), workspace_(std::move(workspace)), before_(Status::Error("no workspace")) {
  if (!workspace_) return;
  bound_ = reserved_ = budget_.Reserve(kMaxSnapshotBytes);
  before_ = SnapshotWorkspace(workspace_.get(), 20000, ".nsbox-", bound_);
  // Only what the snapshot holds stays reserved while the call runs.
  const size_t held = before_.ok() ? before_->bytes : 0;
  budget_.Release(reserved_ - held);
  reserved_ = held;
}

ChangedFilesReport::~ChangedFilesReport() { budget_.Release(reserved_); }

void ChangedFilesReport::AddTo(Result& result) const {
  nlohmann::json list = nlohmann::json::array();
  bool truncated = false;
  if (before_.ok() && workspace_) {
    // The walk after is bounded as the one before was (a larger bound would list files that walk never reached), or
    // sooner, short of the budget, which can only miss files.
    const size_t bound = budget_.Reserve(bound_);
    auto after = SnapshotWorkspace(workspace_.get(), 20000, ".nsbox-", bound);
    if (after.ok()) {
      truncated = before_->truncated || after->truncated;
      size_t listed_bytes = 0;
      for (const auto& file : ChangedFiles(*before_, *after)) {
        nlohmann::json entry = {{"path", "/workspace/" + file.path}, {"size", file.size}};
        if (!AppendListedFile(list, std::move(entry), kMaxChangedFilesBytes, &listed_bytes)) {
          truncated = true;
          break;
        }
      }
    }
    budget_.Release(bound);
  }
  SetExtra(result, "changed_files", list);
  // The workspace was larger than the walk looks at (workspace_snapshot.h), or the calls running at once held the
  // process's budget: the list may miss files.
  if (truncated) SetExtra(result, "changed_files_truncated", true);
}

}  // namespace nsbox::session
