// The session supervisor's server: checks each client's uid, runs execs and REPL cells on their own threads, and ends
// the session on rm, idle time-out, lifetime or pid 1's death, removing its state.
#include "src/session/supervisor_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "sandbox/cgroup.h"
#include "sandbox/live_output.h"
#include "sandbox/output_buffer.h"
#include "sandbox/result_json.h"
#include "src/cli/compiled_program.h"
#include "src/cli/network.h"
#include "src/session/repl.h"
#include "src/session/state.h"
#include "src/session/wire.h"

namespace nsbox::session::supervisor_internal {
namespace {

// An exec's output as stream messages on the client's connection. A chunk never ends inside a UTF-8 sequence (its
// start is held back for the next one), so that each message's text is what the program wrote. A client that takes
// nothing for 30 s loses the rest of the stream (the answer still comes).
class StreamedOutput {
 public:
  explicit StreamedOutput(int conn) : conn_(conn) {}
  bool Send(int stream, std::string_view data) {
    std::string& pending = pending_[stream == 2];
    pending.append(data);
    size_t cut = CompleteUtf8Prefix(pending);
    if (cut == 0) return true;
    std::string chunk = pending.substr(0, cut);
    pending.erase(0, cut);
    return SendChunk(stream, chunk);
  }
  void Flush() {
    for (int stream : {1, 2}) {
      std::string& pending = pending_[stream == 2];
      if (!pending.empty()) (void)SendChunk(stream, pending);
      pending.clear();
    }
  }

 private:
  bool SendChunk(int stream, const std::string& chunk) {
    if (failed_) return false;
    nlohmann::json message = {{"type", stream == 2 ? "stderr" : "stdout"}, {"data", SanitizeUtf8(chunk)}};
    if (!SendMessage(conn_, message, -1, std::chrono::steady_clock::now() + std::chrono::seconds(30)).ok())
      failed_ = true;
    return !failed_;
  }

  int conn_;
  std::string pending_[2];
  bool failed_ = false;
};

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

nlohmann::json Error(const std::string& message) { return {{"ok", false}, {"error", message}}; }

}  // namespace

Server::Server(SupervisorConfig config, HostIdLease host_ids, std::unique_ptr<SessionSandbox> session,
               UniqueFd listener, cli::EgressProxyHooks* proxy, UniqueFd terminate)
    : config_(std::move(config)),
      host_ids_(std::move(host_ids)),
      session_(std::move(session)),
      listener_(std::move(listener)),
      proxy_(proxy),
      terminate_(std::move(terminate)) {
  last_activity_ = Clock::now();
}

void Server::Serve() {
  if (config_.owner_pid > 0) {
    owner_.reset(static_cast<int>(::syscall(SYS_pidfd_open, config_.owner_pid, 0)));
    if (!owner_) return Shutdown("its --end-with-pid process had already ended", 0);
  }
  session_->PrepareNextExec();  // the first exec's too; the creator has its answer already
  SpawnWorker();
  SpawnWorker();
  for (;;) {
    auto now = Clock::now();
    if (now - created_ >= config_.max_lifetime)
      return Shutdown(fmt::format("its maximum lifetime of {} ms was reached", config_.max_lifetime.count()), 0);
    int64_t wait_ms = 1000;
    wait_ms = std::min<int64_t>(
        wait_ms, std::chrono::duration_cast<std::chrono::milliseconds>(created_ + config_.max_lifetime - now).count());
    {
      std::lock_guard lock(activity_mutex_);
      if (active_ == 0) {
        if (now - last_activity_ >= config_.idle_timeout) {
          shutting_down_ = true;  // no request starts any more
        } else {
          wait_ms = std::min<int64_t>(wait_ms, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                   last_activity_ + config_.idle_timeout - now)
                                                   .count());
        }
      }
    }
    if (shutting_down_) return Shutdown(fmt::format("idle for {} ms", config_.idle_timeout.count()), 0);
    struct pollfd fds[3] = {
        {session_->pid1_pidfd(), POLLIN, 0}, {terminate_.get(), POLLIN, 0}, {owner_.get(), POLLIN, 0}};
    struct pollfd& pid1 = fds[0];
    int rc = ::poll(fds, owner_ ? 3 : 2, static_cast<int>(std::max<int64_t>(wait_ms, 0)) + 1);
    if (rc < 0 && errno != EINTR) return Shutdown("its supervisor's poll failed", 0);
    if (fds[1].revents & POLLIN) return Shutdown("its supervisor was sent SIGTERM", 0);
    if (owner_ && (fds[2].revents & POLLIN)) return Shutdown("its --end-with-pid process ended", 0);
    if (pid1.revents & POLLIN) {
      // An rm in progress killed pid 1: its thread answers the client and ends the process.
      if (removing_) std::this_thread::sleep_for(std::chrono::seconds(10));  // rm waits up to 5 s for answers
      return Shutdown("its pid 1 died", 0);
    }
  }
}

void Server::SpawnWorker() {
  ++idle_workers_;
  try {
    std::thread([this] { WorkerLoop(); }).detach();
  } catch (const std::system_error&) {
    --idle_workers_;  // out of threads: the busy workers take the next clients when they are done
  }
}

void Server::WorkerLoop() {
  const uid_t owner = static_cast<uid_t>(config_.record.value("owner_uid", 0));
  for (;;) {
    UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
      --idle_workers_;
      return;
    }
    if (idle_workers_.fetch_sub(1) == 1) SpawnWorker();
    ServeClient(std::move(conn), owner);
    if (idle_workers_.fetch_add(1) >= 3) {
      --idle_workers_;
      return;
    }
  }
}

void Server::ServeClient(UniqueFd conn, uid_t owner) {
  // A session of one user can't be driven by another, whatever the directory permissions say.
  struct ucred peer = {};
  socklen_t len = sizeof peer;
  if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != owner) {
    (void)SendMessage(conn.get(), Error(fmt::format("session {} belongs to uid {}; refused for uid {}", config_.id,
                                                    owner, peer.uid)));
    return;
  }
  {
    std::lock_guard lock(activity_mutex_);
    if (shutting_down_) return;  // the idle time-out won the race: the client sees the session end
    ++active_;
  }
  bool activity = Handle(std::move(conn));
  std::lock_guard lock(activity_mutex_);
  --active_;
  request_ended_.notify_all();
  // Looking at a session (ls) does not keep it alive; using it does, from the end of the request.
  if (activity) last_activity_ = Clock::now();
}

void Server::Shutdown(std::string_view why, int own_requests) {
  {
    std::lock_guard lock(shutdown_mutex_);
    if (!shut_down_) {
      shut_down_ = true;
      ::unlink((config_.dir + "/socket").c_str());  // no new clients
      session_->Terminate(why);
      RemoveSessionDir(config_.dir);
      host_ids_ = HostIdLease();  // the sandbox's processes are gone: its id, and its lock file, go too
      // The group's reaper, dismissed by Terminate, is reaped here: the supervisor exits next, and a reaper that
      // outlived it would be left to init as a zombie.
      WaitForDismissedReapers();
    }
  }
  // Bounded: a client that does not read its answer loses it.
  std::unique_lock activity(activity_mutex_);
  request_ended_.wait_for(activity, std::chrono::seconds(5), [&] { return active_ <= own_requests; });
}

bool Server::Handle(UniqueFd conn) {
  MessageReader reader(conn.get());
  auto request = reader.Next();
  if (!request.ok()) return false;
  std::string op = request->value("op", "");
  nlohmann::json answer;
  if (op == "info") {
    (void)SendMessage(conn.get(), Info());
    return false;
  } else if (op == "exec") {
    UniqueFd stdin_fd;
    if (!reader.fds().empty()) stdin_fd = std::move(reader.fds().front());
    answer = Exec(*request, stdin_fd.get(), conn.get());
    (void)SendMessage(conn.get(), answer);
    answer = nullptr;             // a large output goes back to the system before the next exec's payload is forked
    session_->PrepareNextExec();  // after the answer: the client need not wait for it
    return true;
  } else if (op == "workspace") {
    auto workspace = session_->OpenWorkspace();
    if (!workspace.ok()) {
      (void)SendMessage(conn.get(), Error(workspace.status().message()));
      return true;
    }
    (void)SendMessage(conn.get(),
                      {{"ok", true},
                       {"sandbox_host_uid", config_.record.value("sandbox_host_uid", 0)},
                       {"sandbox_host_gid", config_.record.value("sandbox_host_gid", 0)}},
                      workspace->get());
    return true;
  } else if (op == "rm") {
    removing_ = true;
    // The remover may say why (nsbox serve: a DELETE, a time-out, its own end); it ends the execs' reasons.
    const nlohmann::json why = request->value("reason", nlohmann::json());
    Shutdown(
        why.is_string() && !why.get<std::string>().empty() ? why.get<std::string>() : "removed by nsbox session rm", 1);
    (void)SendMessage(conn.get(), {{"ok", true}, {"id", config_.id}});
    ::_exit(0);
  } else {
    answer = Error(fmt::format("unknown request '{}'", op));
  }
  (void)SendMessage(conn.get(), answer);
  return true;
}

nlohmann::json Server::Info() {
  nlohmann::json info = config_.record;
  info["ok"] = true;
  info["age_ms"] = MsSince(created_);
  {
    std::lock_guard lock(activity_mutex_);
    // This request itself is one of the active ones.
    info["idle_ms"] = active_ > 1 ? 0 : MsSince(last_activity_);
    info["running_requests"] = active_ - 1;
  }
  info["memory_bytes"] = session_->MemoryInUseBytes();
  return info;
}

nlohmann::json Server::Exec(const nlohmann::json& request, int stdin_fd, int conn) {
  auto program = cli::ProgramFromExecRequest(request);
  if (!program.ok()) return Error(program.status().message());
  Executor& ex = program->run;
  ex.stdin_fd = stdin_fd;
  std::map<std::string, uint64_t> denied_before;
  if (proxy_) {
    for (const auto& [key, value] : netproxy::ProxyEnvironment(netproxy::kSandboxProxyPort)) {
      ex.env[key] = value;
      if (program->compile) program->compile->env[key] = value;
    }
    denied_before = proxy_->DeniedHosts();
  }
  Result result;
  if (request.value("repl", false) && program->compile) {
    return Error("malformed exec request: a REPL cell has no compile step");
  } else if (request.value("repl", false)) {
    if (config_.repl_driver_source.empty())
      return Error(config_.repl_driver_error.empty()
                       ? "the REPL driver (rootfs/repl/driver.py) is empty"
                       : fmt::format("the REPL driver could not be read: {}", config_.repl_driver_error));
    ResidentOptions driver;
    driver.argv = {ex.argv.at(0), "-u", "-c", config_.repl_driver_source};
    driver.env = ex.env;
    driver.umask = ex.umask;
    ResidentTurnOptions limits;
    limits.wall_timeout = ex.wall_timeout;
    limits.output_limit_bytes = ex.output_limit_bytes;
    result = RunCell(*session_, ex.code, driver, limits, conn);
  } else {
    // stream: the program's output as it comes, one message a chunk, before the answer: {"type": "stdout" |
    // "stderr", "data": TEXT}. A compile step's output is not streamed (after a compile error it is the answer's).
    std::optional<StreamedOutput> streamed;
    std::optional<LiveOutput> live;
    if (request.value("stream", false)) {
      streamed.emplace(conn);
      live.emplace([&streamed](int stream, std::string_view data) { return streamed->Send(stream, data); });
    }
    // The changed files are the program's: the compile step writes below /tmp only.
    auto step = [&](Executor one, cli::Step kind) {
      // The removal runs also when the client went away (its own short time-out bounds it).
      if (kind == cli::Step::kRemove) return session_->Exec(std::move(one));
      if (kind == cli::Step::kCompile) return session_->Exec(std::move(one), conn);
      ChangedFilesReport changed(*session_);
      return session_->Exec(
          std::move(one), conn, [&](Result& ran) { changed.AddTo(ran); }, live ? &*live : nullptr);
    };
    result = cli::RunProgram(std::move(*program), step, /*remove_build_dir=*/true);
    // A compile that failed ran no program: it changed no file, and every exec's answer has the key.
    if (GetExtra(result, "changed_files").is_null()) SetExtra(result, "changed_files", nlohmann::json::array());
    if (streamed) streamed->Flush();
  }
  if (proxy_) proxy_->ReportSince(denied_before, result);
  return {{"ok", true}, {"result", ResultToJson(result)}};
}

}  // namespace nsbox::session::supervisor_internal
