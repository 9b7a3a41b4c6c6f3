// DataDir: where nsbox finds its data files (profiles, host view, languages, templates), and the check that no one
// but root and the running user can change them.
#pragma once

#include <sys/types.h>

#include <string>

#include "sandbox/base/status.h"

namespace nsbox {

// Whether the running executable lives in the build directory it was compiled in (a developer's uninstalled build,
// or the test programs): only such a binary reads its data from the source tree. Always false for a build configured
// with -Dsource_tree_data=false (tools/package).
bool RunningFromBuildTree();

// Refuses a path that anyone but root and `uid` could change: the path (resolved through symlinks) and every
// directory above it must be owned by root or `uid` and writable by neither group nor others. A world-writable
// directory above it is accepted only when it is root's and sticky (/tmp), where no one else can rename or replace
// what `uid` or root put there. Nested in a user namespace that does not map root, root's files show as the overflow
// uid (65534): such an owner is taken for root, as nsbox cannot tell it from another outside user there (the mode must
// still keep group and others out). Returns the resolved path; the error names the offending component and its fix.
StatusOr<std::string> CheckTrustedPath(const std::string& path, uid_t uid);

// What nsbox reads below a data directory (seccomp-profiles/, rootfs/, tools/mkrootfs, docs/openapi.json), each
// entry at any depth held to CheckTrustedPath's rule; the error names the first that is not.
Status CheckTrustedEntries(const std::string& data_dir, uid_t uid);

// The data directory, checked with CheckTrustedPath against the effective uid (and CheckTrustedEntries below it):
// $NSBOX_DATADIR when set, else the
// source tree for a build-tree binary (RunningFromBuildTree), else the installed NSBOX_DATADIR (/usr/share/nsbox in
// the package). An installed binary never falls back to the source tree.
StatusOr<std::string> ResolveDataDir();

// ResolveDataDir(), once a process. A directory that fails the check ends the process with one line naming it on
// stderr and exit 125 (fail closed: nsbox never runs on data it cannot trust); main() asks first, before anything
// else is set up.
const std::string& DataDir();

// Where the data is looked for and how to point nsbox at it, for errors about a data file that is not there (a copied
// binary without its data): "nsbox reads its data ... from $NSBOX_DATADIR when set, else ...".
std::string DataDirHint();

// CheckTrustedPath(path, geteuid()), or the same one-line refusal and exit 125. `what` names the path's role
// ("seccomp profiles directory ($NSBOX_PROFILES_DIR)").
std::string TrustedPathOrExit(const std::string& path, const char* what);

}  // namespace nsbox
