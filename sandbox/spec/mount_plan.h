// MountPlan: the ordered mount steps that build a sandbox's root, computed from the Policy as plain data.
#pragma once

#include <string>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/policy.h"

namespace nsbox {

struct MountStep {
  enum class Kind {
    kBindReadOnly,   // bind source (host path) at target, read-only, nosuid, nodev
    kBindWritable,   // bind source at target, writable, nosuid, nodev
    kBindDevice,     // bind a host device node at target (keeps dev, nosuid)
    kTmpfs,          // tmpfs at target with data as options, nosuid, nodev
    kProc,           // a fresh proc of the sandbox's pid namespace
    kDevpts,         // a private devpts instance
    kMqueue,         // a private POSIX message queue fs
    kMaskFile,       // bind /dev/null over target (hides a /proc file)
    kMaskDir,        // an empty read-only tmpfs over target
    kReadOnly,       // remount the existing target read-only (e.g. /proc/sys)
    kSymlink,        // symlink at target pointing to data
    kDir,            // directory at target
    kFile,           // regular file at target containing data
  };
  Kind kind;
  std::string source;  // host path, for binds
  std::string target;  // path inside the sandbox
  std::string data;    // tmpfs options, symlink target or file content
  bool optional = false;  // a missing source is skipped instead of failing
  // For binds: 'd' (a directory) or 'f' (anything else) as the planner saw the source; 0 when it did not look. The
  // child goes by the descriptor it opens itself (sandbox/bind_path.h), whatever the planner saw.
  char source_type = 0;
  // For binds: the source was given by the user (a --bind, --ro-bind or the --workspace), not by nsbox's own root
  // recipe; the child refuses such a source on a kernel filesystem or the host's /dev, and the host's root itself.
  bool user_source = false;
};

// What the built-in "host" root shows of the host (rootfs/host.json).
struct HostView {
  struct Bind {
    std::string path;
    bool optional = false;
  };
  std::vector<Bind> read_only_binds;
  std::vector<std::string> root_links;  // /bin, /lib …: a link on the host is recreated, a directory is bound
};

StatusOr<HostView> LoadHostView(const std::string& path);

struct MountPlanInputs {
  const Policy* policy = nullptr;
  const HostView* host_view = nullptr;
  std::string host_root = "/";           // injectable for tests: where host paths are looked up
  std::string sandbox_user = "sandbox";
  std::string home = "/home/sandbox";
  std::string resolv_conf;               // contents; empty for no /etc/resolv.conf
};

// Pure: reads the host (links, directory listings) under host_root but changes nothing.
StatusOr<std::vector<MountStep>> BuildMountPlan(const MountPlanInputs& inputs);

}  // namespace nsbox
