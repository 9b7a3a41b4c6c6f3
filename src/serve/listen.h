// Where nsbox serve listens and keeps its state: the default runtime directory, made private; the check that sandboxes
// cannot see the socket or the state; the one-server lock on the state directory; the Unix and TCP listening sockets.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox::serve {

// The directory of the socket and the state when no option names them: /run/nsbox as root, else
// $XDG_RUNTIME_DIR/nsbox, or /tmp/nsbox-UID without it.
std::string DefaultRuntimeDir();

// The socket and the sessions' state must be somewhere no sandbox sees: the host view shows /usr, the merged-/usr
// links and parts of /etc, read-only, and nothing of /run, /tmp, /home or /root. The check is on the path as the
// kernel resolves it: no "." or ".." component, and the part that exists with its symbolic links followed.
Status CheckHiddenFromSandboxes(std::string_view flag, const std::string& path);

// One server per state directory: another would end this one's sessions as a predecessor's. The lock is the open
// directory's (flock), released by the kernel when the server dies however it dies; not inherited across exec.
StatusOr<UniqueFd> LockStateDir(const std::string& state_dir);

// The socket file this server bound: it removes the file at its end only while the name is still that socket (another
// server may have taken the name over since, and must keep it).
struct SocketFile {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  void Remove() const;
};

// A Unix socket listening on `path`, the file it bound in `bound_file`. `group` (may be empty): the group the socket is
// given, by name or number, so that its members' uids (each one also given --allow-uid) can connect; the mode stays
// 0660.
StatusOr<UniqueFd> ListenUnix(const std::string& path, const std::string& group, SocketFile* bound_file);

// A TCP socket listening on `host_port` (--listen HOST:PORT, both numeric).
StatusOr<UniqueFd> ListenTcp(const std::string& host_port);

// The default directory of the socket (and state): made, or found, and then checked as the sessions' state root is,
// since the socket in it carries every client's code and secrets: another user's pre-made /tmp/nsbox-UID would let
// that user take the socket's place. Root's /run/nsbox is root's and not writable by others.
Status MakePrivateDir(const std::string& dir, mode_t mode);

}  // namespace nsbox::serve
