// DockerRuntime: the docker run flags, engine detection and the kill of a container whose call timed out.
#include "src/runtime/docker_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "src/runtime/subprocess.h"

namespace nsbox::runtime {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

DockerRuntime::DockerRuntime(DockerRuntimeOptions options) : options_(std::move(options)) {
  std::string found = FindExecutable(options_.docker_bin);
  if (!found.empty()) options_.docker_bin = found;
}

Status DockerRuntime::EngineAvailable(const std::string& docker_bin) {
  std::string path = FindExecutable(docker_bin);
  if (path.empty()) return Status::Error(fmt::format("no docker client ({} is not on PATH)", docker_bin));
  SubprocessSpec spec;
  spec.argv = {path, "info", "--format", "{{.ServerVersion}}"};
  spec.env = InheritedEnvironment();
  spec.deadline = Clock::now() + milliseconds(15'000);
  auto outcome = RunSubprocess(spec);
  if (!outcome.ok()) return outcome.status();
  if (!outcome->exited || outcome->exit_code != 0) {
    std::string why = outcome->stderr_data.substr(0, outcome->stderr_data.find('\n'));
    return Status::Error(fmt::format("no Docker engine answers `docker info`: {}", why.empty() ? "no output" : why));
  }
  return OkStatus();
}

StatusOr<std::vector<std::string>> DockerRuntime::RunArgv(const DockerRuntimeOptions& o,
                                                          const std::string& container_name,
                                                          const std::string& language) {
  std::string lang = language;
  std::transform(lang.begin(), lang.end(), lang.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string image;
  std::vector<std::string> command;  // each reads the program from stdin
  if (lang == "python" || lang == "python3" || lang == "py") image = o.python_image, command = {"python3", "-"};
  else if (lang == "node" || lang == "javascript" || lang == "js") image = o.node_image, command = {"node", "-"};
  else if (lang == "bash") image = o.shell_image, command = {"bash", "-s"};
  else if (lang == "sh" || lang == "shell") image = o.shell_image, command = {"sh", "-s"};
  else
    return Status::Error(
        fmt::format("unknown language \"{}\" (the docker runtime knows python, bash, sh, node)", language));
  std::vector<std::string> argv{o.docker_bin, "run", "--rm", "-i", "--name", container_name,
                                "--network", "none",
                                "--memory", o.memory, "--memory-swap", o.memory,
                                "--cpus", o.cpus,
                                "--pids-limit", std::to_string(o.pids_limit),
                                "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m",
                                "--workdir", "/tmp",
                                "--user", "65534:65534",
                                "--cap-drop", "ALL",
                                "--security-opt", "no-new-privileges",
                                "--env", "HOME=/tmp",
                                image};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

StatusOr<ExecutionResult> DockerRuntime::execute(const std::string& language, const std::string& code,
                                                 const ExecuteOptions& options) {
  std::random_device rd;
  std::string container = fmt::format("nsbox-agent-{}-{}-{:08x}", getpid(), ++calls_, rd());
  auto argv = RunArgv(options_, container, language);
  if (!argv.ok()) return argv.status();

  Clock::time_point own_deadline = Clock::now() + options.timeout;
  bool caller_deadline_tighter = options.deadline && *options.deadline < own_deadline;
  SubprocessSpec spec;
  spec.argv = *argv;
  spec.env = InheritedEnvironment();  // DOCKER_HOST and friends
  spec.stdin_data = code;
  spec.output_limit_bytes = options.output_limit_bytes;
  spec.deadline = caller_deadline_tighter ? *options.deadline : own_deadline;
  spec.cancel = options.cancel;
  auto outcome = RunSubprocess(spec);
  if (!outcome.ok()) return outcome.status().Wrap("starting docker");

  ExecutionResult r;
  if (outcome->deadline_passed || outcome->cancelled) {
    // Killing the client leaves the container running: kill it by name (--rm then removes it).
    SubprocessSpec kill_spec;
    kill_spec.argv = {options_.docker_bin, "kill", container};
    kill_spec.env = InheritedEnvironment();
    kill_spec.deadline = Clock::now() + milliseconds(15'000);
    (void)RunSubprocess(kill_spec);
    r.status = RunStatus::kTimeout;
    r.reason = outcome->cancelled ? "cancelled"
               : caller_deadline_tighter ? "the caller's deadline passed"
                                         : fmt::format("wall-clock limit of {} ms reached", options.timeout.count());
  } else if (!outcome->exited) {
    return Status::Error(fmt::format("docker client killed by signal {}", outcome->signal));
  } else if (outcome->exit_code == 125) {
    // 125: docker itself failed (no engine, no image, bad flag); the program never ran.
    return Status::Error(fmt::format("docker run failed: {}", outcome->stderr_data.substr(0, 500)));
  } else if (outcome->exit_code == 126 || outcome->exit_code == 127) {
    r.status = RunStatus::kSetupError;
    r.reason = fmt::format("the container's interpreter could not be run (exit {})", outcome->exit_code);
  } else if (outcome->exit_code > 128 && outcome->exit_code < 160) {
    // The container's init reports a signal death as 128+N (137: SIGKILL, often the memory limit).
    r.status = outcome->exit_code == 137 ? RunStatus::kOom : RunStatus::kSignal;
    r.signal = outcome->exit_code - 128;
    r.reason = outcome->exit_code == 137 ? "killed by SIGKILL (likely the memory limit)"
                                         : fmt::format("killed by signal {}", r.signal);
  } else {
    r.status = outcome->exit_code == 0 ? RunStatus::kOk : RunStatus::kExit;
    r.exit_code = outcome->exit_code;
    r.reason = fmt::format("exited with code {}", outcome->exit_code);
  }
  r.stdout_data = outcome->stdout_data;
  r.stderr_data = outcome->stderr_data;
  r.stdout_bytes = outcome->stdout_bytes;
  r.stderr_bytes = outcome->stderr_bytes;
  r.stdout_truncated = outcome->stdout_truncated;
  r.stderr_truncated = outcome->stderr_truncated;
  r.wall_ms = outcome->wall_ms;
  SetExtra(r, "runtime", "docker");
  return r;
}

}  // namespace nsbox::runtime
