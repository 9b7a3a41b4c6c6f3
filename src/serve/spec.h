// What the service is configured with and what a request asks for: the server's limits (ServeConfig) and the checked
// bodies of a create (SandboxSpec) and of an exec (ExecSpec), parsed from the API's JSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nsbox::serve {

struct ServeConfig {
  std::string nsbox_bin;  // the nsbox program that makes the sessions
  std::string state_dir;  // the sessions' state directory (NSBOX_STATE_DIR of `nsbox session create`)
  size_t max_sandboxes = 64;
  size_t max_per_client = 16;
  std::chrono::seconds default_timeout{60}, max_timeout{600};
  double default_idle_timeout_s = 900, max_idle_timeout_s = 6 * 3600;
  double default_max_lifetime_s = 3600, max_lifetime_cap_s = 24 * 3600;
  uint64_t max_file_bytes = 64ull << 20;
  uint64_t memory_budget_bytes = 0;  // 0: the host's memory
  uint64_t pids_budget = 32768;
  // The part of each budget one client's sandboxes may commit, and of the answer room its answers may hold (1: all
  // of it). With several possible clients the server sets max_per_client / max_sandboxes, so that one client cannot
  // take a budget or the room whole (docs/service.md).
  double client_budget_share = 1.0;
  std::map<std::string, int> pool;  // template -> ready sandboxes to keep
  std::vector<std::string> restricted_hosts = {"pypi.org", "files.pythonhosted.org"};
  bool allow_network_host = false;
  // Execs in flight in one sandbox; beyond, an exec answers 429.
  size_t max_execs_per_sandbox = 64;
  // The answers being built or sent at once (an exec's worst case, ExecAnswerRoom; a file read's size): past it an
  // exec or a file read waits, then 503.
  uint64_t exec_answer_room_bytes = 512ull << 20;
};

// The memory a sandbox may hold on the host: its memory limit, and its /workspace, which files written through the
// API can fill without being charged to its memory group (the server's thread writes them).
struct SandboxSpec;
uint64_t MemoryFootprint(const SandboxSpec& spec);
// The processes a sandbox may hold: its pids limit.
uint64_t PidsFootprint(const SandboxSpec& spec);
// A client's part of a budget or of the answer room (ServeConfig::client_budget_share).
uint64_t ClientShare(uint64_t budget, double share);

// What a create asks for, checked (docs/api.md, POST /v1/sandboxes).
struct SandboxSpec {
  std::string template_name = "host";
  nlohmann::json network = "none";  // "none" | "host" | "restricted" | {"allow": [...]}
  std::string memory = "512M", tmpfs = "256M";
  uint64_t memory_bytes = 512ull << 20, tmpfs_bytes = 256ull << 20, pids = 256;
  double cpus = 1.0;
  bool limits_given = false;
  std::map<std::string, std::string> env;
  double idle_timeout_s = 0, max_lifetime_s = 0;  // 0: the server's defaults
  std::map<std::string, std::string> labels;
};
// Parses a create body's fields (others are left to the caller: `extra_allowed` names them); throws ApiError.
SandboxSpec ParseSandboxSpec(const nlohmann::json& body, const ServeConfig& config,
                             const std::vector<std::string>& extra_allowed = {});

// What an exec asks for, checked (POST /v1/sandboxes/{id}/exec).
struct ExecSpec {
  std::vector<std::string> argv;
  std::string language, code, stdin_text;
  bool has_stdin = false, repl = false;
  std::map<std::string, std::string> env;
  std::string cwd = "/workspace";
  std::chrono::milliseconds timeout{60'000};
  uint64_t output_limit = 1 << 20;
  // A compiled language's compile step: its time-out (capped like timeout) and its own memory limit; nullopt: the
  // language table's. Refused by Exec for a language without a compile step.
  std::optional<std::chrono::milliseconds> compile_timeout;
  std::optional<uint64_t> compile_memory;
  // Not from a client: the pool's own REPL start (PreloadRepl), which is no client's work for the refill's wait.
  bool pool_preload = false;
};
// What an exec may hold in the server's memory, reserved before it runs: its stdin and code, its output streams (the
// compile step's too) with every byte escaped as \u00XX (six bytes) at worst, its changed files (8 MiB at most) and
// 1 MiB for the rest.
uint64_t ExecAnswerRoom(const ExecSpec& exec, bool compiled);
// The fields of an exec body (POST /v1/sandboxes/{id}/exec; POST /v1/run takes them beside a create's).
extern const std::vector<std::string> kExecFields;
ExecSpec ParseExecSpec(const nlohmann::json& body, const ServeConfig& config,
                       const std::vector<std::string>& extra_allowed = {});

// The API's path ("x.py", "/workspace/x.py") as a path relative to /workspace; throws bad_request.
std::string WorkspacePath(const std::string& path);

}  // namespace nsbox::serve
