// Test support shared by the integration and escape suites: run nsbox (or any program), capture its output, parse
// the JSON result, find processes by marker, and small host-side helpers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/skip.h"

namespace nsbox::testing {

// $NSBOX_BIN (set by tools/test) or the binary of this build tree.
std::string NsboxBinary();
// A probe compiled by meson into build/tests/probes/.
std::string ProbePath(const std::string& name);

struct SpawnOptions {
  std::string stdin_data;                        // written to the program's stdin (then closed)
  int stdin_fd = -1;                             // or: this descriptor as stdin (takes precedence)
  std::map<std::string, std::string> extra_env;  // added to the test's own environment
  std::chrono::milliseconds timeout{60000};      // the test's own guard: SIGKILL after this
  std::string cwd;                               // working directory of the program (default: the test's)
  bool stdin_is_controlling_tty = false;         // new session with stdin (a terminal) as its controlling tty
};

struct ProcessResult {
  int exit_code = -1;    // exit status, or 128+N when killed by signal N
  int term_signal = 0;   // N when killed by a signal
  bool guard_fired = false;  // the test's guard killed it
  std::string out, err;
  std::chrono::milliseconds elapsed{0};
  long max_rss_kb = 0;   // the program's own peak resident memory (not its children's)
};

// Runs argv[0] (a path) with argv, capturing stdout and stderr concurrently. Descriptors without CLOEXEC in the test
// process are inherited, on purpose (the inherited-descriptor attacks rely on it).
ProcessResult RunProcess(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// A program started in the background; its stdout and stderr go to files.
struct BackgroundProcess {
  pid_t pid = -1;
  std::string out_path, err_path;
  int Wait();  // returns the raw wait status
  std::string Out() const;
};
BackgroundProcess StartProcess(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// nsbox run --json OPTIONS... followed by the program part (`-- CMD ...` or `--lang L --code S`).
struct NsboxResult {
  ProcessResult process;
  nlohmann::json json;  // null when stdout was not one JSON object
  std::string status() const { return json.value("status", std::string("<no json>")); }
  std::string out() const { return json.value("stdout", std::string()); }
  std::string err() const { return json.value("stderr", std::string()); }
  int exit_code() const { return json.value("exit_code", -1); }
  // For failure messages: everything nsbox said.
  std::string Describe() const;
};

NsboxResult RunNsboxJson(const std::vector<std::string>& args, const SpawnOptions& options = {});
// nsbox run --json OPTIONS --lang python --code CODE (the code gets kPythonPrelude prepended).
NsboxResult RunPython(const std::string& code, const std::vector<std::string>& options = {},
                      const SpawnOptions& spawn = {});
// nsbox run --json OPTIONS --lang sh --code CODE.
NsboxResult RunShell(const std::string& code, const std::vector<std::string>& options = {},
                     const SpawnOptions& spawn = {});
// Plain `nsbox ARGS...` (no --json added), for exit codes and error messages.
ProcessResult RunNsboxRaw(const std::vector<std::string>& args, const SpawnOptions& options = {});

// Python helpers prepended to RunPython code:
//   err(fn, *args) -> "ok" or the errno name (EPERM ...) of the OSError fn raised
//   sc(nr, *args)  -> "ok" or the errno name of raw syscall nr (ctypes, integer/bytes args)
//   libc           -> ctypes.CDLL(None, use_errno=True)
extern const char* const kPythonPrelude;
// Python (after kPythonPrelude) that tries every lever on pid 1's scheduling (nice, policy, parameters, affinity, I/O
// class), then the same on itself; prints the answers for pid 1, whether pid 1 is unchanged, and the answers for
// itself with its nice and whether it is SCHED_IDLE.
extern const char* const kPid1SchedulingLevers;
// The same levers with the upper 32 bits of each int argument set (the kernel drops them; a filter that compares the
// whole register would not): every one must be EPERM and pid 1 unchanged.
extern const char* const kPid1HighBitLevers;

// Host-side observations.
std::vector<pid_t> PidsWithMarker(const std::string& marker);  // processes whose cmdline or environ holds marker
bool WaitForNoPidsWithMarker(const std::string& marker, std::chrono::milliseconds within);
bool WaitForPidWithMarker(const std::string& marker, std::chrono::milliseconds within);
bool WaitForPidsWithMarker(const std::string& marker, size_t count, std::chrono::milliseconds within);
// The sandboxed programs among them: nsbox, its pid 1 and its cgroup reaper (all "nsbox", forks of it) carry nsbox's
// command line, and with it any marker passed in --code, and are not counted.
std::vector<pid_t> ProgramsWithMarker(const std::string& marker);
// Whether one of them runs under this command name (/proc/PID/comm: "sh", "python3").
bool ProgramWithMarkerNamed(const std::string& marker, const std::string& comm);
bool WaitForProgramsWithMarker(const std::string& marker, size_t count, std::chrono::milliseconds within);
std::vector<std::string> MountLinesContaining(const std::string& needle);  // in the host's /proc/self/mounts
std::string UniqueMarker(const std::string& what);  // "nsbox-test-WHAT-<pid>-<n>-<random>"
// Every sandbox cgroup on the host, as "<hierarchy>/<name>", and the groups below them (a session's execs) as
// "<hierarchy>/<name>/<child>". Other sandboxes (a live session) may hold groups of their own: a scenario compares
// the set before and after.
std::set<std::string> NsboxGroups();
// After SIGKILL the reaper removes the groups on its own time: waits a few seconds at most for the set to be this.
bool WaitForGroups(const std::set<std::string>& expected);
// nsbox processes (a command name holding "nsbox") that are zombies adopted by init: what an nsbox that did not reap
// its own children leaves behind. session_leaders: only those that lead a session of their own (the cgroup reaper,
// and each sandbox's pid 1).
size_t NsboxZombiesOfInit(bool session_leaders = false);

// A private temporary directory, removed (recursively) when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& contents, int mode = 0644) const;

 private:
  std::string path_;
};

// tests/probes/memory_watcher.py: an attacker a session's exec leaves behind, which tries to open the memory of every
// process the next execs start, and what its verdict (the file it writes) says.
std::string MemoryWatcherScript();
struct MemoryWatcherVerdict {
  std::vector<std::string> opened_in_nsbox_memory;  // its lines for processes opened while in nsbox's memory
  int caught_before_execve = 0;  // payloads it caught in nsbox's memory that then became the exec's `cat`
};
MemoryWatcherVerdict ParseMemoryWatcherVerdict(const std::string& lines);


}  // namespace nsbox::testing
