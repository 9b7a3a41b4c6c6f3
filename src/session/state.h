// Session state on disk: the root-only state directory, one directory per session with its record and socket.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

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

// Every live session under `root`. Sessions whose supervisor is gone are cleaned up on the way (their pid 1 is
// killed if it somehow survived, and their directory removed).
std::vector<SessionRecord> ListSessions(const std::string& root);
// A live session by id or name (after CheckStateRootIfPresent); "no such session" otherwise.
StatusOr<SessionRecord> FindSession(const std::string& root, const std::string& ref);

// A fresh session id: "s" and 12 hex digits.
std::string NewSessionId();
// Names are [A-Za-z0-9._-], 1 to 64 characters, and do not start with '.' or '-'.
bool ValidSessionName(const std::string& name);

// Removes a session directory and what it holds (the record, the socket); no error when already gone.
void RemoveSessionDir(const std::string& dir);

// Connects to a session's supervisor, refused unless the peer (SO_PEERCRED) runs as the caller's uid.
StatusOr<UniqueFd> ConnectSession(const SessionRecord& session);
// One request and its answer. `send_fd` travels with the request; a descriptor in the answer goes to *received_fd.
// An answer {"ok": false, "error": E} becomes an error with message E.
StatusOr<nlohmann::json> Request(const SessionRecord& session, const nlohmann::json& request, int send_fd = -1,
                                 UniqueFd* received_fd = nullptr);

}  // namespace nsbox::session
