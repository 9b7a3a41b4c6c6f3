// Where nsbox serve listens and keeps its state (listen.h).
#include "src/serve/listen.h"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netdb.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "src/session/state.h"

namespace nsbox::serve {
namespace {

// A group by name, or by number.
StatusOr<gid_t> GroupId(const std::string& group) {
  gid_t gid = 0;
  auto [end, error] = std::from_chars(group.data(), group.data() + group.size(), gid);
  if (error == std::errc() && end == group.data() + group.size()) return gid;
  struct group entry, *found = nullptr;
  std::vector<char> buffer(16 << 10);
  if (::getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr)
    return Status::Error(fmt::format("--socket-group '{}': no such group", group));
  return found->gr_gid;
}

}  // namespace

std::string DefaultRuntimeDir() {
  if (::geteuid() == 0) return "/run/nsbox";
  const char* xdg = ::getenv("XDG_RUNTIME_DIR");
  if (xdg && *xdg) return std::string(xdg) + "/nsbox";
  return fmt::format("/tmp/nsbox-{}", ::geteuid());
}

Status CheckHiddenFromSandboxes(std::string_view flag, const std::string& path) {
  if (path.empty() || path[0] != '/') return Status::Error(fmt::format("{} '{}': give an absolute path", flag, path));
  for (size_t start = 1; start <= path.size();) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string_view part = std::string_view(path).substr(start, end - start);
    if (part == "." || part == "..")
      return Status::Error(fmt::format("{} {}: give the path without '.' or '..' components", flag, path));
    start = end + 1;
  }
  // The longest existing prefix, resolved; the rest does not exist yet and is appended as written.
  std::string existing = path, rest;
  while (existing.size() > 1 && ::access(existing.c_str(), F_OK) != 0) {
    size_t slash = existing.rfind('/');
    rest = existing.substr(slash) + rest;
    existing = slash == 0 ? "/" : existing.substr(0, slash);
  }
  char resolved[PATH_MAX];
  if (::realpath(existing.c_str(), resolved) == nullptr)
    return Status::Errno(fmt::format("{} {}: realpath({})", flag, path, existing));
  const std::string real = (std::string(resolved) + rest).substr(resolved[1] == '\0' && !rest.empty() ? 1 : 0);
  for (const char* shown : {"/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/lib32/", "/libx32/", "/etc/"})
    if ((real + "/").starts_with(shown))
      return Status::Error(
          fmt::format("{} {}: under {}{}, which sandboxes see (the host view); use /run or a "
                      "private directory",
                      flag, path, shown, real == path ? "" : " (it resolves to " + real + ")"));
  return nsbox::OkStatus();
}

StatusOr<UniqueFd> LockStateDir(const std::string& state_dir) {
  UniqueFd dir(::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return Status::Errno(fmt::format("--state-dir: open({})", state_dir));
  if (::flock(dir.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Status::Error(
          fmt::format("--state-dir {}: another nsbox serve is using it; give each server its own "
                      "--state-dir",
                      state_dir));
    return Status::Errno(fmt::format("--state-dir: flock({})", state_dir));
  }
  return dir;
}

void SocketFile::Remove() const {
  struct stat st;
  if (!path.empty() && ::lstat(path.c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino) ::unlink(path.c_str());
}

StatusOr<UniqueFd> ListenUnix(const std::string& path, const std::string& group, SocketFile* bound_file) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return Status::Error(fmt::format("--socket {}: path too long", path));
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // Two servers starting at once on one socket path would both find a stale file, both remove it and both bind,
  // one of them then unreachable: the check, the removal and the bind are done under a lock on the directory.
  const std::string parent = path.substr(0, std::max<size_t>(path.rfind('/'), 1));
  UniqueFd parent_dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_dir) return Status::Errno(fmt::format("--socket {}: open({})", path, parent));
  for (int waited_ms = 0; ::flock(parent_dir.get(), LOCK_EX | LOCK_NB) != 0; waited_ms += 10) {
    if (errno != EWOULDBLOCK) return Status::Errno(fmt::format("--socket {}: flock({})", path, parent));
    if (waited_ms >= 5000)
      return Status::Error(
          fmt::format("--socket {}: {} stayed locked for 5 s (another server starting?)", path, parent));
    ::usleep(10'000);
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status::Error(fmt::format("--socket {}: exists and is not a socket", path));
    // A socket someone answers on is another server's; a dead one is a predecessor's, killed before it could clean.
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
      return Status::Error(fmt::format("--socket {}: another server is listening on it", path));
    if (::unlink(path.c_str()) != 0) return Status::Errno(fmt::format("unlink(stale socket {})", path));
  }
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return Status::Errno("socket(AF_UNIX)");
  // Made 0660 from the start (umask), never reachable with a wider mode.
  mode_t old = ::umask(0117);
  int bound = ::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::umask(old);
  if (bound != 0) return Status::Errno(fmt::format("bind({})", path));
  if (!group.empty()) {
    auto gid = GroupId(group);
    if (!gid.ok()) {
      ::unlink(path.c_str());
      return gid.status();
    }
    if (::chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0) {
      Status failed = Status::Errno(fmt::format("chown({}, group {})", path, group));
      ::unlink(path.c_str());
      return failed;
    }
  }
  if (::listen(sock.get(), 256) != 0) return Status::Errno(fmt::format("listen({})", path));
  if (::lstat(path.c_str(), &st) != 0) return Status::Errno(fmt::format("lstat({})", path));
  *bound_file = SocketFile{path, st.st_dev, st.st_ino};
  return sock;
}

StatusOr<UniqueFd> ListenTcp(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size())
    return Status::Error(fmt::format("--listen '{}': expected HOST:PORT", host_port));
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  // getaddrinfo takes any number for a numeric service and keeps its low 16 bits: 99999 would bind 34463.
  unsigned port_number = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (error != std::errc() || end != port.data() + port.size() || port_number == 0 || port_number > 65535)
    return Status::Error(fmt::format("--listen '{}': the port must be a number from 1 to 65535", host_port));
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  struct addrinfo hints = {}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return Status::Error(
        fmt::format("--listen '{}': {} (give a numeric address and port)", host_port, gai_strerror(rc)));
  UniqueFd sock(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int bound = ::bind(sock.get(), found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (!sock || bound != 0) return Status::Errno(fmt::format("bind({})", host_port));
  if (::listen(sock.get(), 256) != 0) return Status::Errno(fmt::format("listen({})", host_port));
  return sock;
}

Status MakePrivateDir(const std::string& dir, mode_t mode) {
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return Status::Errno(fmt::format("mkdir({})", dir));
  if (::geteuid() != 0) return nsbox::session::CheckStateRoot(dir, ::geteuid());
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Status::Errno(fmt::format("lstat({})", dir));
  if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) != 0)
    return Status::Error(fmt::format("{} must be a directory of root's that no one else may write", dir));
  return nsbox::OkStatus();
}

}  // namespace nsbox::serve
