// The mount namespace in the child: private propagation, a tmpfs base, each planned mount, read-only root, pivot_root.
// Runs after clone: no allocation, only syscalls and stack buffers.
#include "sandbox/mount_ns.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "sandbox/base/fs.h"

namespace nsbox {
namespace {

thread_local char step_buffer[240];

// A path as the user gave it: the host's without the /oldroot it is reached through, the sandbox's without /newroot.
const char* Shown(const char* path) {
  for (const char* prefix : {"/oldroot/", "/newroot/"})
    if (strncmp(path, prefix, 9) == 0) return path + 8;
  return path;
}

const char* Step(const char* call, const char* path) {
  snprintf(step_buffer, sizeof step_buffer, "%s(%s)", call, path);
  return step_buffer;
}

int SetMountAttr(const char* path, uint64_t set, bool recursive) {
  struct mount_attr attr = {};
  attr.attr_set = set;
  return static_cast<int>(::syscall(SYS_mount_setattr, AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &attr, sizeof attr));
}

// mkdir -p, mode 0755: the common case (parent exists) costs one mkdir; only ENOENT walks up.
int MakeDirs(const char* path) {
  if (::mkdir(path, 0755) == 0 || errno == EEXIST) return 0;
  if (errno != ENOENT) return -1;
  char buf[PATH_MAX];
  size_t len = strlen(path);
  if (len >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, len + 1);
  for (size_t i = 1; i <= len; ++i) {
    if (buf[i] == '/' || buf[i] == '\0') {
      char saved = buf[i];
      buf[i] = '\0';
      if (::mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      buf[i] = saved;
    }
  }
  return 0;
}

int MakeParent(const char* path) {
  char buf[PATH_MAX];
  size_t len = strlen(path);
  if (len >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, len + 1);
  char* slash = strrchr(buf, '/');
  if (!slash || slash == buf) return 0;
  *slash = '\0';
  return MakeDirs(buf);
}

// A mount point of the source's type: a directory for a directory, an empty file otherwise.
int MakeMountPoint(bool directory, const char* target, bool parent_exists) {
  if (!parent_exists && MakeParent(target) != 0) return -1;
  if (directory) return (::mkdir(target, 0755) == 0 || errno == EEXIST) ? 0 : -1;
  int fd = ::open(target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return errno == EEXIST ? 0 : -1;
  ::close(fd);
  return 0;
}

}  // namespace

int MountBaseAndPivotToIt(const char** step) {
  // Nothing we mount may propagate back to the host.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    *step = "mount(/, MS_REC|MS_PRIVATE)";
    return -1;
  }
  // A tmpfs becomes the temporary root, with the host at /oldroot and the sandbox built at /newroot.
  // /tmp is only the place where it is mounted first; pivot_root moves it away again.
  if (::mount("nsbox-base", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) {
    *step = "mount(tmpfs, /tmp)";
    return -1;
  }
  if (::mkdir("/tmp/oldroot", 0755) != 0 || ::mkdir("/tmp/newroot", 0755) != 0) {
    *step = "mkdir(/tmp/oldroot, /tmp/newroot)";
    return -1;
  }
  if (::mount("nsbox-root", "/tmp/newroot", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) {
    *step = "mount(tmpfs, /tmp/newroot)";
    return -1;
  }
  if (::syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot") != 0) {
    *step = "pivot_root(/tmp, /tmp/oldroot)";
    return -1;
  }
  if (::chdir("/") != 0) {
    *step = "chdir(/)";
    return -1;
  }
  return 0;
}

int ApplyChildMount(const ChildMount& m, uint32_t uid, uint32_t gid, const char** step) {
  using Kind = MountStep::Kind;
  const char* target = m.target.c_str();
  const char* source = m.source.c_str();
  const char* data = m.data.c_str();
  switch (m.kind) {
    case Kind::kDir:
      *step = Step("mkdir", target);
      return MakeDirs(target);
    case Kind::kFile: {
      *step = Step("write", target);
      if (!m.parent_exists && MakeParent(target) != 0) return -1;
      int fd = ::open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd < 0) return -1;
      int err = WriteAll(fd, m.data);
      ::close(fd);
      if (err == 0) return 0;
      errno = err;
      return -1;
    }
    case Kind::kSymlink:
      *step = Step("symlink", target);
      if (!m.parent_exists && MakeParent(target) != 0) return -1;
      return (::symlink(data, target) == 0 || errno == EEXIST) ? 0 : -1;
    case Kind::kBindReadOnly:
    case Kind::kBindWritable:
    case Kind::kBindDevice: {
      *step = Step("bind source", Shown(source));
      bool directory = m.source_type == 'd';
      if (m.source_type == 0) {  // the planner did not look
        struct stat source_st;
        if (::stat(source, &source_st) != 0) return (m.optional && errno == ENOENT) ? 0 : -1;
        directory = S_ISDIR(source_st.st_mode);
      }
      snprintf(step_buffer, sizeof step_buffer, "creating the mount point %s (for a %s)", Shown(target),
               directory ? "directory" : "file");
      *step = step_buffer;
      if (MakeMountPoint(directory, target, m.parent_exists) != 0) return -1;
      *step = Step("mount(MS_BIND)", target);
      if (::mount(source, target, nullptr, MS_BIND | MS_REC, nullptr) != 0) return -1;
      uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
      if (m.kind == Kind::kBindReadOnly) attrs |= MOUNT_ATTR_RDONLY;
      if (m.kind == Kind::kBindDevice) attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
      *step = Step("mount_setattr(nosuid,nodev,ro)", target);
      return SetMountAttr(target, attrs, true);
    }
    case Kind::kTmpfs:
      *step = Step("mount(tmpfs)", target);
      return ::mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, data);
    case Kind::kProc:
      *step = Step("mount(proc)", target);
      return ::mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
    case Kind::kDevpts:
      *step = Step("mount(devpts)", target);
      return ::mount("devpts", target, "devpts", MS_NOSUID | MS_NOEXEC, data);
    case Kind::kMqueue:
      *step = Step("mount(mqueue)", target);
      return ::mount("mqueue", target, "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
    case Kind::kMaskFile: {
      struct stat st;
      if (::lstat(target, &st) != 0) return (m.optional && errno == ENOENT) ? 0 : (*step = Step("stat", target), -1);
      *step = Step("mount(/dev/null over)", target);
      if (S_ISDIR(st.st_mode)) return ::mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=0");
      if (::mount("/oldroot/dev/null", target, nullptr, MS_BIND, nullptr) != 0) return -1;
      // The null device must stay usable as a device (no nodev), but the mask is read-only, nosuid and noexec
      // like every other mount: a write to a masked file fails instead of vanishing.
      *step = Step("mount_setattr(ro,nosuid,noexec)", target);
      return SetMountAttr(target, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
    }
    case Kind::kMaskDir: {
      struct stat st;
      if (::lstat(target, &st) != 0) return (m.optional && errno == ENOENT) ? 0 : (*step = Step("stat", target), -1);
      *step = Step("mount(empty tmpfs over)", target);
      return ::mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=0555");
    }
    case Kind::kReadOnly: {
      struct stat st;
      if (::lstat(target, &st) != 0) return (m.optional && errno == ENOENT) ? 0 : (*step = Step("stat", target), -1);
      *step = Step("mount(MS_BIND self)", target);
      if (::mount(target, target, nullptr, MS_BIND | MS_REC, nullptr) != 0) return -1;
      *step = Step("mount_setattr(ro)", target);
      return SetMountAttr(target, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, true);
    }
  }
  (void)uid;
  (void)gid;
  errno = EINVAL;
  *step = "unknown mount step";
  return -1;
}

int FinishRoot(const char** step) {
  // /dev holds only what the plan put there: its own tmpfs becomes read-only (pts, shm, mqueue are mounts of
  // their own and stay writable).
  *step = "mount_setattr(/newroot/dev, ro)";
  struct stat dev_st;
  if (::stat("/newroot/dev", &dev_st) == 0 &&
      SetMountAttr("/newroot/dev", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false) != 0)
    return -1;
  // The root's own directory tree is read-only; only the tmpfs mounts on it stay writable.
  *step = "mount_setattr(/newroot, ro)";
  if (SetMountAttr("/newroot", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false) != 0) return -1;
  // pivot_root(".", ".") stacks the old root under the new one; detaching it leaves no way back to the host.
  *step = "chdir(/newroot)";
  if (::chdir("/newroot") != 0) return -1;
  *step = "pivot_root(., .)";
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return -1;
  *step = "umount2(old root, MNT_DETACH)";
  if (::umount2(".", MNT_DETACH) != 0) return -1;
  *step = "chdir(/)";
  return ::chdir("/");
}

}  // namespace nsbox
