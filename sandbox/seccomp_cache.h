// SeccompCache: compiled seccomp programs kept on disk, keyed by everything their compilation reads, so that a run
// skips the JSON parse and libseccomp (about 2 ms of a cold start).
#pragma once

#include <sys/stat.h>

#include <ctime>
#include <memory>
#include <string>

#include "sandbox/seccomp.h"

namespace nsbox {

// $NSBOX_CACHE_DIR/seccomp; else /var/cache/nsbox/seccomp for root; else $XDG_CACHE_HOME/nsbox/seccomp or
// ~/.cache/nsbox/seccomp. Empty (no cache) when NSBOX_SECCOMP_CACHE is "off".
std::string SeccompCacheDir();

// Everything a compiled program depends on, as one string compared byte for byte on lookup: the cache format, the
// nsbox executable (path, inode, size, mtime), libseccomp's version, the host the rules were evaluated for, the
// profile's name and its full text. A cached program is used only when all of it matches.
std::string SeccompCacheKey(const std::string& name, const std::string& profile_text, const SeccompHost& host);

// The same, for a profile file that has not changed for kSeccompStableSeconds, with the file's identity (device,
// inode, size, modification and change times) in place of its text: a run then neither reads the profile nor compares
// it (about 0.2 ms of a cold start on a PVM guest). Empty when the file changed more recently (its change time is
// less than that before now), or is not a regular file: a change within one tick of the kernel's clock could leave
// its times as they were, so a recent file is known by its text (git's "racily clean" index entries, the same way).
// An edit afterwards sets the change time anew, which nothing but the clock can set back.
std::string SeccompCacheFileKey(const std::string& name, const struct stat& profile, const SeccompHost& host,
                                time_t now);
inline constexpr time_t kSeccompStableSeconds = 2;

// The cached program for key, or nullptr: no entry, another key under the same file name, a malformed file, or a
// directory or file nsbox does not trust (not owned by the effective uid, or writable by group or others).
std::shared_ptr<SeccompProgram> LookupSeccompCache(const std::string& dir, const std::string& key);

// Stores a program under key (temp file, then rename), keeping at most kMaxEntries entries. Best effort: a cache that
// cannot be written only costs the next run a compile. Makes dir (0700) if missing.
void StoreSeccompCache(const std::string& dir, const std::string& key, const SeccompProgram& program);

inline constexpr int kSeccompCacheMaxEntries = 64;

}  // namespace nsbox
