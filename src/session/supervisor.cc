// The session supervisor's life: LaunchSupervisor daemonizes it; RunSupervisor starts the session's sandbox,
// publishes the socket and session.json, waits to be claimed and hands over to the Server (supervisor_server.h).
#include "src/session/supervisor.h"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/host_id_lease.h"
#include "sandbox/session.h"
#include "sandbox/spec/cgroup_text.h"
#include "src/cli/network.h"
#include "src/session/state.h"
#include "src/session/supervisor_server.h"

namespace nsbox::session {
namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

  supervisor_internal::Server server(config, std::move(*host_ids), std::move(*session), std::move(*listener),
                                     proxy.get(), std::move(terminate_read));
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
