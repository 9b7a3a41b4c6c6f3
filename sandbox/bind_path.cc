// Bind paths by descriptor: a component-by-component walk with O_PATH|O_NOFOLLOW, and the kernel filesystem test.
// Runs after clone too: no allocation, only syscalls and stack buffers.
#include "sandbox/bind_path.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>

namespace nsbox {
namespace {

constexpr int kMaxLinks = 40;  // the kernel's own MAXSYMLINKS

void CopyLinkName(char* out, size_t size, const char* name) {
  if (!out || size == 0) return;
  size_t n = strnlen(name, size - 1);
  memcpy(out, name, n);
  out[n] = '\0';
}

int WalkFail(int fd, int err) {
  if (fd >= 0) ::close(fd);
  errno = err;
  return -1;
}

// The next component of path from *pos into name; false at the end. ENAMETOOLONG in *err for an overlong one.
bool NextComponent(const char* path, size_t* pos, char (&name)[NAME_MAX + 1], int* err) {
  while (path[*pos] == '/') ++*pos;
  if (path[*pos] == '\0') return false;
  size_t start = *pos;
  while (path[*pos] != '/' && path[*pos] != '\0') ++*pos;
  size_t len = *pos - start;
  if (len > NAME_MAX) {
    *err = ENAMETOOLONG;
    return false;
  }
  memcpy(name, path + start, len);
  name[len] = '\0';
  return true;
}

bool MoreComponents(const char* path, size_t pos) {
  while (path[pos] == '/') ++pos;
  return path[pos] != '\0';
}

bool SameInodeAs(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// A link only root could have made: root owns it and its directory, and nobody else may write that directory.
bool MadeByRoot(const struct stat& link, const struct stat& dir) {
  return link.st_uid == 0 && dir.st_uid == 0 && (dir.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

// One openat2 for a path with no symbolic link in it, the common case; -1 (any errno) sends the caller to its
// component walk, which also explains a refusal. `resolve` always holds RESOLVE_NO_SYMLINKS, so that this takes
// nothing the walk would refuse.
int OpenWithoutLinks(int root_fd, const char* path, uint64_t flags, uint64_t resolve) {
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC;
  how.resolve = resolve | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  while (*path == '/') ++path;
  return static_cast<int>(::syscall(SYS_openat2, root_fd, *path ? path : ".", &how, sizeof how));
}

// The walk of OpenMountPoint from `dir` (which it takes over) through the component `name`: made when missing (the
// last one as a directory or an empty file), then opened without following it. The new directory, or -1.
int StepIntoMountPoint(int dir, const char* name, bool last, bool directory, char* bad_link, size_t bad_link_size) {
  if (!last || directory) {
    if (::mkdirat(dir, name, 0755) != 0 && errno != EEXIST) return WalkFail(dir, errno);
  } else {
    // O_EXCL: never opens (a fifo, a device) what is there already; O_NOFOLLOW with it refuses a link.
    int made = ::openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (made >= 0)
      ::close(made);
    else if (errno != EEXIST)
      return WalkFail(dir, errno);
  }
  int next = ::openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (next < 0) return WalkFail(dir, errno);
  ::close(dir);
  struct stat st;
  if (::fstat(next, &st) != 0) return WalkFail(next, errno);
  if (S_ISLNK(st.st_mode)) {
    CopyLinkName(bad_link, bad_link_size, name);
    return WalkFail(next, ELOOP);
  }
  if (!last && !S_ISDIR(st.st_mode)) return WalkFail(next, ENOTDIR);
  return next;
}

}  // namespace

int OpenHostPath(int root_fd, const char* path, char* bad_link, size_t bad_link_size) {
  // No link at all on the way: ".." stays below root_fd (RESOLVE_IN_ROOT) as in the walk.
  if (int fd = OpenWithoutLinks(root_fd, path, O_PATH, RESOLVE_IN_ROOT); fd >= 0) return fd;
  struct stat root_st;
  if (::fstat(root_fd, &root_st) != 0) return -1;
  char rest[PATH_MAX];  // what is left to walk; a followed link's target is put in front of it
  size_t path_len = strlen(path);
  if (path_len >= sizeof rest) return WalkFail(-1, ENAMETOOLONG);
  memcpy(rest, path, path_len + 1);
  int dir = ::openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  size_t pos = 0;
  int links = 0;
  char name[NAME_MAX + 1];
  int err = 0;
  while (NextComponent(rest, &pos, name, &err)) {
    if (strcmp(name, ".") == 0) continue;
    if (strcmp(name, "..") == 0) {
      struct stat dir_st;
      if (::fstat(dir, &dir_st) != 0) return WalkFail(dir, errno);
      if (SameInodeAs(dir_st, root_st)) continue;  // never above the root
      int up = ::openat(dir, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (up < 0) return WalkFail(dir, errno);
      ::close(dir);
      dir = up;
      continue;
    }
    int next = ::openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return WalkFail(dir, errno);
    struct stat st;
    if (::fstat(next, &st) != 0) {
      ::close(next);
      return WalkFail(dir, errno);
    }
    if (S_ISLNK(st.st_mode)) {
      struct stat dir_st;
      if (::fstat(dir, &dir_st) != 0) {
        ::close(next);
        return WalkFail(dir, errno);
      }
      if (!MadeByRoot(st, dir_st)) {  // the link named in bad_link: the caller says why it is refused
        CopyLinkName(bad_link, bad_link_size, name);
        ::close(next);
        return WalkFail(dir, ELOOP);
      }
      if (++links > kMaxLinks) {  // a loop (or a chain too long): ELOOP alone, no link to blame
        ::close(next);
        return WalkFail(dir, ELOOP);
      }
      char target[PATH_MAX];
      ssize_t n = ::readlinkat(next, "", target, sizeof target);
      ::close(next);
      if (n <= 0 || static_cast<size_t>(n) >= sizeof target) return WalkFail(dir, n < 0 ? errno : ENAMETOOLONG);
      // rest = target "/" what was left after the link.
      size_t left = strlen(rest + pos);
      if (static_cast<size_t>(n) + 1 + left >= sizeof rest) return WalkFail(dir, ENAMETOOLONG);
      memmove(rest + n + 1, rest + pos, left + 1);
      memcpy(rest, target, static_cast<size_t>(n));
      rest[n] = '/';
      pos = 0;
      if (target[0] == '/') {
        int top = ::openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (top < 0) return WalkFail(dir, errno);
        ::close(dir);
        dir = top;
      }
      continue;
    }
    ::close(dir);
    dir = next;
    if (!S_ISDIR(st.st_mode) && MoreComponents(rest, pos)) return WalkFail(dir, ENOTDIR);
  }
  if (err != 0) return WalkFail(dir, err);
  return dir;
}

int OpenMountPoint(int root_fd, const char* path, bool directory, char* bad_link, size_t bad_link_size) {
  // The common case first: the parent exists, reached without a link (and without "." or "..", which the walk
  // refuses), so only the last component is made.
  const char* slash = strrchr(path, '/');
  const char* last_name = slash ? slash + 1 : path;
  const bool plain = strstr(path, "/./") == nullptr && strstr(path, "/../") == nullptr && strncmp(path, "./", 2) != 0 &&
                     strncmp(path, "../", 3) != 0;
  if (plain && *last_name && strcmp(last_name, ".") != 0 && strcmp(last_name, "..") != 0 &&
      strlen(last_name) <= NAME_MAX && static_cast<size_t>(last_name - path) < PATH_MAX) {
    char parent[PATH_MAX];
    size_t parent_len = static_cast<size_t>(last_name - path);
    memcpy(parent, path, parent_len);
    parent[parent_len] = '\0';
    int dir = OpenWithoutLinks(root_fd, parent, O_PATH | O_DIRECTORY, RESOLVE_BENEATH);
    if (dir >= 0) return StepIntoMountPoint(dir, last_name, true, directory, bad_link, bad_link_size);
  }
  int dir = ::openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  size_t pos = 0;
  char name[NAME_MAX + 1];
  int err = 0;
  bool any = false;
  while (NextComponent(path, &pos, name, &err)) {
    any = true;
    const bool last = !MoreComponents(path, pos);
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return WalkFail(dir, EINVAL);  // the plan has none
    dir = StepIntoMountPoint(dir, name, last, directory, bad_link, bad_link_size);
    if (dir < 0) return -1;
  }
  if (err != 0) return WalkFail(dir, err);
  if (!any) return WalkFail(dir, EINVAL);  // never the root itself
  return dir;
}

const char* KernelFsBindRefusal(int root_fd, int fd) {
  struct stat st, root_st;
  if (::fstat(fd, &st) != 0 || ::fstat(root_fd, &root_st) != 0) return "it cannot be examined (fstat)";
  if (SameInodeAs(st, root_st)) return "it is the host's root directory";
  struct statfs sfs;
  if (::fstatfs(fd, &sfs) != 0) return "it cannot be examined (fstatfs)";
  struct Magic {
    unsigned long type;
    const char* refusal;
  };
  static constexpr Magic kKernelFs[] = {
      {PROC_SUPER_MAGIC, "it is on a proc filesystem (the host's processes and kernel state)"},
      {SYSFS_MAGIC, "it is on sysfs (the host's kernel and devices)"},
      {CGROUP_SUPER_MAGIC, "it is on a cgroup filesystem"},
      {CGROUP2_SUPER_MAGIC, "it is on a cgroup filesystem"},
      {DEBUGFS_MAGIC, "it is on debugfs"},
      {TRACEFS_MAGIC, "it is on tracefs"},
      {SECURITYFS_MAGIC, "it is on securityfs"},
      {SELINUX_MAGIC, "it is on selinuxfs"},
      {SMACK_MAGIC, "it is on smackfs"},
      {BPF_FS_MAGIC, "it is on the bpf filesystem"},
      {PSTOREFS_MAGIC, "it is on pstore"},
      {EFIVARFS_MAGIC, "it is on efivarfs"},
      {DEVPTS_SUPER_MAGIC, "it is on devpts (the host's terminals)"},
      {0x19800202 /* MQUEUE_MAGIC */, "it is on the host's mqueue filesystem"},
      {NSFS_MAGIC, "it is a namespace file"},
      {BINFMTFS_MAGIC, "it is on binfmt_misc"},
      {0x62656570 /* CONFIGFS_MAGIC */, "it is on configfs"},
      {0x65735543 /* FUSECTL_SUPER_MAGIC */, "it is on fusectl"},
  };
  for (const Magic& magic : kKernelFs)
    if (static_cast<unsigned long>(sfs.f_type) == magic.type) return magic.refusal;
  // devtmpfs reports tmpfs's magic: the host's /dev is told by its device number, when it is a mount of its own.
  struct stat dev_st;
  if (::fstatat(root_fd, "dev", &dev_st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(dev_st.st_mode) &&
      dev_st.st_dev != root_st.st_dev && dev_st.st_dev == st.st_dev)
    return "it is on the host's /dev (device nodes)";
  return nullptr;
}

}  // namespace nsbox
