// LocalRuntime: the interpreter table, the scratch directory and the mapping of a subprocess outcome to a Result.
#include "src/runtime/local_runtime.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "src/runtime/subprocess.h"

namespace nsbox::runtime {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

StatusOr<LocalRuntime::Interpreter> LocalRuntime::InterpreterFor(const std::string& language) {
  std::string lang = language;
  std::transform(lang.begin(), lang.end(), lang.begin(), [](unsigned char c) { return std::tolower(c); });
  Interpreter interp;
  if (lang == "python" || lang == "python3" || lang == "py") interp = {"/usr/bin/python3", ".py"};
  else if (lang == "bash") interp = {"/bin/bash", ".sh"};
  else if (lang == "sh" || lang == "shell") interp = {"/bin/sh", ".sh"};
  else if (lang == "node" || lang == "javascript" || lang == "js") interp = {FindExecutable("node"), ".js"};
  else
    return Status::Error(
        fmt::format("unknown language \"{}\" (the local runtime knows python, bash, sh, node)", language));
  if (interp.path.empty() || !PathExists(interp.path))
    return Status::Error(fmt::format("no interpreter for \"{}\" on this host ({})", language,
                                     interp.path.empty() ? "not on PATH" : interp.path + " is missing"));
  return interp;
}

StatusOr<ExecutionResult> LocalRuntime::execute(const std::string& language, const std::string& code,
                                                const ExecuteOptions& options) {
  auto interp = InterpreterFor(language);
  if (!interp.ok()) return interp.status();
  std::string workdir;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (workdir_.empty()) {
      std::string templ = (std::filesystem::temp_directory_path() / "nsbox-local-XXXXXX").string();
      if (!mkdtemp(templ.data())) return Status::Errno(fmt::format("mkdtemp({})", templ));
      workdir_ = templ;
    }
    workdir = workdir_;
  }
  std::string script = fmt::format("{}/.nsbox-script-{}{}", workdir, ++scripts_, interp->extension);
  NSBOX_RETURN_IF_ERROR(WriteFile(script, code).Wrap("writing the script"));

  Clock::time_point own_deadline = Clock::now() + options.timeout;
  bool caller_deadline_tighter = options.deadline && *options.deadline < own_deadline;
  SubprocessSpec spec;
  spec.argv = {interp->path, script};
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + workdir,  "LANG=C.UTF-8", "PYTHONUNBUFFERED=1",
              "PYTHONDONTWRITEBYTECODE=1",         "TMPDIR=" + workdir};
  spec.cwd = workdir;
  spec.output_limit_bytes = options.output_limit_bytes;
  spec.deadline = caller_deadline_tighter ? *options.deadline : own_deadline;
  spec.cancel = options.cancel;
  auto outcome = RunSubprocess(spec);
  unlink(script.c_str());
  if (!outcome.ok()) return outcome.status().Wrap("local runtime");

  ExecutionResult r;
  r.stdout_data = outcome->stdout_data;
  r.stderr_data = outcome->stderr_data;
  r.stdout_bytes = outcome->stdout_bytes;
  r.stderr_bytes = outcome->stderr_bytes;
  r.stdout_truncated = outcome->stdout_truncated;
  r.stderr_truncated = outcome->stderr_truncated;
  r.wall_ms = outcome->wall_ms;
  r.cpu_ms = outcome->cpu_ms;
  r.peak_memory_bytes = outcome->peak_rss_bytes;
  r.signal = outcome->signal;
  r.exit_code = outcome->exited ? outcome->exit_code : -1;
  if (outcome->cancelled) {
    r.status = RunStatus::kTimeout;
    r.reason = "cancelled";
  } else if (outcome->deadline_passed) {
    r.status = RunStatus::kTimeout;
    r.reason = caller_deadline_tighter ? "the caller's deadline passed"
                                       : fmt::format("wall-clock limit of {} ms reached", options.timeout.count());
  } else if (outcome->exited) {
    r.status = outcome->exit_code == 0 ? RunStatus::kOk : RunStatus::kExit;
    r.reason = fmt::format("exited with code {}", outcome->exit_code);
  } else {
    r.status = RunStatus::kSignal;
    r.reason = fmt::format("killed by signal {} ({})", outcome->signal,
                           sigdescr_np(outcome->signal) ? sigdescr_np(outcome->signal) : "?");
  }
  SetExtra(r, "runtime", "local");
  return r;
}

void LocalRuntime::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (workdir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(workdir_, ec);
  workdir_.clear();
}

}  // namespace nsbox::runtime
