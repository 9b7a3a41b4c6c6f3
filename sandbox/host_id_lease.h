// A host uid/gid of its own for each root-run sandbox, leased from a range by a lock that dies with its holder.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <sys/types.h>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/policy.h"

namespace nsbox {

// Host ids FIRST..LAST (inclusive). The default block lies above every ordinary user (2^20 = 1048576 and the 65536
// after it); ids that /etc/subuid, /etc/subgid, /etc/passwd or /etc/group hand out, or a directory service has
// (HostHasDirectoryAccounts), are skipped within it.
struct HostIdRange {
  uint32_t first = 1u << 20;
  uint32_t last = (1u << 20) + 65535;
};

// "FIRST-LAST", both above 65535 (below are the host's users and nobody) and below 2^32-1.
StatusOr<HostIdRange> ParseHostIdRange(std::string_view text);

struct HostIdLeaseOptions {
  HostIdRange range;
  std::string lock_dir = "/run/nsbox/host-ids";  // one lock file per id; made (mode 0700) when missing
  std::string etc_dir = "/etc";                  // where subuid, subgid, passwd and group are read
  // Whether a directory service has an account of the id (DirectoryHasId); unset: not asked. Set by
  // DefaultHostIdLeaseOptions where nsswitch.conf names such a source. An error ends the lease with it.
  std::function<StatusOr<bool>(uint64_t)> directory_has_id;
};

// Whether the host's user and group databases (getpwuid_r, getgrgid_r) have an account of `id`; an error when a
// service does not answer (sssd down): an id nobody can vouch for is not leased.
StatusOr<bool> DirectoryHasId(uint64_t id);

// The range from $NSBOX_HOST_ID_RANGE (FIRST-LAST) when set, else the default; the lock directory from
// $NSBOX_HOST_ID_DIR when set.
StatusOr<HostIdLeaseOptions> DefaultHostIdLeaseOptions();

// One id, free as a uid and a gid, held while this object (or a copy of its descriptor) lives: an flock on
// <lock_dir>/<id>, which the kernel drops when the holder exits however it ends (SIGKILL included). Given up in
// order, the lease also removes its file and those of killed holders that nobody holds (a SIGKILLed holder's stays
// until then): a taker that opened the file before it went finds, once locked, that the name is no longer its file
// and opens it again.
class HostIdLease {
 public:
  HostIdLease() = default;
  HostIdLease(uint32_t id, UniqueFd lock, UniqueFd dir);
  HostIdLease(HostIdLease&& other) noexcept { *this = std::move(other); }
  HostIdLease& operator=(HostIdLease&& other) noexcept;
  ~HostIdLease() { End(); }
  uint32_t id() const { return id_; }
  bool held() const { return static_cast<bool>(lock_); }

 private:
  void End();  // removes the file and drops the lock; only in the process that took the lease, not a fork of it

  uint32_t id_ = 0;
  pid_t owner_ = 0;
  UniqueFd lock_;
  UniqueFd dir_;
};

// The lowest free id of the range. Fails when every id is leased or excluded, or the lock directory is unsafe (not
// root's, or writable by others).
StatusOr<HostIdLease> LeaseHostId(const HostIdLeaseOptions& options);

// Whether ETC_DIR/nsswitch.conf names a source of users or groups beyond the files and systemd's (sss, ldap, winbind,
// nis, mymachines, compat, db, cache ...): then LeaseHostId also skips the ids those resolve, since a process of such
// an account would own a root-run sandbox's user namespace (user_ns.h).
bool HostHasDirectoryAccounts(const std::string& etc_dir);

// Whether this process runs in the initial user namespace (its uid map is the identity over every id).
bool InInitialUserNamespace();

// Run as root: leases an id from the default options and gives `policy` that uid and gid; the caller keeps the lease
// as long as the sandbox lives. Not root, or root of a nested user namespace (whose ids outside are not its to hand
// out): the sandbox keeps the policy's ids (the caller's own, or the overflow uid); an empty lease.
StatusOr<HostIdLease> LeaseHostIdsIfRoot(Policy& policy);

}  // namespace nsbox
