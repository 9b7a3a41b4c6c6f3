// tests/unit/batch_budget_test.cc: ComputeNodeBudget against fake /proc and cgroup trees, v2 and v1 (Slurm's and
// systemd's limits on a v1 or hybrid host are in the controllers' own hierarchies).
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "src/cli/batch_job.h"

namespace {

namespace fs = std::filesystem;

struct BudgetHost {
  fs::path root;
  BudgetHost() {
    char name[] = "/tmp/nsbox-budget-XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    root = name;
    Write("proc/meminfo", "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n");
    Write("proc/sys/kernel/pid_max", "32768\n");
    Write("proc/sys/kernel/threads-max", "100000\n");
    Write("proc/loadavg", "0.00 0.00 0.00 1/768 1234\n");
  }
  ~BudgetHost() { fs::remove_all(root); }
  void Write(const std::string& path, const std::string& text) const {
    fs::create_directories((root / path).parent_path());
    std::ofstream(root / path) << text;
  }
  nsbox::cli::BudgetRoots Roots() const { return {(root / "proc").string(), (root / "cgroup").string()}; }
};

}  // namespace

TEST_CASE("the batch budget is lowered by the cgroup v2 limits of nsbox's group and its parents", "[batch]") {
  BudgetHost host;
  host.Write("proc/self/cgroup", "0::/job/step\n");
  host.Write("cgroup/job/cpu.max", "50000 100000\n");
  host.Write("cgroup/job/step/cpu.max", "max 100000\n");
  host.Write("cgroup/job/memory.max", "268435456\n");
  host.Write("cgroup/job/memory.current", "67108864\n");
  host.Write("cgroup/job/step/pids.max", "100\n");
  host.Write("cgroup/job/step/pids.current", "10\n");
  auto budget = nsbox::cli::ComputeNodeBudget(host.Roots());
  CHECK(budget.cpus == Approx(0.5 * nsbox::cli::kCpuOvercommit));
  CHECK(budget.memory_bytes == (192u << 20));
  CHECK(budget.pids == 45);
}

TEST_CASE("on a v1 or hybrid host the budget reads each controller's own hierarchy", "[batch]") {
  BudgetHost host;
  host.Write("proc/self/cgroup",
             "12:pids:/slurm/job_7/step_0\n11:memory:/slurm/job_7\n4:cpu,cpuacct:/slurm/job_7/step_0\n"
             "1:name=systemd:/user.slice\n0::/user.slice\n");
  host.Write("cgroup/cpu,cpuacct/slurm/job_7/cpu.cfs_quota_us", "50000\n");
  host.Write("cgroup/cpu,cpuacct/slurm/job_7/cpu.cfs_period_us", "100000\n");
  host.Write("cgroup/cpu,cpuacct/slurm/job_7/step_0/cpu.cfs_quota_us", "-1\n");
  host.Write("cgroup/cpu,cpuacct/slurm/job_7/step_0/cpu.cfs_period_us", "100000\n");
  host.Write("cgroup/memory/slurm/memory.limit_in_bytes", "9223372036854771712\n");
  host.Write("cgroup/memory/slurm/job_7/memory.limit_in_bytes", "536870912\n");
  host.Write("cgroup/memory/slurm/job_7/memory.usage_in_bytes", "134217728\n");
  host.Write("cgroup/pids/slurm/job_7/step_0/pids.max", "60\n");
  host.Write("cgroup/pids/slurm/job_7/step_0/pids.current", "20\n");
  auto budget = nsbox::cli::ComputeNodeBudget(host.Roots());
  CHECK(budget.memory_bytes == (384u << 20));
  CHECK(budget.pids == 20);
  CHECK(budget.cpus == Approx(0.5 * nsbox::cli::kCpuOvercommit));
  CHECK(budget.explanation.find("cpu,cpuacct/slurm/job_7") != std::string::npos);
}

TEST_CASE("without cgroup limits the budget is the host's", "[batch]") {
  BudgetHost host;
  host.Write("proc/self/cgroup", "0::/\n");
  auto budget = nsbox::cli::ComputeNodeBudget(host.Roots());
  CHECK(budget.memory_bytes == (8ull << 30));
  CHECK(budget.pids == (32768 - 768) / 2);
}
