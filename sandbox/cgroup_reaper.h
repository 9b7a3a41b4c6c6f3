// The cgroup reaper: a forked process that kills and removes a sandbox's groups if nsbox dies without doing it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "sandbox/base/status.h"
#include "sandbox/cgroup.h"

namespace nsbox::cgroup_internal {

// What the reaper must do if nsbox dies. It travels to the reaper as one message (Reaper::Arm), which the reaper
// parses into a buffer of its own: it allocates nothing.
struct ReaperPlan {
  std::string kill_file;                 // v2: <group>/cgroup.kill; empty on v1
  std::string procs_file;                // the group's cgroup.procs, polled until empty
  std::string freezer_state_file;        // v1: <freezer group>/freezer.state, or empty
  std::vector<std::string> group_dirs;   // removed after the kill, in order
  std::vector<std::string> subtree_dirs; // removed if empty
};

// A forked process that waits on a socket from nsbox and on a pidfd of nsbox. As the child of a process that may have
// threads, it makes only async-signal-safe calls and allocates nothing. Messages on the socket: a plan (Arm: what to
// kill and remove), or "cleaned up, exit" (Dismiss). nsbox's exit (pidfd readable, or the socket's end of file)
// without a dismissal means nsbox died, and the reaper carries out the last plan it received. The pidfd matters
// because a sandbox child that does not exec keeps a copy of the socket. Its own session keeps it out of nsbox's
// process group (a terminal's Ctrl-C or `kill -- -pgid` does not take it along).
//
// It may be started before its group exists (Start() with no plan, then Arm before the group's first mkdir): `run`
// starts it first, while nsbox is small (a fork copies its page tables).
class Reaper {
 public:
  static StatusOr<std::unique_ptr<Reaper>> Start();
  static StatusOr<std::unique_ptr<Reaper>> Start(const ReaperPlan& plan);  // Start() and Arm(plan)
  // Sends the plan; the reaper acts on the last one it received. Call it before the group's first mkdir: a plan
  // whose directories do not exist yet costs the reaper nothing, a group made before the plan could be left behind.
  Status Arm(const ReaperPlan& plan);
  ~Reaper();  // Dismiss()
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;
  // Tells the reaper the group is gone; it is reaped without blocking, now or on a later call.
  void Dismiss();
  // Leaves the cleanup to the reaper (nsbox failed to do it itself); it starts at once.
  void Abandon();
  pid_t pid() const { return pid_; }

 private:
  Reaper(pid_t pid, int socket_fd) : pid_(pid), socket_fd_(socket_fd) {}
  pid_t pid_;
  int socket_fd_;
};

// Cgroup::RemoveInBackground for both backends: hands a group not yet removed to its reaper (Abandon) and marks it
// removed, the reaper's from then on. False, and nothing done, when it is removed already or has no reaper.
bool LeaveRemovalToReaper(bool* removed, Reaper* reaper);

// Arms config.prestarted_reaper (taking it) when there is one, else starts a reaper with the plan.
Status ArmReaper(const CgroupConfig& config, const ReaperPlan& plan, std::unique_ptr<Reaper>* reaper);

}  // namespace nsbox::cgroup_internal

namespace nsbox {

struct PrestartedReaper {
  std::unique_ptr<cgroup_internal::Reaper> reaper;  // dismissed, unarmed, when it was never taken
};

}  // namespace nsbox
