// The text of cgroup and proc files as data: /proc/self/cgroup, keyed files (memory.events, cpu.stat), pid lists.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nsbox::cgroup_internal {

// nsbox's own cgroup membership, from /proc/self/cgroup.
struct SelfCgroup {
  std::optional<std::string> unified_path;          // the "0::/path" line
  std::map<std::string, std::string> v1_paths;      // controller -> path, from "N:ctrl,ctrl:/path"
  std::map<std::string, std::string> v1_mount_dir;  // controller -> hierarchy name ("cpu,cpuacct")
};
SelfCgroup ParseSelfCgroup(std::string_view content);

// "key value" lines (memory.events, cpu.stat, memory.oom_control, pids.events).
std::map<std::string, uint64_t> ParseKeyedFile(std::string_view content);
// The value of one key of a keyed file (as ParseKeyedFile would map it: the last valid one), 0 when absent: no map
// is built for the counters read at the end of every run.
uint64_t KeyedValue(std::string_view content, std::string_view key);
// The pids listed in the text of a cgroup.procs or tasks file, up to the first word that is not a number.
std::vector<pid_t> ParsePids(std::string_view content);
// Field 3 of a /proc/<pid>/stat text, the process's state ('R', 'S', 'Z' ...); 0 when it cannot be read.
char ParseProcessState(std::string_view stat);
// Field 22 of a /proc/<pid>/stat text, the start time in clock ticks since boot; 0 when it cannot be read.
uint64_t ParseStartTime(std::string_view stat);
// Fields 14 to 17 of a /proc/<pid>/stat text added up: the CPU time (user and system) of the process and of the
// children it waited for, in clock ticks; nullopt when they cannot be read.
std::optional<uint64_t> ParseCpuTicks(std::string_view stat);
// Whether a /proc/<pid>/stat text is of a process that has ended and waits to be reaped: a zombie (or dead) whose
// threads are all gone. (A thread-group leader that ended before its other threads is a zombie too, but alive.)
bool IsEndedProcess(std::string_view stat);
// Fields 48 and 49 of a /proc/<pid>/stat text: where the process's command line lies in its memory (arg_start,
// arg_end); nullopt when they cannot be read.
std::optional<std::pair<uintptr_t, uintptr_t>> ParseArgumentRange(std::string_view stat);

}  // namespace nsbox::cgroup_internal
