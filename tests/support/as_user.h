// AsUser: runs a function in a forked child as another uid and gid (tests that run as root, for what another user
// sees), and gives back the string it returned.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <optional>
#include <string>

namespace nsbox::testing {

// The string `fn` returned in a child running as uid:gid; nullopt when the child could not become that user or did
// not end normally. Needs root.
inline std::optional<std::string> AsUser(uid_t uid, gid_t gid, const std::function<std::string()>& fn) {
  int out[2];
  if (::pipe(out) != 0) return std::nullopt;
  pid_t child = ::fork();
  if (child < 0) return std::nullopt;
  if (child == 0) {
    ::close(out[0]);
    if (::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) ::_exit(2);
    const std::string text = fn();
    (void)!::write(out[1], text.data(), text.size());
    ::_exit(0);
  }
  ::close(out[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return text;
}

}  // namespace nsbox::testing
