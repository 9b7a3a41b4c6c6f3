// `nsbox batch`'s plain parts: job lines into run's options, a job's cost, the node's budget, result lines' keys.
#include "src/cli/batch_job.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <type_traits>

#include <fmt/format.h>

#include "sandbox/base/bounded_json.h"
#include "sandbox/base/fs.h"
#include "sandbox/spec/units.h"
#include "src/cli/languages.h"

namespace nsbox::cli {
namespace {

constexpr size_t kMaxBatchStdinBytes = 16 << 20;

// The job line's field as a string, or an error naming it.
StatusOr<std::string> StringField(const nlohmann::json& value, std::string_view name) {
  if (!value.is_string()) return Status::Error(fmt::format("\"{}\" must be a string, not {}", name, value.type_name()));
  return value.get<std::string>();
}

// A duration given as "1s" (as --timeout), checked.
StatusOr<std::string> DurationField(const nlohmann::json& value, std::string_view name) {
  auto text = StringField(value, name);
  if (!text.ok()) return text.status();
  auto parsed = ParseDuration(*text);
  if (!parsed.ok()) return parsed.status().Wrap(fmt::format("\"{}\"", name));
  return *text;
}

// A size given as "256M" or as a number of bytes.
StatusOr<std::string> SizeField(const nlohmann::json& value, std::string_view name) {
  if (value.is_number_unsigned()) return std::to_string(value.get<uint64_t>());
  auto text = StringField(value, name);
  if (!text.ok())
    return Status::Error(fmt::format("\"{}\" must be a size such as \"256M\" or a number of bytes", name));
  auto parsed = ParseSize(*text);
  if (!parsed.ok()) return parsed.status().Wrap(fmt::format("\"{}\"", name));
  return *text;
}

Status ApplyLimits(const nlohmann::json& limits, BatchJob& job) {
  if (!limits.is_object())
    return Status::Error(fmt::format("\"limits\" must be an object, not {}", limits.type_name()));
  for (const auto& [key, value] : limits.items()) {
    const std::string name = "limits." + key;
    if (key != "output_limit" && key != "tmpfs_size" && job.sandbox.limit_given.empty())
      job.sandbox.limit_given = name;  // named if the batch was started with --dangerously-run-without-limits
    if (key == "memory" || key == "memory_swap" || key == "tmpfs_size" || key == "output_limit") {
      auto size = SizeField(value, name);
      if (!size.ok()) return size.status();
      if (key == "memory")
        job.sandbox.memory = *size;
      else if (key == "memory_swap")
        job.sandbox.memory_swap = *size;
      else if (key == "tmpfs_size")
        job.sandbox.tmpfs_size = *size;
      else if (ParseSize(*size).value() > kMaxOutputLimitBytes)  // SizeField parsed it
        return Status::Error(fmt::format("\"limits.output_limit\" must be at most 64M a stream (nsbox keeps the "
                                         "output in its own memory): write large outputs to files"));
      else
        job.program.output_limit = *size;
    } else if (key == "pids") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() == 0)
        return Status::Error("\"limits.pids\" must be a positive whole number");
      job.sandbox.pids = value.get<uint64_t>();
    } else if (key == "cpus") {
      if (!value.is_number() || !(value.get<double>() > 0) || !std::isfinite(value.get<double>()))
        return Status::Error("\"limits.cpus\" must be a positive number of CPUs, e.g. 0.5");
      if (value.get<double>() < 0.01)  // the cgroup's quota would be below a millisecond a period
        return Status::Error("\"limits.cpus\" must be at least 0.01");
      job.sandbox.cpus = value.get<double>();
    } else {
      return Status::Error(
          fmt::format("unknown limit \"{}\" (limits: memory, memory_swap, pids, cpus, tmpfs_size, "
                      "output_limit)",
                      name));
    }
  }
  return OkStatus();
}

Status ApplyFields(const nlohmann::json& object, BatchJob& job) {
  bool has_code = false, has_argv = false;
  for (const auto& [key, value] : object.items()) {
    if (key == "id") continue;
    if (key == "language") {
      auto lang = StringField(value, key);
      if (!lang.ok()) return lang.status();
      job.program.lang = *lang;
    } else if (key == "code") {
      auto code = StringField(value, key);
      if (!code.ok()) return code.status();
      job.program.code = std::move(*code);
      job.program.code_given = has_code = true;
    } else if (key == "argv") {
      if (!value.is_array() || value.empty()) return Status::Error("\"argv\" must be a non-empty array of strings");
      for (const auto& arg : value) {
        if (!arg.is_string()) return Status::Error("\"argv\" must be a non-empty array of strings");
        job.program.command.push_back(arg.get<std::string>());
      }
      has_argv = true;
    } else if (key == "stdin") {
      auto data = StringField(value, key);
      if (!data.ok()) return data.status();
      if (data->size() > kMaxBatchStdinBytes)
        return Status::Error(fmt::format("\"stdin\" is larger than {} bytes", kMaxBatchStdinBytes));
      job.stdin_data = std::move(*data);
    } else if (key == "timeout" || key == "compile_timeout") {
      auto timeout = DurationField(value, key);
      if (!timeout.ok()) return timeout.status();
      (key == "timeout" ? job.program.timeout : job.program.compile_timeout) = *timeout;
    } else if (key == "compile_memory") {
      auto size = SizeField(value, key);
      if (!size.ok()) return size.status();
      job.program.compile_memory = *size;
    } else if (key == "env") {
      if (!value.is_object()) return Status::Error("\"env\" must be an object of strings, e.g. {\"K\": \"V\"}");
      for (const auto& [name, setting] : value.items()) {
        if (!setting.is_string()) return Status::Error(fmt::format("\"env.{}\" must be a string", name));
        const bool odd_byte = std::any_of(name.begin(), name.end(), [](char c) {
          return c == '=' || static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) == 0x7f;
        });
        if (name.empty() || odd_byte)
          return Status::Error(
              fmt::format("\"env\": the name '{}' is empty or holds '=', a space or a control character", name));
        job.program.env.push_back(name + "=" + setting.get<std::string>());
      }
    } else if (key == "limits") {
      NSBOX_RETURN_IF_ERROR(ApplyLimits(value, job));
    } else if (key == "cases") {
      auto cases = ParseCaseArray(value);
      if (!cases.ok()) return cases.status();
      job.cases = std::move(*cases);
    } else {
      return Status::Error(
          fmt::format("unknown field \"{}\" (fields: id, language, code, argv, stdin, timeout, "
                      "compile_timeout, compile_memory, env, limits, cases)",
                      key));
    }
  }
  if (!job.cases.empty() && job.stdin_data)
    return Status::Error("\"cases\" gives each case its stdin: no \"stdin\" with it");
  if (has_code && has_argv) return Status::Error("give \"language\" with \"code\", or \"argv\", not both");
  if (!has_code && !has_argv) return Status::Error("nothing to run: give \"language\" and \"code\", or \"argv\"");
  if (has_code && job.program.lang.empty()) return Status::Error("\"code\" needs \"language\"");
  if (has_argv && !job.program.lang.empty()) return Status::Error("\"language\" goes with \"code\", not \"argv\"");
  return OkStatus();
}

// What a job holds back while it runs: its limits (none under --dangerously-run-without-limits), the two output
// buffers nsbox keeps outside them, and nsbox's own helpers (a thread, the cgroup reaper, the sandbox's init).
void ComputeCost(BatchJob& job) {
  auto output = ParseSize(job.program.output_limit);
  job.cost.memory_bytes = 2 * (output.ok() ? *output : 0) + (4 << 20);
  // A job with cases holds its report until the last case: the output it keeps, and each case's figures.
  if (!job.cases.empty()) job.cost.memory_bytes += kMaxCasesReportOutputBytes + job.cases.size() * (4 << 10);
  job.cost.pids = 4;
  if (job.sandbox.no_limits) return;
  auto memory = ParseSize(job.sandbox.memory);
  auto swap = ParseSize(job.sandbox.memory_swap.empty() ? "0" : job.sandbox.memory_swap);
  job.cost.memory_bytes += (memory.ok() ? *memory : 0) + (swap.ok() ? *swap : 0);
  job.cost.pids += job.sandbox.pids;
  job.cost.cpus = job.sandbox.cpus;
}

}  // namespace

BatchJob ParseJobLine(std::string_view text, uint64_t line, const SandboxOptions& sandbox_defaults,
                      const ProgramOptions& program_defaults) {
  BatchJob job;
  job.line = line;
  job.sandbox = sandbox_defaults;
  job.sandbox.limit_given.clear();
  job.program = program_defaults;
  job.key = fmt::format("line:{}", line);
  auto fail = [&](const Status& status) {
    job.error = status.Wrap(fmt::format("job on line {}", line));
    return job;
  };
  nlohmann::json object;
  try {
    object = ParseBoundedJson(text);
  } catch (const nlohmann::json::exception& e) {
    return fail(Status::Error(fmt::format("not a JSON object: {}", JsonErrorText(e))));
  } catch (const JsonRefused& e) {
    return fail(Status::Error(e.what()));
  }
  if (!object.is_object()) return fail(Status::Error(fmt::format("not a JSON object but {}", object.type_name())));
  auto id = object.find("id");
  if (id == object.end()) return fail(Status::Error("no \"id\""));
  if (!(id->is_string() && !id->get<std::string>().empty()) && !id->is_number_integer())
    return fail(Status::Error("\"id\" must be a non-empty string or an integer"));
  job.id = *id;
  job.key = id->dump();
  Status fields = ApplyFields(object, job);
  if (!fields.ok()) return fail(fields);
  // The batch's --compile-timeout and --compile-memory are for its compiled languages' jobs only.
  auto lang = LookupLanguage(job.program.lang);
  const bool compiled = !job.program.lang.empty() && lang.ok() && lang->compile;
  if (!object.contains("compile_timeout") && !compiled) job.program.compile_timeout.clear();
  if (!object.contains("compile_memory") && !compiled) job.program.compile_memory.clear();
  // A job's own, in the job's terms (the option checks name the command line's --compile-timeout and --lang).
  for (const char* key : {"compile_timeout", "compile_memory"}) {
    if (!object.contains(key) || compiled) continue;
    if (job.program.lang.empty())
      return fail(Status::Error(fmt::format("\"{}\" needs a compiled \"language\" (c, cpp, go, rust, ...)", key)));
    if (lang.ok())
      return fail(Status::Error(fmt::format("\"{}\": language '{}' has no compile step", key, lang->name)));
  }
  // A compiled language's steps each get their own memory limit; the sandbox's is the larger.
  // A bad compile_memory names the field when the job gave it, else the batch's option.
  auto program_memory = ApplyCompileMemory(
      job.program, job.sandbox, object.contains("compile_memory") ? "\"compile_memory\"" : "--compile-memory");
  if (!program_memory.ok()) return fail(program_memory.status());
  job.program_memory_bytes = *program_memory;
  ComputeCost(job);
  return job;
}

namespace {

// The top level of a result line, read as it streams by, up to its "result" (written after "id", "line" and
// "duplicate_of": the keys are sorted), so that a line of hundreds of megabytes of output is never built as a tree.
class ResultKeyReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  nlohmann::json id;  // a scalar; an object or array is kept as `true` (neither a string nor an integer)
  std::optional<uint64_t> line;
  bool has_id = false, has_duplicate_of = false, reached_result = false, top_is_object = false;

  bool null() override { return Scalar(nullptr); }
  bool boolean(bool value) override { return Scalar(value); }
  bool number_integer(number_integer_t value) override { return Scalar(value); }
  bool number_unsigned(number_unsigned_t value) override { return Scalar(value); }
  bool number_float(number_float_t value, const string_t&) override { return Scalar(value); }
  bool string(string_t& value) override { return Scalar(value); }
  bool binary(binary_t&) override { return Scalar(true); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) top_is_object = true;
    return Open();
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool key(string_t& name) override {
    if (depth_ != 1) return true;
    key_ = name;
    if (key_ == "result") {
      reached_result = true;
      return false;  // what follows is the run's result: not needed
    }
    if (key_ == "id") has_id = true;
    if (key_ == "duplicate_of") has_duplicate_of = true;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool Open() {
    if (depth_ == 1) Scalar(true);  // a top-level value that is an object or array
    ++depth_;
    return depth_ > 1 || top_is_object;
  }
  bool Close() {
    --depth_;
    return true;
  }
  template <typename T>
  bool Scalar(T&& value) {
    if (depth_ == 0) return false;  // the line is not an object
    if (depth_ != 1) return true;
    if (key_ == "id") id = std::forward<T>(value);
    if (key_ == "line") {
      line.reset();
      if constexpr (std::is_same_v<std::decay_t<T>, number_unsigned_t>) line = value;
    }
    return true;
  }
  int depth_ = 0;
  std::string key_;
};

}  // namespace

StatusOr<std::string> ResultLineKey(std::string_view text) {
  ResultKeyReader reader;
  (void)nlohmann::json::sax_parse(text.begin(), text.end(), &reader);
  if (!reader.reached_result || !reader.has_id)
    return Status::Error("not a batch result ({\"id\", \"line\", \"result\"})");
  const nlohmann::json& id = reader.id;
  // A duplicate id's refusal is the result of its line, not of the id (which the first line's job holds).
  if (reader.has_duplicate_of && reader.line) return fmt::format("line:{}", *reader.line);
  if (id.is_string() || id.is_number_integer()) return id.dump();
  if (id.is_null() && reader.line) return fmt::format("line:{}", *reader.line);
  return Status::Error("its \"id\" is neither a string, an integer, nor null with a \"line\"");
}

namespace {

std::optional<uint64_t> ReadNumber(const std::string& path) {
  auto text = ReadFile(path, 4096);
  if (!text.ok()) return std::nullopt;
  try {
    size_t used = 0;
    uint64_t value = std::stoull(*text, &used);
    return value;
  } catch (const std::exception&) {
    return std::nullopt;  // "max", or unreadable: no limit from here
  }
}

// The meminfo field in bytes ("MemAvailable:  123 kB").
std::optional<uint64_t> MeminfoBytes(const std::string& proc, std::string_view field) {
  std::ifstream in(proc + "/meminfo");
  std::string name;
  uint64_t kb = 0;
  std::string unit;
  while (in >> name >> kb) {
    std::getline(in, unit);
    if (name.size() == field.size() + 1 && name.starts_with(field)) return kb * 1024;
  }
  return std::nullopt;
}

// A limit read from one of nsbox's own cgroups: the file names of its version.
struct LimitFiles {
  std::string dir;
  bool v1 = false;
};

// nsbox's own cgroup directories and each of their parents below the root, innermost first, for `controller`
// (cpu, memory, pids): the cgroup v2 one ("0::/PATH") and, on a v1 or hybrid host, the v1 hierarchy holding the
// controller ("N:cpu,cpuacct:/PATH", mounted at ROOT/cpu,cpuacct), where Slurm and systemd put a job's limits.
std::vector<LimitFiles> OwnCgroupChain(const BudgetRoots& roots, std::string_view controller) {
  std::vector<LimitFiles> chain;
  std::ifstream in(roots.proc + "/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    std::string root;
    bool v1 = !controllers.empty();
    if (!v1) {
      root = roots.cgroup;
    } else {
      bool holds = false;
      for (size_t at = 0; at <= controllers.size();) {
        size_t comma = std::min(controllers.find(',', at), controllers.size());
        holds |= std::string_view(controllers).substr(at, comma - at) == controller;
        at = comma + 1;
      }
      if (!holds) continue;
      root = roots.cgroup + "/" + controllers;
    }
    while (path.starts_with("/") && path != "/") {
      chain.push_back({root + path, v1});
      path = path.substr(0, path.rfind('/'));
    }
  }
  return chain;
}

}  // namespace

NodeBudget ComputeNodeBudget(const BudgetRoots& roots) {
  NodeBudget budget;
  cpu_set_t set;
  CPU_ZERO(&set);
  double cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  std::optional<uint64_t> memory = MeminfoBytes(roots.proc, "MemAvailable");
  uint64_t pid_max = ReadNumber(roots.proc + "/sys/kernel/pid_max").value_or(32768);
  uint64_t threads_max = ReadNumber(roots.proc + "/sys/kernel/threads-max").value_or(pid_max);
  uint64_t tasks = 0;
  if (auto loadavg = ReadFile(roots.proc + "/loadavg", 4096); loadavg.ok()) {
    // "0.10 0.20 0.30 2/345 6789": the fourth field's second number is every task of the host.
    std::istringstream fields(*loadavg);
    std::string skip, running;
    fields >> skip >> skip >> skip >> running;
    if (auto slash = running.find('/'); slash != std::string::npos)
      tasks = std::strtoull(running.c_str() + slash + 1, nullptr, 10);
  }
  uint64_t pids = std::min(pid_max, threads_max);
  pids = pids > tasks ? pids - tasks : 0;
  std::string cgroup_note;
  for (const auto& [dir, v1] : OwnCgroupChain(roots, "cpu")) {
    double quota = 0, period = 0;
    if (v1) {  // cpu.cfs_quota_us is -1 without a limit
      auto q = ReadFile(dir + "/cpu.cfs_quota_us", 4096);
      auto p = ReadFile(dir + "/cpu.cfs_period_us", 4096);
      if (q.ok() && p.ok()) {
        std::istringstream fields(*q + " " + *p);
        fields >> quota >> period;
      }
    } else if (auto text = ReadFile(dir + "/cpu.max", 4096); text.ok() && !text->starts_with("max")) {
      std::istringstream fields(*text);
      fields >> quota >> period;
    }
    if (quota > 0 && period > 0 && quota / period < cpus) {
      cpus = quota / period;
      cgroup_note = dir;
    }
  }
  for (const auto& [dir, v1] : OwnCgroupChain(roots, "memory")) {
    // v1's memory.limit_in_bytes without a limit is a number near 2^63: it is above what is available anyway.
    auto memory_max = ReadNumber(dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max"));
    auto memory_current = ReadNumber(dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current"));
    if (memory_max) {
      uint64_t left = *memory_max > memory_current.value_or(0) ? *memory_max - memory_current.value_or(0) : 0;
      if (!memory || left < *memory) memory = left;
    }
  }
  for (const auto& [dir, v1] : OwnCgroupChain(roots, "pids")) {
    auto pids_max = ReadNumber(dir + "/pids.max");
    auto pids_current = ReadNumber(dir + "/pids.current");
    if (pids_max)
      pids = std::min(pids, *pids_max > pids_current.value_or(0) ? *pids_max - pids_current.value_or(0) : 0);
  }
  budget.cpus = cpus * kCpuOvercommit;
  budget.memory_bytes = memory.value_or(uint64_t{1} << 30);
  budget.pids = pids / 2;
  // Each running job holds about a dozen descriptors in nsbox (pipes, its cgroup, pidfds, the reaper's socket).
  struct rlimit nofile {};
  uint64_t descriptors = ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 ? nofile.rlim_cur : 1024;
  budget.max_jobs = std::max<uint64_t>(1, std::min<uint64_t>(descriptors > 64 ? (descriptors - 64) / 16 : 1, 4096));
  budget.explanation = fmt::format(
      "{:g} CPUs ({:g} usable{} x {:g}), {} of memory (MemAvailable and cgroup memory.max), {} pids (half of what "
      "pid_max, threads-max and pids.max leave), at most {} jobs (RLIMIT_NOFILE)",
      budget.cpus, cpus, cgroup_note.empty() ? "" : ", cpu.max of " + cgroup_note, kCpuOvercommit,
      FormatSize(budget.memory_bytes), budget.pids, budget.max_jobs);
  return budget;
}

}  // namespace nsbox::cli
