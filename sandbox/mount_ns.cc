// The mount namespace in the child: private propagation, a tmpfs base, each planned mount, read-only root, pivot_root.
// Runs after clone: no allocation, only syscalls and stack buffers.
#include "sandbox/mount_ns.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/bind_path.h"

namespace nsbox {
namespace {

thread_local char step_buffer[240];

// The detached tmpfs with nsbox's own device nodes (PrepareDeviceNodeTree), or -1.
int device_tree_fd = -1;

// The host's root and the new root while the root is built (MountBaseAndPivotToIt to FinishRoot), opened once for
// every bind: nothing is mounted onto either of them in between, only below /newroot.
int host_root_fd = -1;
int new_root_fd = -1;

struct DeviceNode {
  const char* name;
  unsigned major, minor;
};
constexpr DeviceNode kDeviceNodes[] = {{"null", 1, 3},    {"zero", 1, 5},    {"full", 1, 7},
                                       {"random", 1, 8},  {"urandom", 1, 9}, {"tty", 5, 0}};

// The node named like the last component of `source` (/oldroot/dev/null) in nsbox's device tree, or -1.
int OpenOwnDeviceNode(const char* source) {
  if (device_tree_fd < 0) return -1;
  const char* slash = strrchr(source, '/');
  const char* name = slash ? slash + 1 : source;
  for (const DeviceNode& node : kDeviceNodes)
    if (strcmp(node.name, name) == 0) return ::openat(device_tree_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  return -1;
}

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
  return static_cast<int>(
      ::syscall(SYS_mount_setattr, AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &attr, sizeof attr));
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

// Why a bind failed, for the step: a link's name, or a refusal of the source.
thread_local char reason_buffer[160];

const char* LinkReason(const char* bad_link, bool destination) {
  snprintf(reason_buffer, sizeof reason_buffer,
           destination ? ": it passes through the symbolic link '%s', and a bind destination follows no link"
                       : ": the symbolic link '%s' in it was not made by root",
           bad_link);
  return reason_buffer;
}

// A bind, by descriptor from start to end, so that no link a sandbox planted is followed and nothing is swapped in
// between the look and the mount: the source is opened below /oldroot (links only where root made them, see
// OpenHostPath), the mount point below /newroot (no links at all), the source's tree cloned (open_tree), given its
// attributes while still detached (so it is never visible writable), and moved onto the mount point's descriptor.
// open_tree and move_mount are older (5.2) than mount_setattr (5.12), which nsbox needs anyway.
int BindByDescriptor(const ChildMount& m, uint64_t attrs, const char** step) {
  const char* source = m.source.c_str();
  const char* target = m.target.c_str();
  char bad_link[NAME_MAX + 1] = "";
  const int host_root = host_root_fd, new_root = new_root_fd;
  UniqueFd src(m.kind == MountStep::Kind::kBindDevice ? OpenOwnDeviceNode(source) : -1);
  const bool own_device = static_cast<bool>(src);
  if (!src) src.reset(OpenHostPath(host_root, source + strlen("/oldroot"), bad_link, sizeof bad_link));
  if (!src) {
    int err = errno;
    if (m.optional && err == ENOENT) return 0;
    snprintf(step_buffer, sizeof step_buffer, "bind source %s%s", Shown(source),
             bad_link[0] ? LinkReason(bad_link, false) : "");
    *step = step_buffer;
    errno = err;
    return -1;
  }
  if (m.user_source) {
    if (const char* refusal = KernelFsBindRefusal(host_root, src.get())) {
      snprintf(step_buffer, sizeof step_buffer, "bind source %s: %s", Shown(source), refusal);
      *step = step_buffer;
      errno = EPERM;
      return -1;
    }
  }
  struct stat source_st;
  *step = Step("fstat(bind source)", Shown(source));
  if (::fstat(src.get(), &source_st) != 0) return -1;
  const bool directory = S_ISDIR(source_st.st_mode);
  UniqueFd dst(OpenMountPoint(new_root, target + strlen("/newroot"), directory, bad_link, sizeof bad_link));
  if (!dst) {
    int err = errno;
    snprintf(step_buffer, sizeof step_buffer, "creating the mount point %s (for a %s)%s", Shown(target),
             directory ? "directory" : "file", bad_link[0] ? LinkReason(bad_link, true) : "");
    *step = step_buffer;
    errno = err;
    return -1;
  }
  *step = Step("open_tree(OPEN_TREE_CLONE|AT_RECURSIVE)", Shown(source));
  UniqueFd tree(static_cast<int>(
      ::syscall(SYS_open_tree, src.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH)));
  if (!tree && own_device) {
    // A kernel that clones no tree of another mount namespace here: the host's node, as without nsbox's own.
    src.reset(OpenHostPath(host_root, source + strlen("/oldroot"), bad_link, sizeof bad_link));
    if (!src) return -1;
    tree.reset(static_cast<int>(
        ::syscall(SYS_open_tree, src.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH)));
  }
  if (!tree) return -1;
  struct mount_attr attr = {};
  attr.attr_set = attrs;
  *step = Step("mount_setattr(nosuid,nodev,ro)", Shown(target));
  if (::syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0) return -1;
  *step = Step("move_mount", Shown(target));
  return static_cast<int>(::syscall(SYS_move_mount, tree.get(), "", dst.get(), "",
                                    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH));
}

}  // namespace

void PrepareDeviceNodeTree() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::geteuid() != 0) return;  // mknod needs CAP_MKNOD on the host; rootless binds the host's nodes
    UniqueFd context(static_cast<int>(::syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC)));
    if (!context) return;
    for (const auto& [key, value] : {std::pair{"size", "4k"}, std::pair{"nr_inodes", "16"}, std::pair{"mode", "0755"}})
      if (::syscall(SYS_fsconfig, context.get(), FSCONFIG_SET_STRING, key, value, 0) != 0) return;
    if (::syscall(SYS_fsconfig, context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) return;
    UniqueFd tree(static_cast<int>(
        ::syscall(SYS_fsmount, context.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC)));
    if (!tree) return;
    for (const DeviceNode& node : kDeviceNodes) {
      if (::mknodat(tree.get(), node.name, S_IFCHR | 0666, makedev(node.major, node.minor)) != 0) return;
      if (::fchmodat(tree.get(), node.name, 0666, 0) != 0) return;  // whatever the umask took away
    }
    // Older kernels clone no detached tree of another mount namespace (open_tree: EINVAL): then the host's nodes.
    UniqueFd probe(static_cast<int>(::syscall(SYS_open_tree, tree.get(), "null", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
    if (!probe) return;
    device_tree_fd = tree.release();
  });
}

int DeviceNodeTreeFd() { return device_tree_fd; }

void CloseDeviceNodeTree() {
  if (device_tree_fd >= 0) ::close(device_tree_fd);
  device_tree_fd = -1;
}

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
  *step = "open(/oldroot, /newroot)";
  host_root_fd = ::open("/oldroot", O_PATH | O_DIRECTORY | O_CLOEXEC);
  new_root_fd = ::open("/newroot", O_PATH | O_DIRECTORY | O_CLOEXEC);
  return host_root_fd >= 0 && new_root_fd >= 0 ? 0 : -1;
}

int ApplyChildMount(const ChildMount& m, uint32_t uid, uint32_t gid, const char** step) {
  using Kind = MountStep::Kind;
  const char* target = m.target.c_str();
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
      uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
      if (m.kind == Kind::kBindReadOnly) attrs |= MOUNT_ATTR_RDONLY;
      if (m.kind == Kind::kBindDevice) attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
      return BindByDescriptor(m, attrs, step);
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
      // nsbox's own null device, cloned, made read-only while detached, then moved over the file; the host's where
      // there is none, or where the kernel clones no tree of another mount namespace.
      UniqueFd tree(device_tree_fd < 0 ? -1
                                       : static_cast<int>(::syscall(SYS_open_tree, device_tree_fd, "null",
                                                                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
      if (tree) {
        struct mount_attr attr = {};
        attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
        *step = Step("mount_setattr(ro,nosuid,noexec)", target);
        if (::syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) return -1;
        *step = Step("move_mount(nsbox's null device)", target);
        return static_cast<int>(::syscall(SYS_move_mount, tree.get(), "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH));
      }
      if (::mount("/oldroot/dev/null", target, nullptr, MS_BIND, nullptr) != 0) return -1;
      // The null device must stay usable as a device (no nodev), and the mask is read-only, nosuid and noexec like
      // every other mount. (A read-only mount does not stop writes to a device node: a write to a masked file
      // reaches the null device and vanishes, which is harmless.)
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
  for (int* fd : {&host_root_fd, &new_root_fd}) {  // no way back to the host once pivoted
    ::close(*fd);
    *fd = -1;
  }
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
