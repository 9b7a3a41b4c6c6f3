// MountPlan: the sandbox root as data (host view or prepared root, generated /etc, /proc masks, /dev, tmpfs).
#include "sandbox/spec/mount_plan.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sandbox/base/fs.h"

namespace nsbox {
namespace {

using Kind = MountStep::Kind;

std::string Join(const std::string& root, const std::string& path) {
  if (root == "/" || root.empty()) return path;
  return root + path;
}

// /proc entries that leak host kernel state or allow writes to it (the set Docker masks, and a few more).
constexpr const char* kProcMaskedFiles[] = {
    "/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
    "/proc/latency_stats", "/proc/sysrq-trigger", "/proc/kmsg", "/proc/kallsyms", "/proc/config.gz",
    "/proc/vmallocinfo", "/proc/pagetypeinfo", "/proc/slabinfo",
    // Host facts: the boot command line, the host's disks, partitions and swap devices. Each reads as empty.
    "/proc/cmdline", "/proc/partitions", "/proc/diskstats", "/proc/swaps"};
// Masked after /proc/sys is made read-only, whose nodev would make the null device unreadable: the host's boot id,
// which links every run on one machine and one boot.
constexpr const char* kProcSysMaskedFiles[] = {"/proc/sys/kernel/random/boot_id"};
constexpr const char* kProcMaskedDirs[] = {"/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/driver"};
constexpr const char* kProcReadOnly[] = {"/proc/sys", "/proc/bus", "/proc/fs", "/proc/irq"};
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};
// Sandbox-owned mount points that a prepared root's own entries never cover.
const std::set<std::string> kReservedTopLevel = {"proc", "dev", "sys", "tmp", "workspace", "run", "home", "etc"};
// /etc files nsbox writes itself, whatever the root holds.
const std::set<std::string> kGeneratedEtc = {"passwd", "group", "hosts", "hostname", "resolv.conf", "nsswitch.conf",
                                             "shadow", "gshadow", "mtab"};

char SourceType(const struct stat& st) { return S_ISDIR(st.st_mode) ? 'd' : 'f'; }

// A link is recreated, a directory or regular file bound read-only. False when host_path does not exist.
bool AddRootEntry(std::vector<MountStep>& plan, const std::string& host_path, const std::string& target) {
  struct stat st;
  if (::lstat(host_path.c_str(), &st) != 0) return false;
  if (S_ISLNK(st.st_mode)) {
    char link[PATH_MAX];
    ssize_t n = ::readlink(host_path.c_str(), link, sizeof link - 1);
    if (n > 0) plan.push_back({Kind::kSymlink, "", target, std::string(link, static_cast<size_t>(n))});
  } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
    plan.push_back({Kind::kBindReadOnly, host_path, target, "", false, SourceType(st)});
  }
  return true;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

StatusOr<HostView> LoadHostView(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok()) return text.status().Wrap("loading the host view");
  HostView view;
  try {
    auto j = nlohmann::json::parse(*text);
    for (const auto& b : j.at("read_only_binds"))
      view.read_only_binds.push_back({b.at("path").get<std::string>(), b.value("optional", false)});
    for (const auto& p : j.at("root_links").at("paths")) view.root_links.push_back(p.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(fmt::format("{}: malformed host view: {}", path, e.what()));
  }
  return view;
}

StatusOr<std::vector<MountStep>> BuildMountPlan(const MountPlanInputs& in) {
  const Policy& policy = *in.policy;
  std::vector<MountStep> plan;
  const uint32_t uid = policy.sandbox_uid(), gid = policy.sandbox_gid();
  const std::string size = fmt::format("size={}", policy.tmpfs_size_bytes());

  // 1. The root's contents, read-only.
  std::vector<HostView::Bind> etc_entries;  // host paths to bind under /etc (looked at when /etc is planned)
  if (policy.host_rootfs()) {
    if (!in.host_view) return Status::Error("the host root view is not loaded");
    for (const auto& link : in.host_view->root_links) AddRootEntry(plan, Join(in.host_root, link), link);
    for (const auto& bind : in.host_view->read_only_binds) {
      if (bind.path.starts_with("/etc/")) {
        etc_entries.push_back(bind);
        continue;
      }
      std::string host_path = Join(in.host_root, bind.path);
      struct stat st;
      if (::stat(host_path.c_str(), &st) != 0) {
        if (bind.optional) continue;
        return Status::Error(fmt::format("host view: {} does not exist", host_path));
      }
      plan.push_back({Kind::kBindReadOnly, host_path, bind.path, "", false, SourceType(st)});
    }
  } else {
    const std::string& root = policy.rootfs_dir();
    if (!PathExists(root + "/usr") && !PathExists(root + "/bin"))
      return Status::Error(fmt::format("rootfs '{}' holds neither /usr nor /bin: not a root filesystem", root));
    for (const auto& name : ListDir(root)) {
      if (kReservedTopLevel.count(name)) continue;
      AddRootEntry(plan, root + "/" + name, "/" + name);
    }
    // The root's /etc entries are bound one by one from the sandbox's side, where no path through a link in the
    // root is followed: a /etc that is a link would fail each bind with a message about the link's owner.
    struct stat etc_st;
    if (::lstat((root + "/etc").c_str(), &etc_st) == 0 && S_ISLNK(etc_st.st_mode))
      return Status::Error(fmt::format("rootfs '{}': its /etc is a symbolic link; a prepared root needs /etc to be a "
                                       "directory (make it one, or move the files it points to there)",
                                       root));
    for (const auto& name : ListDir(root + "/etc"))
      if (!kGeneratedEtc.count(name)) etc_entries.push_back({"/etc/" + name, /*optional=*/true});
  }

  // 2. /etc: generated identity and name service files, plus the allowed entries of the root's /etc.
  plan.push_back({Kind::kDir, "", "/etc", ""});
  std::string etc_source_root = policy.host_rootfs() ? in.host_root : policy.rootfs_dir();
  for (const auto& entry : etc_entries) {
    std::string host_path = Join(etc_source_root, entry.path);
    if (!AddRootEntry(plan, host_path, entry.path) && !entry.optional)
      return Status::Error(fmt::format("host view: {} does not exist", host_path));
  }
  plan.push_back({Kind::kFile, "", "/etc/passwd",
                  fmt::format("root:x:0:0:root:/root:/usr/sbin/nologin\n{}:x:{}:{}:nsbox sandbox:{}:/bin/sh\n"
                              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                              in.sandbox_user, uid, gid, in.home)});
  plan.push_back({Kind::kFile, "", "/etc/group",
                  fmt::format("root:x:0:\n{}:x:{}:\nnogroup:x:65534:\n", in.sandbox_user, gid)});
  plan.push_back({Kind::kFile, "", "/etc/hosts",
                  fmt::format("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{}\n",
                              policy.hostname())});
  plan.push_back({Kind::kFile, "", "/etc/hostname", policy.hostname() + "\n"});
  plan.push_back({Kind::kFile, "", "/etc/nsswitch.conf",
                  "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
                  "protocols: files\nservices: files\n"});
  if (!in.resolv_conf.empty()) plan.push_back({Kind::kFile, "", "/etc/resolv.conf", in.resolv_conf});

  // 3. A fresh /proc of the sandbox's pid namespace, with host-revealing entries masked.
  plan.push_back({Kind::kDir, "", "/proc", ""});
  plan.push_back({Kind::kProc, "", "/proc", ""});
  for (const char* path : kProcMaskedFiles) plan.push_back({Kind::kMaskFile, "", path, "", true});
  for (const char* path : kProcMaskedDirs) plan.push_back({Kind::kMaskDir, "", path, "", true});
  for (const char* path : kProcReadOnly) plan.push_back({Kind::kReadOnly, "", path, "", true});
  for (const char* path : kProcSysMaskedFiles) plan.push_back({Kind::kMaskFile, "", path, "", true});

  // 4. A minimal /dev.
  plan.push_back({Kind::kDir, "", "/dev", ""});
  plan.push_back({Kind::kTmpfs, "", "/dev", "mode=0755,size=65536,nr_inodes=64"});
  for (const char* dev : kDevices)
    plan.push_back({Kind::kBindDevice, fmt::format("/dev/{}", dev), fmt::format("/dev/{}", dev), "", false, 'f'});
  plan.push_back({Kind::kDir, "", "/dev/pts", ""});
  // max=: every devpts instance draws on the host's kernel.pty.max (4096, less the 1024 kept for the host's own
  // instance), which one sandbox could otherwise take whole (docs/limits.md, kernel quotas).
  plan.push_back({Kind::kDevpts, "", "/dev/pts", "newinstance,ptmxmode=0666,mode=0620,max=64"});
  plan.push_back({Kind::kSymlink, "", "/dev/ptmx", "pts/ptmx"});
  plan.push_back({Kind::kDir, "", "/dev/shm", ""});
  plan.push_back({Kind::kTmpfs, "", "/dev/shm", fmt::format("mode=1777,{}", size)});
  plan.push_back({Kind::kDir, "", "/dev/mqueue", ""});
  plan.push_back({Kind::kMqueue, "", "/dev/mqueue", ""});
  plan.push_back({Kind::kSymlink, "", "/dev/fd", "/proc/self/fd"});
  plan.push_back({Kind::kSymlink, "", "/dev/stdin", "/proc/self/fd/0"});
  plan.push_back({Kind::kSymlink, "", "/dev/stdout", "/proc/self/fd/1"});
  plan.push_back({Kind::kSymlink, "", "/dev/stderr", "/proc/self/fd/2"});

  // 5. Writable, size-capped places: /tmp, /workspace, the home directory. No /sys at all.
  plan.push_back({Kind::kDir, "", "/tmp", ""});
  plan.push_back({Kind::kTmpfs, "", "/tmp", fmt::format("mode=1777,{}", size)});
  plan.push_back({Kind::kDir, "", "/workspace", ""});
  if (policy.workspace_dir().empty())
    plan.push_back({Kind::kTmpfs, "", "/workspace", fmt::format("mode=0755,uid={},gid={},{}", uid, gid, size)});
  else
    plan.push_back({Kind::kBindWritable, policy.workspace_dir(), "/workspace", "", false, 0, /*user_source=*/true});
  plan.push_back({Kind::kDir, "", "/home", ""});
  plan.push_back({Kind::kDir, "", in.home, ""});
  plan.push_back({Kind::kTmpfs, "", in.home, fmt::format("mode=0755,uid={},gid={},{}", uid, gid, size)});
  plan.push_back({Kind::kDir, "", "/run", ""});

  // 6. The user's extra binds, last so that they may cover anything above.
  for (const auto& bind : policy.binds())
    plan.push_back({bind.writable ? Kind::kBindWritable : Kind::kBindReadOnly, bind.source, bind.destination, "", false,
                    0, /*user_source=*/true});
  return plan;
}

}  // namespace nsbox
