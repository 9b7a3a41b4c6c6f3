// `nsbox exec`: one program (or one REPL cell) in a live session; the same result object and exit codes as run.
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/result.h"
#include "sandbox/spec/units.h"
#include "src/cli/commands.h"
#include "src/cli/sandbox_options.h"
#include "src/cli/stop_signals.h"
#include "src/session/state.h"

namespace nsbox::cli {

int EmitResult(const Result& result, bool json);  // run.cc
int WriteJsonResultLine(const Result& result);    // run.cc

namespace {

// As WriteAll, for output passed on while the exec runs, with the stop signals blocked: in pieces of at most PIPE_BUF
// bytes, each once poll says there is room, so that a reader that takes nothing cannot hold nsbox past a stop signal.
// Once one is pending the rest is dropped (ECANCELED), and the exec is cancelled.
int WriteUnlessStopped(int fd, std::string_view data) {
  while (!data.empty()) {
    struct pollfd out = {fd, POLLOUT, 0};
    int ready = ::poll(&out, 1, 100);
    if (ready < 0 && errno != EINTR) return errno;
    if (ready <= 0) {
      if (StopSignals::Pending()) return ECANCELED;
      continue;
    }
    if (out.revents & (POLLERR | POLLNVAL)) return EPIPE;
    ssize_t n = ::write(fd, data.data(), std::min<size_t>(data.size(), PIPE_BUF));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return errno;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

}  // namespace

void RegisterExec(CLI::App& app, ExitCode& exit_code) {
  auto* exec = app.add_subcommand("exec", "run a program, or a Python REPL cell (--repl), in a live session");
  static std::string session_ref;
  static ProgramOptions program_options;
  static bool repl = false;
  static bool stream = false;
  exec->add_option("session", session_ref, "the session's id or name")->required();
  AddProgramOptions(exec, program_options);
  exec->add_flag("--repl", repl, "python: run --code/--file in the session's persistent interpreter");
  exec->add_flag("--stream", stream,
                 "pass output on as it comes: raw, or with --json one {\"type\":\"stdout\"|\"stderr\",\"data\":…} "
                 "line a chunk before the result line");
  exec->callback([&exit_code] {
    auto fail = [&](const Status& status, const nlohmann::json& extras = nlohmann::json::object()) {
      exit_code.value = FailBeforeRun("exec", status.message(), program_options.json, extras);
    };
    auto found = session::FindSession(session::StateRoot(), session_ref);
    // A missing session is a fact a program can read, not a wording to match (NsboxRuntime starts a fresh one on it).
    if (!found.ok() && found.status().kind() == ErrorKind::kNotFound)
      return fail(found.status(), {{"session_not_found", session_ref}});
    if (!found.ok()) return fail(found.status());
    if (repl && (program_options.lang.empty() || !program_options.command.empty()))
      return fail(Status::Error("--repl needs --lang python with --code or --file"));
    if (repl && stream) return fail(Status::Error("--stream is not available with --repl"));
    if (repl && !program_options.workdir.empty())
      return fail(Status::Error("--workdir is not available with --repl: a cell runs where the interpreter is "
                                "(os.chdir moves it)"));
    if (repl && !program_options.stdin_source.empty())
      return fail(Status::Error("--stdin is not available with --repl"));
    // The session's memory limit, as its record says it ("none": created without limits).
    const nlohmann::json limits = found->json.value("limits", nlohmann::json::object());
    std::optional<uint64_t> session_memory;
    if (limits.is_object() && limits.value("memory", "none") != "none")
      if (auto bytes = ParseSize(limits.value("memory", "")); bytes.ok()) session_memory = *bytes;
    auto program = BuildProgram(program_options, found->json.value("rootfs_dir", ""), session_memory);
    if (!program.ok()) return fail(program.status());
    // A session without limits has no group for a compile step's own memory limit: the language's is dropped, as
    // `nsbox run --dangerously-run-without-limits` drops it; one asked for is refused.
    if (program->compile && limits.is_object() && limits.value("memory", "") == "none") {
      if (!program_options.compile_memory.empty())
        return fail(Status::Error("--compile-memory: the session runs without limits (created with "
                                  "--dangerously-run-without-limits)"));
      program->compile->memory_max_bytes = 0;
    }
    // The language table says which interpreter --lang means; the REPL driver is Python's.
    if (repl && (program->compile || program->run.argv.empty() || !program->run.argv[0].ends_with("/python3")))
      return fail(Status::Error("--repl needs --lang python"));
    nlohmann::json request = ExecRequest(*program, repl);
    request["stream"] = stream;
    // The supervisor answers by the exec's own time-outs (a compile step's too) and a grace after them, or the
    // client stops waiting.
    session::RequestOutcome outcome;
    int stream_errno = 0;  // the first failed write of a chunk (raw output only)
    auto on_stream = [&](const nlohmann::json& message) {
      const std::string type = message.value("type", "");
      if (type != "stdout" && type != "stderr") return true;
      if (program_options.json) {
        // A reader that went away gets the rest of the exec as if nothing were printed (as without --stream).
        nlohmann::ordered_json line = {{"type", type}, {"data", message.value("data", "")}};
        (void)WriteUnlessStopped(1, line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
      } else if (stream_errno == 0) {
        stream_errno = WriteUnlessStopped(type == "stderr" ? 2 : 1, message.value("data", ""));
      }
      return true;
    };
    // SIGINT and the other ending signals cancel the exec in the session, whose answer is then this exec's result
    // (the session lives on); without this, nsbox would die and print none.
    std::optional<StopSignals> stop;
    stop.emplace();
    auto answer = session::Request(*found, request,
                                   {.deadline = ProgramTimeout(*program) + session::kExecGrace,
                                    .send_fd = program->run.stdin_fd,
                                    .outcome = &outcome,
                                    .on_stream = stream ? std::function(on_stream) : nullptr,
                                    .max_answer_bytes = session::MaxExecAnswerBytes(program->run.output_limit_bytes),
                                    .cancel_fd = stop->fd()});
    if (!answer.ok() && outcome.delivered && !outcome.answered) {
      // The supervisor had the request: the program may have run, and its effects may be in the session. Not a
      // setup error, which says that nothing ran. (A supervisor that resumes sees this client gone and kills the
      // exec, as for any client that goes away.)
      Result lost;
      lost.status = RunStatus::kSessionLost;
      lost.reason = answer.status().message() + "; the program may have run";
      (void)WriteAll(2, fmt::format("nsbox exec: {}\n", lost.reason));
      if (program_options.json) (void)WriteJsonResultLine(lost);
      exit_code.value = lost.ShellExitCode();
      return;
    }
    if (!answer.ok()) return fail(answer.status());
    Result result = ResultFromJson(answer->value("result", nlohmann::json::object()));
    // The supervisor answers a cancel as a time-out named "cancelled" (a compile step's as a compile error of its
    // time-out); an exec that ended first keeps its result.
    const int sig = outcome.cancelled ? stop->Received() : 0;
    // The signals are nsbox's again: one more (a reader that takes nothing holds the result's write) ends it.
    stop.reset();
    const bool cancelled =
        (result.status == RunStatus::kTimeout && result.reason == "cancelled") ||
        (result.status == RunStatus::kCompileError && result.reason == "compile step timeout: cancelled");
    if (sig != 0 && cancelled) {
      result.status = RunStatus::kKilled;
      result.signal = sig;  // the exit status is 128 + the signal, as for nsbox run's steps stopped by one
      result.reason = fmt::format("nsbox exec was stopped by SIG{}: the exec was killed{} (the session lives on)",
                                  sigabbrev_np(sig), repl ? ", and the interpreter with it: its state is lost" : "");
    }
    if (stream && !program_options.json) {
      result.output_passed_on = true;  // written as it came
      result.output_write_errno = stream_errno;
    }
    if (!program_options.json && repl) {
      // Shown as an interactive interpreter shows it; the JSON result has it under repl.value.
      const nlohmann::json repl_extra = GetExtra(result, "repl");
      const nlohmann::json value = repl_extra.is_object() ? repl_extra.value("value", nlohmann::json()) : nullptr;
      if (value.is_string()) result.stdout_data += value.get<std::string>() + "\n";
      if (repl_extra.is_object() && repl_extra.value("state_lost", false))
        fmt::print(stderr, "nsbox: the previous interpreter died; this cell ran in a fresh one (state lost)\n");
    }
    exit_code.value = EmitResult(result, program_options.json);
  });
}

}  // namespace nsbox::cli
