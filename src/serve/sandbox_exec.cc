// Sandboxes' execs: planning one (its language and compile step), the room its answer may take in the server's
// memory, and running it over the session's socket, streamed or whole.
#include "src/serve/sandboxes.h"

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "nsbox/executor.h"
#include "sandbox/stdin_feeder.h"
#include "src/cli/languages.h"
#include "src/serve/api_error.h"
#include "src/session/wire.h"

namespace nsbox::serve {
namespace {

using json = nlohmann::json;

// An exec's stdin: a sealed file of `text`, which the program gets as it is (SealedStdin).
UniqueFd StdinFile(const std::string& text) {
  auto fd = SealedStdin(text);
  if (!fd.ok()) throw ApiError(500, "setup_failed", fd.status().Wrap("the exec's stdin").message());
  return std::move(*fd);
}

}  // namespace

cli::Program Sandboxes::PlanExec(const Sandbox& sandbox, const ExecSpec& exec) const {
  cli::Program program;
  const session::SessionRecord& record = *sandbox.record;
  program.run.argv = exec.argv;
  program.run.env = DefaultSandboxEnv();
  program.run.env["PIP_BREAK_SYSTEM_PACKAGES"] = "1";
  std::optional<cli::Language> lang;
  if (!exec.language.empty()) {
    auto found_lang = cli::LookupLanguage(exec.language);
    if (!found_lang.ok() && found_lang.status().kind() != ErrorKind::kNotFound)  // the server's table, not the request
      throw ApiError(500, "internal", found_lang.status().message());
    if (!found_lang.ok()) throw BadRequest(fmt::format("'language': {}", found_lang.status().message()));
    lang = std::move(*found_lang);
    std::string rootfs_dir = record.json.value("rootfs_dir", "");
    if (Status toolchain = cli::CheckToolchain(*lang, rootfs_dir); !toolchain.ok())
      throw BadRequest(toolchain.message());
    if (lang->compile && exec.repl) throw BadRequest("'repl' is Python's; a compiled language has no REPL");
    const char* misplaced = exec.compile_timeout ? "compile_timeout" : exec.compile_memory ? "compile_memory" : nullptr;
    if (!lang->compile && misplaced)
      throw BadRequest(fmt::format("'{}': language '{}' has no compile step", misplaced, lang->name));
    cli::ApplyLanguage(*lang, program.run);
  }
  for (const auto& [k, v] : sandbox.spec.env) program.run.env[k] = v;
  for (const auto& [k, v] : exec.env) program.run.env[k] = v;
  program.run.cwd = exec.cwd;
  program.run.umask = 022;
  program.run.code = exec.code;
  program.run.wall_timeout = exec.timeout;
  program.run.output_limit_bytes = exec.output_limit;
  cli::Program planned = cli::FinishProgram(lang, std::move(program.run),
                                            {.timeout = exec.compile_timeout, .memory_bytes = exec.compile_memory},
                                            sandbox.spec.memory_bytes);
  // --max-timeout caps the compile step's time-out too, the table's default (up to 60 s) as much as one asked for.
  if (planned.compile)
    planned.compile->wall_timeout =
        std::min<std::chrono::milliseconds>(planned.compile->wall_timeout, config_.max_timeout);
  if (!exec.pool_preload) CheckAnswerRoomShare(ExecAnswerRoom(exec, planned.compile.has_value()));
  return planned;
}

namespace {
// What an answer's room is reserved for, in the messages that refuse one.
constexpr const char* kWhatAnAnswerNeeds =
    "an exec's: its stdin and code, 12 times its output_limit and 9 MiB; a file read's: its size";
}  // namespace

class Sandboxes::AnswerRoomTicket {
 public:
  AnswerRoomTicket(Sandboxes* sandboxes, std::string owner, uint64_t bytes)
      : sandboxes_(sandboxes), owner_(std::move(owner)), bytes_(bytes) {}
  ~AnswerRoomTicket() {
    std::lock_guard lock(sandboxes_->room_mutex_);
    sandboxes_->room_used_ -= bytes_;
    if (auto it = sandboxes_->room_by_owner_.find(owner_); it != sandboxes_->room_by_owner_.end()) {
      it->second -= bytes_;
      if (it->second == 0) sandboxes_->room_by_owner_.erase(it);
    }
    sandboxes_->room_freed_.notify_all();
  }
  AnswerRoomTicket(const AnswerRoomTicket&) = delete;
  AnswerRoomTicket& operator=(const AnswerRoomTicket&) = delete;

 private:
  Sandboxes* sandboxes_;
  std::string owner_;
  uint64_t bytes_;
};

void Sandboxes::CheckAnswerRoomShare(uint64_t bytes) const {
  if (config_.client_budget_share >= 1.0) return;
  const uint64_t share = ClientShare(config_.exec_answer_room_bytes, config_.client_budget_share);
  if (bytes > share)
    throw ApiError(400, "bad_request",
                   fmt::format("this answer may take {} bytes ({}), more than a client's share of "
                               "--max-held-answers ({} of {} bytes): ask for less",
                               bytes, kWhatAnAnswerNeeds, share, config_.exec_answer_room_bytes));
}

std::shared_ptr<Sandboxes::AnswerRoomTicket> Sandboxes::ReserveAnswerRoom(uint64_t bytes, const std::string& owner,
                                                                          const std::function<bool()>& client_gone) {
  constexpr auto kRoomWait = std::chrono::seconds(10);
  // With several possible clients, one that held the whole room (one large output_limit did) left every other
  // client's execs and file reads 503 for as long as it liked: each holds at most its share.
  const bool shared = config_.client_budget_share < 1.0;
  const uint64_t share = ClientShare(config_.exec_answer_room_bytes, config_.client_budget_share);
  CheckAnswerRoomShare(bytes);
  const auto give_up = std::chrono::steady_clock::now() + kRoomWait;
  std::unique_lock lock(room_mutex_);
  auto held_by_owner = [&] {
    auto it = room_by_owner_.find(owner);
    return it == room_by_owner_.end() ? uint64_t{0} : it->second;
  };
  // One request alone always has room, whatever its size: the cap bounds how many run beside each other; so has a
  // client's first within its share.
  auto fits = [&] {
    const uint64_t mine = held_by_owner();
    return (room_used_ == 0 || room_used_ + bytes <= config_.exec_answer_room_bytes) &&
           (!shared || mine == 0 || mine + bytes <= share);
  };
  while (!fits()) {
    if (std::chrono::steady_clock::now() >= give_up || (client_gone && client_gone())) {
      const uint64_t mine = held_by_owner();
      if (shared && mine != 0 && mine + bytes > share)
        throw ApiError(503, "unavailable",
                       fmt::format("this client's answers being built or not yet read hold {} bytes of its share of "
                                   "--max-held-answers ({} bytes); this one needs {} ({}); nothing was done; try "
                                   "again",
                                   mine, share, bytes, kWhatAnAnswerNeeds));
      throw ApiError(503, "unavailable",
                     fmt::format("the server holds {} bytes of answers being built or not yet read by their clients "
                                 "(--max-held-answers {}); this one needs {} ({}); nothing was done; try again",
                                 room_used_, config_.exec_answer_room_bytes, bytes, kWhatAnAnswerNeeds));
    }
    room_freed_.wait_for(lock, std::chrono::milliseconds(200));
  }
  room_used_ += bytes;
  room_by_owner_[owner] += bytes;
  return std::make_shared<AnswerRoomTicket>(this, owner, bytes);
}

json Sandboxes::Exec(const std::shared_ptr<Sandbox>& sandbox, const ExecSpec& exec, const cli::Program& program,
                     const OutputSink& sink, const std::function<bool()>& client_gone,
                     std::shared_ptr<void>* room_out) {
  const session::SessionRecord& record = *sandbox->record;
  json request = cli::ExecRequest(program, exec.repl);
  request["stream"] = static_cast<bool>(sink);

  const bool client_work = !exec.pool_preload;
  // Each exec's answer is built whole, here and in the session's supervisor (both outside every sandbox's limits):
  // their number in one sandbox and the room their answers take in all are bounded before the program runs. An exec
  // counts from here, while it waits for room too.
  if (++sandbox->busy > static_cast<int>(config_.max_execs_per_sandbox) && client_work) {
    --sandbox->busy;
    throw ApiError(429, "too_many_requests",
                   fmt::format("sandbox {} runs its maximum of {} execs at once; try again when one has ended",
                               sandbox->id, config_.max_execs_per_sandbox),
                   {{"capacity", Capacity(sandbox->owner)}});
  }
  if (client_work) MarkClientWork(+1);
  struct Done {
    Sandboxes* self;
    Sandbox& s;
    bool client_work;
    ~Done() {
      self->Touch(s);
      --s.busy;
      if (client_work) self->MarkClientWork(-1);
    }
  } done{this, *sandbox, client_work};
  std::shared_ptr<AnswerRoomTicket> room;
  if (client_work)
    room = ReserveAnswerRoom(ExecAnswerRoom(exec, program.compile.has_value()), sandbox->owner, client_gone);
  if (room_out) *room_out = room;
  Touch(*sandbox);

  const auto deadline = std::chrono::steady_clock::now() + cli::ProgramTimeout(program) + session::kExecGrace;
  bool timed_out = false;
  auto conn = session::ConnectSession(record, deadline, &timed_out);
  if (!conn.ok()) {
    // A session that ended (its supervisor gone: `session rm` from outside, a kill) is a conflict, not our failure.
    if (Ended(sandbox)) throw ApiError(409, "conflict", fmt::format("sandbox {} has ended", sandbox->id));
    throw ApiError(500, "setup_failed", conn.status().message());
  }
  UniqueFd stdin_fd;
  if (exec.has_stdin) stdin_fd = StdinFile(exec.stdin_text);
  if (Status s = session::SendMessage(conn->get(), request, stdin_fd.get(), deadline, &timed_out); !s.ok()) {
    if (Ended(sandbox)) throw ApiError(409, "conflict", fmt::format("sandbox {} has ended", sandbox->id));
    throw ApiError(500, "setup_failed", s.message());
  }
  stdin_fd.reset();

  // The answer, and stream messages before it; a client that goes away closes the session connection, which ends
  // the exec (the supervisor watches it).
  session::MessageReader reader(conn->get(), session::MaxExecAnswerBytes(exec.output_limit), deadline);
  // A long answer is read in many pieces: a client that leaves, or the deadline, ends it between them.
  reader.SetStop([&] { return (client_gone && client_gone()) || std::chrono::steady_clock::now() >= deadline; });
  auto lost = [&](const std::string& why) {
    return json{{"status", "session_lost"},
                {"exit_code", -1},  // as from nsbox exec (docs/result.md): the program's own end is not known
                {"reason", why + "; the program may have run"},
                {"stdout", ""},
                {"stderr", ""}};
  };
  for (;;) {
    struct pollfd p = {conn->get(), POLLIN, 0};
    int ready = ::poll(&p, 1, 200);
    if (ready < 0 && errno != EINTR) return lost("poll(session socket) failed");
    if (client_gone && client_gone()) return json{{"status", "cancelled"}, {"reason", "the client went away"}};
    if (std::chrono::steady_clock::now() >= deadline) return lost("the session did not answer in time");
    if (ready <= 0) continue;
    auto message = reader.Next();
    if (client_gone && client_gone()) return json{{"status", "cancelled"}, {"reason", "the client went away"}};
    if (std::chrono::steady_clock::now() >= deadline) return lost("the session did not answer in time");
    if (!message.ok())
      return lost(fmt::format("the session ended before it answered ({})", message.status().message()));
    if (message->contains("type")) {
      const std::string type = message->value("type", "");
      if (sink && (type == "stdout" || type == "stderr") && !sink(type == "stderr" ? 2 : 1, message->value("data", "")))
        return json{{"status", "cancelled"}, {"reason", "the client went away"}};
      continue;
    }
    // A refusal here is the supervisor's (a request it could not read, a REPL driver it lacks): the server's own
    // failure. An exec the session could not start because it is ending is a result (setup_error), not a refusal.
    if (!message->value("ok", false))
      throw ApiError(500, "setup_failed", message->value("error", "the session refused the exec"));
    auto result = message->find("result");
    return result == message->end() ? json::object() : std::move(*result);
  }
}

}  // namespace nsbox::serve
