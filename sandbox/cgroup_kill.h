// Killing a group's processes and removing its directories: the async-signal-safe loops the reaper runs too.
#pragma once

#include <string>

#include "sandbox/base/status.h"

namespace nsbox::cgroup_internal {

// Kills every process of a group and waits (bounded, about 5 s) until its cgroup.procs stays empty. "Raw": it
// allocates nothing and makes only async-signal-safe calls, so the reaper (a fork of a process that may have threads)
// runs it too. kill_file: cgroup.kill (v2, written once; falls back to SIGKILL per pid when the kernel lacks it);
// freezer_state: v1 freezer.state (freeze, kill, thaw, so nothing forks between reading the list and killing it);
// either may be null. Returns 0, or the errno of the failing step with *failed_call naming it.
int RawKillGroup(const char* kill_file, const char* procs_file, const char* freezer_state, const char** failed_call);
// rmdir, waiting out EBUSY while killed processes finish exiting (bounded), and removing the empty groups below
// (an exec's group in a session) that keep it busy; allocation-free and async-signal-safe. Returns 0 or errno; ENOENT
// is 0.
int RawRemoveDir(const char* dir);

// RawRemoveDir with a Status.
Status RemoveDir(const std::string& dir);
// rmdir of a subtree directory that other sandboxes may still use: EBUSY/ENOTEMPTY/ENOENT are fine.
void RemoveSubtreeIfEmpty(const std::string& dir);

}  // namespace nsbox::cgroup_internal
