// Session state on disk: the root-only state directory, one directory per session with its record and socket.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "src/session/wire.h"

namespace nsbox::session {

// $NSBOX_STATE_DIR, else /run/nsbox/sessions for root, else $XDG_RUNTIME_DIR/nsbox/sessions or /tmp/nsbox-UID/sessions.
std::string StateRoot();
// Creates the state root (0700) when missing, then checks it (CheckStateRoot).
Status EnsureStateRoot(const std::string& root);
// Whether `root` is safe to keep uid's sessions in: it belongs to uid with mode 0700, and every directory on its
// (resolved) path belongs to uid or root and is not writable by others (a root-owned sticky directory such as /tmp
// excepted). Every verb checks it before it reads a session's record or talks to its socket.
Status CheckStateRoot(const std::string& root, uid_t uid);
// CheckStateRoot for the caller's uid, and OK when `root` does not exist (no session was made there).
Status CheckStateRootIfPresent(const std::string& root);

struct SessionRecord {
  nlohmann::json json;  // session.json as written by the supervisor
  std::string dir;      // <root>/<id>
  std::string id() const { return json.value("id", ""); }
  std::string name() const { return json.value("name", ""); }
  std::string socket_path() const { return dir + "/socket"; }
};

// The start time of a process (field 22 of /proc/PID/stat), 0 when it does not exist: pid + start time name one
// process for good, even after its pid is reused.
uint64_t ProcessStartTime(pid_t pid);

// Whether the session's supervisor (the record's pid and start time) still runs; an error when that could not be
// read (not knowing is not dead).
StatusOr<bool> SupervisorRuns(const SessionRecord& session);

// Every live session under `root`. Sessions whose supervisor is gone are cleaned up on the way (their pid 1 is
// killed if it somehow survived, and their directory removed).
std::vector<SessionRecord> ListSessions(const std::string& root);
// A live session by id or name (after CheckStateRootIfPresent); "no such session" (ErrorKind::kNotFound) otherwise.
StatusOr<SessionRecord> FindSession(const std::string& root, const std::string& ref);

// A fresh session id: "s" and 12 hex digits.
std::string NewSessionId();
// Names are [A-Za-z0-9._-], 1 to 64 characters, and do not start with '.' or '-'.
bool ValidSessionName(const std::string& name);

// Removes a session directory and what it holds (the record, the socket); no error when already gone.
void RemoveSessionDir(const std::string& dir);

// A process's state letter (field 3 of /proc/PID/stat: R, S, T for stopped, Z for a zombie …), 0 when it is gone.
char ProcessState(pid_t pid);

// "session ID" or "session ID (NAME)", as errors name a session.
std::string DescribeSession(const SessionRecord& session);

// How long a client waits for its supervisor, for the whole call (connect, send, answer). A supervisor that is
// stopped, hung or swamped must not hang its clients: past its deadline a call fails and says what did not answer.
// info (session ls) and workspace (cp) are quick for a supervisor that runs; an exec may take its --timeout and the
// grace after it (its kill, its report, the changed-file scan); rm waits up to 5 s for the session's other requests
// to take their answers (Server::Shutdown) before it answers.
inline constexpr std::chrono::milliseconds kInfoDeadline{5'000};
inline constexpr std::chrono::milliseconds kCallDeadline{10'000};
inline constexpr std::chrono::milliseconds kExecGrace{10'000};
inline constexpr std::chrono::milliseconds kRemoveDeadline{12'000};

// Where a request got to, for a caller that must tell "nothing reached the session" from "it may have acted".
struct RequestOutcome {
  bool delivered = false;  // the whole request is in the supervisor's socket: it may have acted on it
  bool answered = false;   // an answer came (possibly a refusal, {"ok": false})
  bool timed_out = false;  // the call ended at its deadline: the supervisor did not take or answer it in time
  bool cancelled = false;  // options.cancel_fd became readable and the supervisor was asked to cancel
};

struct RequestOptions {
  std::chrono::milliseconds deadline = kCallDeadline;  // for the whole call
  int send_fd = -1;                                     // travels with the request
  UniqueFd* received_fd = nullptr;                      // a descriptor in the answer goes here
  RequestOutcome* outcome = nullptr;
  // Stream messages before the answer ({"type": "stdout" | "stderr", "data": TEXT}, for an exec with "stream": true)
  // go here as they come; without it they are skipped. One that returns false stops the wait (the call fails).
  std::function<bool(const nlohmann::json& message)> on_stream = nullptr;
  size_t max_answer_bytes = 64 << 20;  // a larger answer fails the call (an exec's: MaxExecAnswerBytes)
  // Readable (a signalfd): the caller is stopping. Its end of the connection is shut for writing, which a supervisor
  // running an exec takes as a cancel (the exec is killed and answered), and the answer is waited for up to
  // kExecGrace more (never past the deadline). The descriptor is not read.
  int cancel_fd = -1;
};

// Connects to a session's supervisor, refused unless the peer (SO_PEERCRED) runs as the caller's uid. A listener
// whose backlog stays full (a stopped supervisor) fails the connect at the deadline, with *timed_out set.
StatusOr<UniqueFd> ConnectSession(const SessionRecord& session, Deadline deadline = std::nullopt,
                                  bool* timed_out = nullptr);
// One request and its answer, within options.deadline. An answer {"ok": false, "error": E} becomes an error with
// message E. Errors name the session and what did not answer (the connect, the request, the answer).
StatusOr<nlohmann::json> Request(const SessionRecord& session, const nlohmann::json& request,
                                 const RequestOptions& options = {});

// Ends a session whose supervisor does not answer (session rm): SIGKILL to the supervisor, but only if the process
// is verifiably the one that wrote the session's record (the recorded pid with the recorded start time, held by a
// pidfd while it is checked, and running as the caller's uid); then pid 1 if it outlived it (PR_SET_PDEATHSIG), and
// the state directory. The session's cgroup reaper removes its groups once its processes are gone. `grace`: how long
// a supervisor that may be ending on its own (its socket gone) gets to exit before it is killed. An error when the
// process is not the session's supervisor (nothing is killed then) or did not die within 5 s of the SIGKILL.
Status EndUnresponsiveSession(const SessionRecord& session,
                              std::chrono::milliseconds grace = std::chrono::milliseconds(0));

}  // namespace nsbox::session
