// Session state on disk: where it lives, how sessions are found, and the cleanup of sessions whose supervisor died.
#include "src/session/state.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/spec/cgroup_text.h"
#include "src/session/wire.h"

namespace nsbox::session {

std::string StateRoot() {
  if (const char* env = std::getenv("NSBOX_STATE_DIR"); env && *env) return env;
  if (::geteuid() == 0) return "/run/nsbox/sessions";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg) return std::string(xdg) + "/nsbox/sessions";
  return fmt::format("/tmp/nsbox-{}/sessions", ::geteuid());
}

namespace {

// Every directory from / to `path` (resolved) is one that only the user or root can change. `root` names the state
// directory in the messages.
Status CheckComponents(const std::string& root, const std::string& path, uid_t uid) {
  // Else another user could swap a component (a pre-made /tmp/nsbox-UID) and serve the user's sessions, receiving
  // their code, environment and files. A root-owned sticky directory (/tmp) lets others add entries but not replace
  // the user's.
  std::vector<std::string> parts{"/"};
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') parts.push_back(path.substr(0, i));
  for (const std::string& part : parts) {
    struct stat st;
    if (::lstat(part.c_str(), &st) != 0) return Status::Errno(fmt::format("lstat({})", part));
    if (!S_ISDIR(st.st_mode))
      return Status::Error(fmt::format("state directory {}: {} is not a directory", root, part));
    if (st.st_uid != 0 && st.st_uid != uid)
      return Status::Error(fmt::format("state directory {}: {} belongs to uid {}, not to uid {} or root (another user "
                                       "made it? set NSBOX_STATE_DIR or XDG_RUNTIME_DIR to a directory of your own)",
                                       root, part, st.st_uid, uid));
    bool others_may_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (others_may_write && !(st.st_uid == 0 && (st.st_mode & S_ISVTX)))
      return Status::Error(fmt::format("state directory {}: {} is writable by other users (mode {:04o})", root, part,
                                       st.st_mode & 07777));
  }
  return OkStatus();
}

// Each symbolic link on the way to `root` as given, before it is resolved: only the user or root may have made it.
// The resolved path's check alone took another user's link (a /tmp/nsbox-UID of theirs pointing at the user's home),
// which they could later point at a directory of their own, between a check and a use.
Status CheckLinksOnTheWay(const std::string& root, uid_t uid) {
  for (size_t i = 1; i <= root.size(); ++i) {
    if (i != root.size() && root[i] != '/') continue;
    const std::string part = root.substr(0, i);
    struct stat st;
    if (::lstat(part.c_str(), &st) != 0) return OkStatus();  // what does not exist is looked at when it is made
    if (S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != uid)
      return Status::Error(fmt::format("state directory {}: {} is a symbolic link made by uid {}, not by uid {} or "
                                       "root (another user made it? set NSBOX_STATE_DIR or XDG_RUNTIME_DIR to a "
                                       "directory of your own)",
                                       root, part, st.st_uid, uid));
  }
  return OkStatus();
}

}  // namespace

Status CheckStateRoot(const std::string& root, uid_t uid) {
  NSBOX_RETURN_IF_ERROR(CheckLinksOnTheWay(root, uid));
  char resolved[PATH_MAX];
  if (!::realpath(root.c_str(), resolved)) return Status::Errno(fmt::format("realpath({})", root));
  const std::string path = resolved;
  NSBOX_RETURN_IF_ERROR(CheckComponents(root, path, uid));
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Status::Errno(fmt::format("lstat({})", path));
  if (st.st_uid != uid || (st.st_mode & 077) != 0)
    return Status::Error(fmt::format("state directory {} must belong to uid {} with mode 0700", root, uid));
  return OkStatus();
}

namespace {

// `root`, or where it does not exist yet its nearest ancestor that does: a directory another user made on the way
// (a pre-made /tmp/nsbox-UID) is named as such, not met later as a bare EACCES or an empty listing.
Status CheckExistingPart(const std::string& root) {
  NSBOX_RETURN_IF_ERROR(CheckLinksOnTheWay(root, ::geteuid()));
  std::string existing = root;
  struct stat st;
  // EACCES too: below another user's 0700 /tmp/nsbox-UID nothing can be looked at; that directory is then named.
  while (::lstat(existing.c_str(), &st) != 0 && (errno == ENOENT || errno == EACCES)) {
    auto slash = existing.rfind('/');
    if (slash == std::string::npos || existing.size() <= 1) return OkStatus();
    existing = slash == 0 ? "/" : existing.substr(0, slash);
  }
  if (existing == root) return CheckStateRoot(root, ::geteuid());
  char resolved[PATH_MAX];
  if (!::realpath(existing.c_str(), resolved)) return Status::Errno(fmt::format("realpath({})", existing));
  return CheckComponents(root, resolved, ::geteuid());
}

}  // namespace

Status EnsureStateRoot(const std::string& root) {
  NSBOX_RETURN_IF_ERROR(CheckExistingPart(root));
  // mkdir -p; the directories nsbox makes are 0700 (sessions of one user are invisible to others).
  for (size_t i = 1; i <= root.size(); ++i) {
    if (i != root.size() && root[i] != '/') continue;
    std::string part = root.substr(0, i);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return Status::Errno(fmt::format("mkdir({})", part));
  }
  return CheckStateRoot(root, ::geteuid());
}

namespace {

// /proc/PID/stat; nullopt when the process is gone (ENOENT, or ESRCH as it exits), an error for any other failure.
StatusOr<std::optional<std::string>> ReadProcStat(pid_t pid) {
  const std::string path = fmt::format("/proc/{}/stat", pid);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ESRCH) return std::optional<std::string>();
    return Status::Errno(fmt::format("open({})", path));
  }
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd.get(), buffer, sizeof buffer)) < 0 && errno == EINTR) {
  }
  if (n < 0) {
    if (errno == ESRCH) return std::optional<std::string>();
    return Status::Errno(fmt::format("read({})", path));
  }
  return std::optional<std::string>(std::string(buffer, static_cast<size_t>(n)));
}

}  // namespace

uint64_t ProcessStartTime(pid_t pid) {
  if (pid <= 0) return 0;
  auto stat = ReadProcStat(pid);
  return stat.ok() && *stat ? cgroup_internal::ParseStartTime(**stat) : 0;
}

char ProcessState(pid_t pid) {
  if (pid <= 0) return 0;
  auto stat = ReadProcStat(pid);
  return stat.ok() && *stat ? cgroup_internal::ParseProcessState(**stat) : 0;
}

std::string DescribeSession(const SessionRecord& session) {
  if (session.name().empty()) return fmt::format("session {}", session.id());
  return fmt::format("session {} ({})", session.id(), session.name());
}

void RemoveSessionDir(const std::string& dir) {
  for (const char* name : {"socket", "session.json", "session.json.tmp"}) ::unlink((dir + "/" + name).c_str());
  ::rmdir(dir.c_str());
}

namespace {

// A zombie (or a dying process, X) is dead: a killed supervisor stays a zombie until init reaps it.
bool Exited(char state) { return state == 0 || state == 'Z' || state == 'X'; }

// Whether the process a record names (pid and start time) still runs: false when it is gone, a zombie, or another
// process now has its pid; an error when its /proc entry could not be read for another reason (nsbox out of
// descriptors or memory). Not knowing is not dead: a session is never cleaned up on a guess.
StatusOr<bool> RecordedProcessRuns(pid_t pid, uint64_t start) {
  if (pid <= 0 || start == 0) return false;
  auto stat = ReadProcStat(pid);
  if (!stat.ok()) return stat.status();
  if (!*stat) return false;
  return cgroup_internal::ParseStartTime(**stat) == start && !Exited(cgroup_internal::ParseProcessState(**stat));
}

StatusOr<bool> SupervisorAlive(const nlohmann::json& record) {
  return RecordedProcessRuns(record.value("supervisor_pid", 0), record.value("supervisor_start_time", uint64_t{0}));
}

// The supervisor is gone: its pid 1 died with it (PR_SET_PDEATHSIG); make sure, then remove what is left.
void CleanUpDead(const std::string& dir, const nlohmann::json& record) {
  pid_t pid1 = record.value("pid1", 0);
  uint64_t start = record.value("pid1_start_time", uint64_t{0});
  if (pid1 > 0 && start != 0 && ProcessStartTime(pid1) == start) ::kill(pid1, SIGKILL);
  RemoveSessionDir(dir);
}

}  // namespace

StatusOr<bool> SupervisorRuns(const SessionRecord& session) { return SupervisorAlive(session.json); }

namespace {

bool LooksLikeSessionId(const std::string& name) { return !name.empty() && name[0] == 's' && name.size() == 13; }

// The live session whose directory this is; nullopt (after cleaning up a dead one) otherwise; an error, with nothing
// removed, when what tells could not be read (EMFILE, ENOMEM: a busy server must not take a live session for dead).
StatusOr<std::optional<SessionRecord>> ReadLiveSession(const std::string& path) {
  // A session still being created has no record yet; one older than a minute never will. A record that is not
  // JSON (written whole, by rename) names no supervisor to end: its directory goes by the same rule.
  auto remove_if_old = [&] {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && ::time(nullptr) - st.st_mtime > 60) RemoveSessionDir(path);
    return std::optional<SessionRecord>();
  };
  // The record names processes to kill when its supervisor is dead: only one the user wrote is believed.
  struct stat dir_st, record_st;
  if (::lstat(path.c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode) || dir_st.st_uid != ::geteuid())
    return std::optional<SessionRecord>();
  if (::lstat((path + "/session.json").c_str(), &record_st) == 0 &&
      (!S_ISREG(record_st.st_mode) || record_st.st_uid != ::geteuid()))
    return std::optional<SessionRecord>();
  auto text = ReadFile(path + "/session.json", 1 << 20);
  if (!text.ok()) {
    if (text.status().kind() != ErrorKind::kNotFound) return text.status();
    return StatusOr<std::optional<SessionRecord>>(remove_if_old());
  }
  auto record = nlohmann::json::parse(*text, nullptr, false);
  if (record.is_discarded() || !record.is_object()) return StatusOr<std::optional<SessionRecord>>(remove_if_old());
  auto alive = SupervisorAlive(record);
  if (!alive.ok()) return alive.status().Wrap("reading the session's supervisor");
  if (!*alive) {
    CleanUpDead(path, record);
    return std::optional<SessionRecord>();
  }
  return std::optional<SessionRecord>(SessionRecord{record, path});
}

}  // namespace

std::vector<SessionRecord> ListSessions(const std::string& root) {
  std::vector<SessionRecord> sessions;
  DIR* dir = ::opendir(root.c_str());
  if (!dir) return sessions;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (!LooksLikeSessionId(name)) continue;
    // One that cannot be read now is left out, and left as it is.
    if (auto live = ReadLiveSession(root + "/" + name); live.ok() && *live) sessions.push_back(std::move(**live));
  }
  ::closedir(dir);
  std::sort(sessions.begin(), sessions.end(), [](const SessionRecord& a, const SessionRecord& b) {
    return a.json.value("created_unix_ms", int64_t{0}) < b.json.value("created_unix_ms", int64_t{0});
  });
  return sessions;
}

Status CheckStateRootIfPresent(const std::string& root) {
  // No session was ever made there when it does not exist; its existing ancestors must still be the user's or root's.
  return CheckExistingPart(root);
}

StatusOr<SessionRecord> FindSession(const std::string& root, const std::string& ref) {
  if (ref.empty()) return Status::Error("empty session id");
  if (Status safe = CheckStateRootIfPresent(root); !safe.ok()) return safe;
  // An id names its directory: that record alone, not every session's (each exec's client looks one up).
  if (LooksLikeSessionId(ref) && ref.find('/') == std::string::npos) {
    auto live = ReadLiveSession(root + "/" + ref);
    if (!live.ok()) return live.status().Wrap(fmt::format("reading session {}", ref));
    if (*live && (*live)->id() == ref) return std::move(**live);
  }
  for (auto& s : ListSessions(root))
    if (s.id() == ref || s.name() == ref) return s;
  return Status::Error(ErrorKind::kNotFound,
                       fmt::format("no such session: {} (it may have ended; see `nsbox session ls`)", ref));
}

std::string NewSessionId() {
  unsigned char bytes[6];
  if (::getrandom(bytes, sizeof bytes, 0) != sizeof bytes) {
    // getrandom does not fail for 6 bytes once the pool is ready; the pid and time still make a distinct id.
    uint64_t fallback = static_cast<uint64_t>(::getpid()) ^ static_cast<uint64_t>(::time(nullptr)) << 16;
    memcpy(bytes, &fallback, sizeof bytes);
  }
  std::string id = "s";
  for (unsigned char b : bytes) id += fmt::format("{:02x}", b);
  return id;
}

bool ValidSessionName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  for (char c : name)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

StatusOr<UniqueFd> ConnectSession(const SessionRecord& session, Deadline deadline, bool* timed_out) {
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return Status::Errno("socket(AF_UNIX)");
  if (deadline) {
    // A unix connect waits for room in the listener's backlog for up to SO_SNDTIMEO (a nonblocking one would not
    // wait at all); a stopped supervisor's backlog fills and stays full.
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(*deadline - std::chrono::steady_clock::now());
    int64_t us = std::max<int64_t>(left.count(), 1000);
    struct timeval tv = {static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
    if (::setsockopt(sock.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
      return Status::Errno("setsockopt(SO_SNDTIMEO)");
  }
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::string path = session.socket_path();
  if (path.size() >= sizeof addr.sun_path) return Status::Error(fmt::format("socket path too long: {}", path));
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  while (::connect(sock.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EINTR) continue;
    if ((errno == EAGAIN || errno == EINPROGRESS) && timed_out) *timed_out = true;
    return Status::Errno(fmt::format("connect({})", path));
  }
  // Nothing is sent (code, environment, files) before the server is known to be the user's own supervisor.
  struct ucred peer = {};
  socklen_t length = sizeof peer;
  if (::getsockopt(sock.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0)
    return Status::Errno(fmt::format("getsockopt({}, SO_PEERCRED)", path));
  if (peer.uid != ::geteuid())
    return Status::Error(fmt::format("{} is served by uid {}, not by uid {}: refusing to talk to it", path, peer.uid,
                                     ::geteuid()));
  return sock;
}

namespace {

std::string FormatDeadline(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return fmt::format("{} s", ms.count() / 1000);
  return fmt::format("{} ms", ms.count());
}

// "its supervisor (pid N, stopped)", from the record and /proc, for errors about a supervisor that did not answer.
std::string DescribeSupervisor(const SessionRecord& session) {
  pid_t pid = session.json.value("supervisor_pid", 0);
  uint64_t start = session.json.value("supervisor_start_time", uint64_t{0});
  if (pid <= 0 || start == 0 || ProcessStartTime(pid) != start) return "its supervisor";
  char state = ProcessState(pid);
  if (state == 'T' || state == 't') return fmt::format("its supervisor (pid {}, stopped)", pid);
  if (Exited(state)) return fmt::format("its supervisor (pid {}, exited)", pid);
  return fmt::format("its supervisor (pid {})", pid);
}

}  // namespace

StatusOr<nlohmann::json> Request(const SessionRecord& session, const nlohmann::json& request,
                                 const RequestOptions& options) {
  RequestOutcome ignored;
  RequestOutcome& outcome = options.outcome ? *options.outcome : ignored;
  outcome = {};
  const Deadline deadline = std::chrono::steady_clock::now() + options.deadline;
  const std::string op = request.value("op", "");
  auto not_answering = [&](std::string_view what) {
    outcome.timed_out = true;
    return Status::Error(fmt::format("{}: {} did not {} within {}", DescribeSession(session),
                                     DescribeSupervisor(session), what, FormatDeadline(options.deadline)));
  };
  bool timed_out = false;
  auto sock = ConnectSession(session, deadline, &timed_out);
  if (!sock.ok()) {
    if (timed_out) return not_answering("accept the connection");
    return sock.status().Wrap(DescribeSession(session));
  }
  Status sent = SendMessage(sock->get(), request, options.send_fd, deadline, &timed_out);
  outcome.delivered = sent.ok();
  MessageReader reader(sock->get(), options.max_answer_bytes, deadline);
  if (options.cancel_fd >= 0 && sent.ok()) {
    reader.SetInterrupt(options.cancel_fd, [&]() -> Deadline {
      outcome.cancelled = true;
      (void)::shutdown(sock->get(), SHUT_WR);
      return std::min(*deadline, std::chrono::steady_clock::now() + kExecGrace);
    });
  }
  // A refusal (another user's session) may arrive, and the socket close, before the request is sent whole.
  auto answer = reader.Next();
  while (answer.ok() && answer->contains("type")) {
    if (options.on_stream && !options.on_stream(*answer))
      return Status::Error(fmt::format("{}: stopped reading the {} request's output", DescribeSession(session), op));
    answer = reader.Next();
  }
  outcome.answered = answer.ok();
  if (!sent.ok() && (!answer.ok() || answer->value("ok", true))) {
    if (timed_out) return not_answering(fmt::format("take the {} request", op));
    return sent.Wrap(DescribeSession(session));
  }
  if (!answer.ok()) {
    if (reader.timed_out()) return not_answering(fmt::format("answer the {} request", op));
    if (reader.too_large())
      return Status::Error(fmt::format("{}: its answer to the {} request was larger than the {} MiB allowed",
                                       DescribeSession(session), op, options.max_answer_bytes >> 20));
    return Status::Error(fmt::format("{} ended before answering the {} request ({})", DescribeSession(session), op,
                                     answer.status().message()));
  }
  if (!answer->value("ok", false)) return Status::Error(answer->value("error", "the session refused the request"));
  if (options.received_fd && !reader.fds().empty()) *options.received_fd = std::move(reader.fds().front());
  return answer;
}

namespace {

// The real and effective uid of a process (the Uid: line of /proc/PID/status); nullopt when it cannot be read.
std::optional<std::pair<uid_t, uid_t>> ProcessUids(pid_t pid) {
  auto status = ReadFile(fmt::format("/proc/{}/status", pid), 1 << 16);
  if (!status.ok()) return std::nullopt;
  auto at = status->find("\nUid:");
  if (at == std::string::npos) return std::nullopt;
  unsigned long real = 0, effective = 0;
  if (std::sscanf(status->c_str() + at + 5, "%lu %lu", &real, &effective) != 2) return std::nullopt;
  return std::make_pair(static_cast<uid_t>(real), static_cast<uid_t>(effective));
}

}  // namespace

Status EndUnresponsiveSession(const SessionRecord& session, std::chrono::milliseconds grace) {
  const std::chrono::milliseconds wait = std::chrono::seconds(5);
  const std::string who = DescribeSession(session);
  pid_t pid = session.json.value("supervisor_pid", 0);
  uint64_t start = session.json.value("supervisor_start_time", uint64_t{0});
  if (pid <= 0 || start == 0) return Status::Error(fmt::format("{}: its record names no supervisor process", who));
  // The pidfd holds on to one process: the start time read after it was opened says that process is the recorded
  // one (a process with the recorded pid and start time existed before the open), so the signal below cannot reach
  // a process that later took the pid.
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd && errno != ESRCH) return Status::Errno(fmt::format("pidfd_open({})", pid)).Wrap(who);
  if (!pidfd || ProcessStartTime(pid) != start || Exited(ProcessState(pid))) {
    CleanUpDead(session.dir, session.json);  // it died meanwhile: what is left goes as for any dead session
    return OkStatus();
  }
  auto uids = ProcessUids(pid);
  if (!uids || uids->first != ::geteuid() || uids->second != ::geteuid())
    return Status::Error(fmt::format("{}: process {} does not run as uid {}: not killing it", who, pid, ::geteuid()));
  // The pidfd is readable once the process has exited (a zombie, init's to reap): its threads are gone and pid 1
  // has its PDEATHSIG.
  auto exits_within = [&](std::chrono::milliseconds limit) {
    struct pollfd fd = {pidfd.get(), POLLIN, 0};
    int rc;
    while ((rc = ::poll(&fd, 1, static_cast<int>(limit.count()))) < 0 && errno == EINTR) {
    }
    return rc > 0;
  };
  if (grace.count() > 0 && exits_within(grace)) {
    CleanUpDead(session.dir, session.json);
    return OkStatus();
  }
  if (::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0) != 0 && errno != ESRCH)
    return Status::Errno(fmt::format("pidfd_send_signal({}, SIGKILL)", pid)).Wrap(who);
  if (!exits_within(wait))
    return Status::Error(fmt::format("{}: its supervisor (pid {}) was killed but did not exit within {}", who, pid,
                                     FormatDeadline(wait)));
  CleanUpDead(session.dir, session.json);
  return OkStatus();
}

}  // namespace nsbox::session
