// `nsbox batch`'s plain parts: one JSONL job line parsed into run's options, its cost, the node's budget, resume keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"
#include "src/cli/sandbox_options.h"
#include "src/cli/test_cases.h"

namespace nsbox::cli {

// What one job holds back from the node while it runs: its limits, plus what nsbox keeps for it outside them.
struct JobCost {
  double cpus = 0;
  uint64_t memory_bytes = 0;
  uint64_t pids = 0;
};

// One line of JOBS.jsonl. A line that names no usable id is keyed by its line number ("line:N"); `error` set means
// the job is answered with a setup_error result naming it, and never run.
struct BatchJob {
  uint64_t line = 0;
  nlohmann::json id;  // a string or an integer; null when the line gave none that can be used
  std::string key;    // the resume key: id.dump(), or "line:N" for a null id or a duplicate
  uint64_t duplicate_of = 0;  // a later line of an id already taken: the line that took it
  Status error;
  SandboxOptions sandbox;
  ProgramOptions program;
  std::optional<std::string> stdin_data;
  std::vector<TestCase> cases;  // "cases": the program compiled once and judged on each; empty: one plain run
  JobCost cost;
  uint64_t program_memory_bytes = 0;  // a compiled language's program's own memory limit (ApplyCompileMemory); 0: none
};

// The fields a job may have; anything else is an error (a misspelt "timout" must not run with the default).
// {"id": "a1", "language": "python", "code": "print(1)"} or {"id": 7, "argv": ["/bin/echo", "hi"]}, with optional
// "stdin" (a string), "timeout" ("1s", as --timeout), "env" ({"K": "V"}) and "limits" ({"memory": "256M",
// "memory_swap": "0", "pids": 64, "cpus": 0.5, "tmpfs_size": "64M", "output_limit": "64K"}), for a compiled
// language, "compile_timeout", and "cases" (an array of {"stdin", "expected_stdout", "name"}, as nsbox run --cases;
// not with "stdin"). Unset fields take the batch's own options (`defaults`). A compiled language's job, as
// in nsbox run: the program keeps the memory limit, its compile step gets the table's compile memory, and the
// sandbox the larger of the two.
BatchJob ParseJobLine(std::string_view text, uint64_t line, const SandboxOptions& sandbox_defaults,
                      const ProgramOptions& program_defaults);

// The resume key of a result line written by an earlier batch ({"id", "line", "result"}); an error when the line is
// not one. Only what comes before "result" is read: `text` may be just the line's head.
StatusOr<std::string> ResultLineKey(std::string_view text);

// What the node can give to jobs at once, and how many may run regardless of it.
struct NodeBudget {
  double cpus = 0;
  uint64_t memory_bytes = 0;
  uint64_t pids = 0;
  uint64_t max_jobs = 0;    // descriptors and host ids: a count cap whatever the jobs cost
  std::string explanation;  // one line: where each figure came from
};

// Roots injectable for tests: proc (/proc) and the cgroup v2 mount (/sys/fs/cgroup).
struct BudgetRoots {
  std::string proc = "/proc";
  std::string cgroup = "/sys/fs/cgroup";
};

// CPUs: the affinity mask, lowered by every cpu.max of nsbox's own cgroup and its parents (cpu.cfs_quota_us / period
// in the v1 cpu hierarchy), times kCpuOvercommit. Memory: MemAvailable, lowered by memory.max - memory.current of
// those groups (v1: memory.limit_in_bytes - memory.usage_in_bytes). Pids: pid_max and threads-max less
// the tasks that exist, lowered by pids.max - pids.current; half of it. Jobs: by RLIMIT_NOFILE.
NodeBudget ComputeNodeBudget(const BudgetRoots& roots);

// A job's limits are caps, not what it uses: the time of a short job is mostly nsbox's set-up, which its cgroup does
// not count. Jobs may together be given this many times the node's CPUs (docs/batch.md has the measurements).
inline constexpr double kCpuOvercommit = 2.0;

}  // namespace nsbox::cli
