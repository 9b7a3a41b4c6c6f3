// The user namespace from the parent side: one inside uid/gid mapped to one host uid/gid, never to host root.
#include "sandbox/user_ns.h"

#include <unistd.h>

#include <fmt/format.h>

#include "sandbox/base/fs.h"

namespace nsbox {

Status WriteIdMaps(pid_t pid, const Policy& policy, bool privileged) {
  uint32_t host_uid = privileged ? policy.host_uid() : ::getuid();
  uint32_t host_gid = privileged ? policy.host_gid() : ::getgid();
  if (host_uid == 0 || host_gid == 0) return Status::Error("refusing to map the sandbox user to host root");
  std::string base = fmt::format("/proc/{}/", pid);
  // Without CAP_SETGID in the parent namespace the kernel demands that setgroups be denied first.
  if (!privileged) NSBOX_RETURN_IF_ERROR(WriteControlFile(base + "setgroups", "deny"));
  NSBOX_RETURN_IF_ERROR(WriteControlFile(base + "uid_map", fmt::format("{} {} 1\n", policy.sandbox_uid(), host_uid)));
  NSBOX_RETURN_IF_ERROR(WriteControlFile(base + "gid_map", fmt::format("{} {} 1\n", policy.sandbox_gid(), host_gid)));
  return OkStatus();
}

}  // namespace nsbox
