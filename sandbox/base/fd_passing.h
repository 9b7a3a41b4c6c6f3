// Passing one file descriptor over a unix socket (SCM_RIGHTS), async-signal-safe.
#pragma once

namespace nsbox {

// Passes one descriptor over a unix socket (SCM_RIGHTS). Async-signal-safe: used between clone and execve.
// Returns 0, or -1 with errno.
int SendFd(int socket, int fd);
// Takes one descriptor sent by SendFd (close-on-exec). Returns it; -1 with errno EAGAIN when nothing is there yet
// (non-blocking socket), or ENOMSG when the peer closed without sending one.
int ReceiveFd(int socket);

}  // namespace nsbox
