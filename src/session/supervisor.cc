// The session supervisor: daemonizes, owns the session's sandbox, checks each client's uid, runs execs and REPL cells
// on their own threads, and ends the session on rm, idle time-out, lifetime or pid 1's death, removing its state.
#include "src/session/supervisor.h"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/host_id_lease.h"
#include "sandbox/live_output.h"
#include "sandbox/output_buffer.h"
#include "sandbox/result_json.h"
#include "sandbox/session.h"
#include "sandbox/spec/cgroup_text.h"
#include "src/cli/compiled_program.h"
#include "src/cli/network.h"
#include "src/session/repl.h"
#include "src/session/state.h"
#include "src/session/wire.h"

namespace nsbox::session {
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

using Clock = std::chrono::steady_clock;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

nlohmann::json Error(const std::string& message) { return {{"ok", false}, {"error", message}}; }

class Server {
 public:
  Server(SupervisorConfig config, HostIdLease host_ids, std::unique_ptr<SessionSandbox> session, UniqueFd listener,
         cli::EgressProxyHooks* proxy, UniqueFd terminate)
      : config_(std::move(config)),
        host_ids_(std::move(host_ids)),
        session_(std::move(session)),
        listener_(std::move(listener)),
        proxy_(proxy),
        terminate_(std::move(terminate)) {
    last_activity_ = Clock::now();
  }

  // The timers, on the main thread (pid 1's PR_SET_PDEATHSIG is tied to it): idle time-out, lifetime, pid 1's death.
  // Clients are served by workers blocked in accept(): the kernel hands a connection straight to an idle one.
  void Serve() {
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
          wait_ms,
          std::chrono::duration_cast<std::chrono::milliseconds>(created_ + config_.max_lifetime - now).count());
      {
        std::lock_guard lock(activity_mutex_);
        if (active_ == 0) {
          if (now - last_activity_ >= config_.idle_timeout) {
            shutting_down_ = true;  // no request starts any more
          } else {
            wait_ms = std::min<int64_t>(wait_ms, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     last_activity_ + config_.idle_timeout - now).count());
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

  // Keeps an idle worker in accept() at all times (two in the steady state, so that a lone client causes no thread
  // churn); a worker that finds two others idle after a request ends.
  void SpawnWorker() {
    ++idle_workers_;
    try {
      std::thread([this] { WorkerLoop(); }).detach();
    } catch (const std::system_error&) {
      --idle_workers_;  // out of threads: the busy workers take the next clients when they are done
    }
  }

  void WorkerLoop() {
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

  void ServeClient(UniqueFd conn, uid_t owner) {
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

  // Ends the session once: every process (pid 1 takes its pid namespace along; exec helpers are killed), the
  // mounts (they lived in the session's mount namespace only), and the state directory. `why` ("removed by nsbox
  // session rm") becomes the reason of the execs and cells it cuts short, whose answers then go out before the process
  // exits; `own_requests`: the caller's own request, if it is one, which is not waited for.
  void Shutdown(std::string_view why, int own_requests) {
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

 private:
  // Serves one request; false when it was only a look at the session (info), which is not activity.
  bool Handle(UniqueFd conn) {
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
      answer = nullptr;  // a large output goes back to the system before the next exec's payload is forked
      session_->PrepareNextExec();  // after the answer: the client need not wait for it
      return true;
    } else if (op == "workspace") {
      auto workspace = session_->OpenWorkspace();
      if (!workspace.ok()) {
        (void)SendMessage(conn.get(), Error(workspace.status().message()));
        return true;
      }
      (void)SendMessage(conn.get(), {{"ok", true}, {"sandbox_host_uid", config_.record.value("sandbox_host_uid", 0)},
                                     {"sandbox_host_gid", config_.record.value("sandbox_host_gid", 0)}},
                        workspace->get());
      return true;
    } else if (op == "rm") {
      removing_ = true;
      // The remover may say why (nsbox serve: a DELETE, a time-out, its own end); it ends the execs' reasons.
      const nlohmann::json why = request->value("reason", nlohmann::json());
      Shutdown(why.is_string() && !why.get<std::string>().empty() ? why.get<std::string>()
                                                                  : "removed by nsbox session rm",
               1);
      (void)SendMessage(conn.get(), {{"ok", true}, {"id", config_.id}});
      ::_exit(0);
    } else {
      answer = Error(fmt::format("unknown request '{}'", op));
    }
    (void)SendMessage(conn.get(), answer);
    return true;
  }

  nlohmann::json Info() {
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

  nlohmann::json Exec(const nlohmann::json& request, int stdin_fd, int conn) {
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
        return session_->Exec(std::move(one), conn, [&](Result& ran) { changed.AddTo(ran); },
                              live ? &*live : nullptr);
      };
      result = cli::RunProgram(std::move(*program), step, /*remove_build_dir=*/true);
      // A compile that failed ran no program: it changed no file, and every exec's answer has the key.
      if (GetExtra(result, "changed_files").is_null()) SetExtra(result, "changed_files", nlohmann::json::array());
      if (streamed) streamed->Flush();
    }
    if (proxy_) proxy_->ReportSince(denied_before, result);
    return {{"ok", true}, {"result", ResultToJson(result)}};
  }

  SupervisorConfig config_;
  HostIdLease host_ids_;  // before session_: given up only once the sandbox has ended
  std::unique_ptr<SessionSandbox> session_;
  UniqueFd listener_;
  cli::EgressProxyHooks* proxy_;  // null without --network allow=
  const Clock::time_point created_ = Clock::now();
  std::mutex activity_mutex_;
  std::condition_variable request_ended_;  // active_ went down
  int active_ = 0;
  Clock::time_point last_activity_;
  std::atomic<bool> removing_{false};
  bool shutting_down_ = false;  // under activity_mutex_ (read unlocked only by the main thread that sets it)
  std::atomic<int> idle_workers_{0};
  UniqueFd owner_;      // pidfd of config_.owner_pid
  UniqueFd terminate_;  // readable once SIGTERM came (OnTerminate)
  std::mutex shutdown_mutex_;
  bool shut_down_ = false;
};

// SIGTERM (a plain `kill`, a system's shutdown) ends the session as `rm` does, its state removed: the handler writes a
// byte that the main loop's poll sees. Any thread may run it; a write to a pipe is safe in a handler.
int g_terminate_write = -1;
void OnTerminate(int) {
  const int saved = errno;
  const char byte = 'T';
  ssize_t ignored = ::write(g_terminate_write, &byte, 1);
  (void)ignored;
  errno = saved;
}

StatusOr<UniqueFd> Listen(const std::string& path) {
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return Status::Errno("socket(AF_UNIX)");
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return Status::Error(fmt::format("socket path too long: {}", path));
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::bind(sock.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0)
    return Status::Errno(fmt::format("bind({})", path));
  if (::chmod(path.c_str(), 0600) != 0) return Status::Errno(fmt::format("chmod({}, 0600)", path));
  if (::listen(sock.get(), 128) != 0) return Status::Errno("listen(session socket)");
  return sock;
}

// The supervisor's life: start the sandbox, publish the socket and the record, tell the creator, serve.
int RunSupervisor(SupervisorConfig config, int ready_fd) {
  auto fail = [&](const Status& status) {
    (void)WriteAll(ready_fd, "error " + status.message() + "\n");
    RemoveSessionDir(config.dir);
    return 1;
  };
  // Buffers of 1 MiB and more (large outputs, a cell's answer) go back to the system when freed, whatever glibc's
  // sliding threshold learnt from earlier ones: each exec's peak counts what the supervisor has resident when the exec
  // starts (SessionSandbox::StartHelper).
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // One arena for all threads: a worker's first request would otherwise make an arena of its own (a 64 MiB reservation
  // and its first page faults), in the first exec of every session. The few threads seldom allocate at once.
  ::mallopt(M_ARENA_MAX, 1);
  int terminate_pipe[2];
  if (::pipe2(terminate_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return fail(Status::Errno("pipe2(SIGTERM)"));
  UniqueFd terminate_read(terminate_pipe[0]);
  g_terminate_write = terminate_pipe[1];
  struct sigaction on_terminate = {};
  on_terminate.sa_handler = OnTerminate;
  on_terminate.sa_flags = SA_RESTART;
  sigemptyset(&on_terminate.sa_mask);
  ::sigaction(SIGTERM, &on_terminate, nullptr);
  // The proxy's threads start here, in the supervisor itself (after its forks): it lives as long as the session.
  std::unique_ptr<cli::EgressProxyHooks> proxy;
  if (config.network_allow) proxy = std::make_unique<cli::EgressProxyHooks>(*config.network_allow);
  // Each exec's payload is handed to this process by a helper that exits (SessionSandbox::Start needs this).
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
    return fail(Status::Errno("prctl(PR_SET_CHILD_SUBREAPER)").Wrap("starting the session's sandbox"));
  // Run as root: a host uid of the session's own, held by the supervisor for the session's life.
  auto host_ids = LeaseHostIdsIfRoot(config.policy);
  if (!host_ids.ok()) return fail(host_ids.status());
  auto session = SessionSandbox::Start(config.policy, proxy.get());
  if (!session.ok()) return fail(session.status().Wrap("starting the session's sandbox"));
  auto listener = Listen(config.dir + "/socket");
  if (!listener.ok()) return fail(listener.status());

  const bool privileged = ::geteuid() == 0;
  nlohmann::json& record = config.record;
  record["id"] = config.id;
  record["name"] = config.name;
  record["supervisor_pid"] = ::getpid();
  record["supervisor_start_time"] = ProcessStartTime(::getpid());
  record["pid1"] = (*session)->pid1();
  record["pid1_start_time"] = ProcessStartTime((*session)->pid1());
  record["created_unix_ms"] = NowUnixMs();
  record["idle_timeout_ms"] = config.idle_timeout.count();
  record["max_lifetime_ms"] = config.max_lifetime.count();
  record["sandbox_host_uid"] = privileged ? config.policy.host_uid() : ::geteuid();
  record["sandbox_host_gid"] = privileged ? config.policy.host_gid() : ::getegid();
  record["end_with_pid"] = config.owner_pid;  // 0: none (a server ends only the sessions it made)
  std::string tmp = config.dir + "/session.json.tmp";
  if (Status s = WriteFile(tmp, record.dump(2) + "\n", O_EXCL, 0600); !s.ok()) return fail(s);
  if (::rename(tmp.c_str(), (config.dir + "/session.json").c_str()) != 0)
    return fail(Status::Errno("rename(session.json.tmp, session.json)"));

  Server server(config, std::move(*host_ids), std::move(*session), std::move(*listener), proxy.get(),
                std::move(terminate_read));
  (void)WriteAll(ready_fd, "ok " + record.dump() + "\n");
  // The session is the creator's once it has passed the id on and says so with one byte. A creator that ended first
  // (a signal, SIGKILL included, or a failed write) closes its end: a session whose id no one got ends at once, not
  // at its idle time-out.
  char claimed = 0;
  ssize_t n;
  do {
    n = ::read(ready_fd, &claimed, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1 || claimed != 'C') {
    // The creator waits for the end of this descriptor (this process's exit) to know the session is gone.
    server.Shutdown("the command that created it could not pass the session's id on", 0);
    return 0;
  }
  ::close(ready_fd);
  server.Serve();
  return 0;
}

}  // namespace

void LaunchedSupervisor::Disown(std::chrono::milliseconds deadline) {
  const char byte = 'N';
  if (::write(claim.get(), &byte, 1) == 1) {
    // End of file once the supervisor, which holds the other end, has ended the session and exited.
    const auto until = std::chrono::steady_clock::now() + deadline;
    char ignored[64];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      struct pollfd fd = {claim.get(), POLLIN, 0};
      if (left.count() <= 0 || ::poll(&fd, 1, static_cast<int>(left.count())) == 0) break;
      const ssize_t n = ::read(claim.get(), ignored, sizeof ignored);
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
  }
  claim.reset();
}

namespace {

// The supervisor is a fork of `nsbox session create`: its command line is that invocation (nsbox's path, every
// option). Each exec's payload runs in this memory until its execve, and another process of the session may read
// /proc/PID/cmdline of it (no ptrace permission needed): the command line is overwritten with "nsbox-session".
void HideCommandLine() {
  auto stat = ReadFile("/proc/self/stat", 4096);
  if (!stat.ok()) return;
  auto range = cgroup_internal::ParseArgumentRange(*stat);
  if (!range) return;
  char* start = reinterpret_cast<char*>(range->first);
  const size_t size = range->second - range->first;
  std::memset(start, 0, size);
  constexpr std::string_view kShown = "nsbox-session";
  std::memcpy(start, kShown.data(), std::min(kShown.size(), size - 1));
}

}  // namespace

StatusOr<LaunchedSupervisor> LaunchSupervisor(SupervisorConfig config) {
  // Both ways: the supervisor says "ok RECORD" (or why not), and the creator answers one byte once it passed the id on.
  int ready[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ready) != 0) return Status::Errno("socketpair(ready)");
  UniqueFd ready_read(ready[0]), ready_write(ready[1]);
  // The directory is made here, with the signals that end a command held until the supervisor exists: a create killed
  // between the two left an empty directory that nothing removed for a minute. Once the supervisor exists it owns the
  // directory (an unclaimed session ends itself and removes it).
  sigset_t ending, before;
  sigemptyset(&ending);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&ending, sig);
  ::pthread_sigmask(SIG_BLOCK, &ending, &before);
  if (::mkdir(config.dir.c_str(), 0700) != 0) {
    Status made = Status::Errno(fmt::format("mkdir({})", config.dir));
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    return made;
  }
  pid_t first = ::fork();
  if (first != 0) ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (first < 0) {
    Status forked = Status::Errno("fork(supervisor)");
    RemoveSessionDir(config.dir);
    return forked;
  }
  if (first == 0) {
    // Detach: a new session without a terminal, then a grandchild that init adopts, with stdio on /dev/null.
    ready_read.reset();
    if (::setsid() < 0) ::_exit(1);
    pid_t second = ::fork();
    if (second != 0) ::_exit(second < 0 ? 1 : 0);
    int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
      if (null_fd > 2) ::close(null_fd);
    }
    // Nothing of the caller's stays open for the session's lifetime (a $(...) pipe would never see end-of-file).
    int ready_fd = ready_write.get();
    if (ready_fd > 3) ::syscall(SYS_close_range, 3u, static_cast<unsigned>(ready_fd - 1), 0u);
    ::syscall(SYS_close_range, static_cast<unsigned>(ready_fd + 1), ~0u, 0u);
    if (::chdir("/") != 0) ::_exit(1);
    ::umask(077);
    ::signal(SIGPIPE, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    ::signal(SIGINT, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    HideCommandLine();
    ::_exit(RunSupervisor(std::move(config), ready_fd));
  }
  ready_write.reset();
  ::waitpid(first, nullptr, 0);
  // One line: "ok RECORD" or "error MESSAGE". Not end-of-file: pid 1 inherited the pipe and lives on.
  std::string message;
  char buffer[4096];
  while (message.find('\n') == std::string::npos) {
    ssize_t n = ::read(ready_read.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    message.append(buffer, static_cast<size_t>(n));
  }
  if (auto newline = message.find('\n'); newline != std::string::npos) message.resize(newline);
  if (message.starts_with("ok ")) {
    auto record = nlohmann::json::parse(message.substr(3), nullptr, false);
    if (!record.is_discarded()) return LaunchedSupervisor{std::move(record), std::move(ready_read)};
  }
  ready_read.reset();
  RemoveSessionDir(config.dir);
  if (message.starts_with("error ")) return Status::Error(message.substr(6));
  return Status::Error("the session supervisor ended before it was ready");
}

}  // namespace nsbox::session
