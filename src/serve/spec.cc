// Parsing and checking the API's request bodies: a create's fields (SandboxSpec), an exec's (ExecSpec), a file's path.
#include "src/serve/spec.h"

#include <limits.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "nsbox/executor.h"
#include "nsbox/policy.h"
#include "sandbox/spec/units.h"
#include "src/netproxy/allow_list.h"
#include "src/serve/api_error.h"
#include "src/session/repl.h"
#include "src/session/workspace_copy.h"

namespace nsbox::serve {
namespace {

using json = nlohmann::json;

// Fields of a body that no form knows are refused: a misspelt option must not be silently ignored.
void CheckKnownFields(const json& body, const std::vector<std::string>& known, const std::vector<std::string>& extra) {
  if (!body.is_object()) throw BadRequest("the body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (std::find(extra.begin(), extra.end(), key) != extra.end()) continue;
    throw BadRequest(fmt::format("unknown field '{}'", key));
  }
}

std::map<std::string, std::string> StringMap(const json& value, const std::string& what, bool env_keys) {
  if (!value.is_object()) throw BadRequest(fmt::format("'{}' must be an object of strings", what));
  // The server keeps both for the sandbox's life, outside every budget: labels are a few words to find a sandbox by;
  // an environment must fit in execve's argument space (2 MiB) anyway.
  const size_t max_entries = env_keys ? 4096 : 64, max_bytes = env_keys ? (1 << 20) : (16 << 10);
  if (value.size() > max_entries)
    throw BadRequest(fmt::format("'{}' has {} entries; at most {}", what, value.size(), max_entries));
  size_t bytes = 0;
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) throw BadRequest(fmt::format("'{}.{}' must be a string", what, key));
    bytes += key.size() + v.get_ref<const std::string&>().size();
    if (bytes > max_bytes)
      throw BadRequest(fmt::format("'{}' holds more than {} bytes of names and values", what, max_bytes));
    if (env_keys) {
      bool ok = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0]));
      for (char c : key) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      if (!ok) throw BadRequest(fmt::format("'{}': '{}' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", what, key));
    }
    std::string text = v.get<std::string>();
    if (text.find('\0') != std::string::npos) throw BadRequest(fmt::format("'{}.{}' holds a NUL byte", what, key));
    out[key] = std::move(text);
  }
  return out;
}

double Seconds(const json& value, const std::string& what) {
  if (!value.is_number() || value.get<double>() <= 0 || !std::isfinite(value.get<double>()))
    throw BadRequest(fmt::format("'{}' must be a positive number of seconds", what));
  return value.get<double>();
}

// "256M" or a number of bytes.
uint64_t Size(const json& value, const std::string& what, std::string* text) {
  if (!value.is_string() && !value.is_number_unsigned())
    throw BadRequest(fmt::format("'{}' must be a size such as \"256M\" or a number of bytes", what));
  // A number is read as its digits are, by the parser nsbox's options use (which refuses sizes past 9e18).
  *text = value.is_string() ? value.get<std::string>() : std::to_string(value.get<uint64_t>());
  auto parsed = ParseSize(*text);
  if (!parsed.ok()) throw BadRequest(fmt::format("'{}': {}", what, parsed.status().message()));
  return *parsed;
}

std::string HostName(const json& value) {
  if (!value.is_string() || value.get<std::string>().empty()) throw BadRequest("'network.allow' must list host names");
  std::string host = value.get<std::string>();
  for (char c : host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '*')
      throw BadRequest(fmt::format("'network.allow': '{}' is not a host name", host));
  return host;
}

}  // namespace

uint64_t MemoryFootprint(const SandboxSpec& spec) { return spec.memory_bytes + spec.tmpfs_bytes; }

uint64_t PidsFootprint(const SandboxSpec& spec) { return spec.pids; }

uint64_t ClientShare(uint64_t budget, double share) {
  return static_cast<uint64_t>(static_cast<double>(budget) * share);
}

std::string WorkspacePath(const std::string& path) {
  if (path.empty()) throw BadRequest("give the file's path: ?path=NAME (relative to /workspace or under it)");
  // The kernel would take a path only up to a NUL byte: "a%00b" must not be "a".
  if (path.find('\0') != std::string::npos) throw BadRequest("the path holds a NUL byte");
  auto rel = session::WorkspaceRelativePath(path);
  if (!rel.ok()) throw BadRequest(rel.status().message());
  for (size_t start = 0; start <= rel->size();) {
    size_t end = std::min(rel->find('/', start), rel->size());
    if (end - start > NAME_MAX)
      throw BadRequest(
          fmt::format("the path has a name longer than {} bytes, more than a file system takes", NAME_MAX));
    start = end + 1;
  }
  if (rel->size() >= PATH_MAX) throw BadRequest(fmt::format("the path is longer than {} bytes", PATH_MAX - 1));
  return *rel;
}

SandboxSpec ParseSandboxSpec(const json& body, const ServeConfig& config, const std::vector<std::string>& extra) {
  CheckKnownFields(body, {"template", "network", "limits", "env", "idle_timeout", "max_lifetime", "labels"}, extra);
  SandboxSpec spec;
  if (body.contains("template")) {
    if (!body["template"].is_string() || body["template"].get<std::string>().empty())
      throw BadRequest("'template' must be a template or image name");
    spec.template_name = body["template"].get<std::string>();
  }
  if (body.contains("network")) {
    const json& n = body["network"];
    if (n.is_string()) {
      std::string mode = n.get<std::string>();
      if (mode != "none" && mode != "host" && mode != "restricted")
        throw BadRequest(fmt::format("'network': '{}' is not none, host, restricted or {{\"allow\": [...]}}", mode));
      if (mode == "host" && !config.allow_network_host)
        throw ApiError(403, "forbidden",
                       "'network': host is not allowed by this server (it shares the host's network, the API's port "
                       "included; start the server with --allow-network-host)");
      spec.network = mode;
    } else if (n.is_object() && n.size() == 1 && n.contains("allow") && n["allow"].is_array() && !n["allow"].empty()) {
      json hosts = json::array();
      for (const auto& h : n["allow"]) hosts.push_back(HostName(h));
      spec.network = {{"allow", hosts}};
      // The allow list's own rules (no IP address, no bare "*"), as the session will judge it.
      for (const auto& host : hosts)
        if (std::string problem = netproxy::AllowEntryProblem(host.get<std::string>()); !problem.empty())
          throw BadRequest(fmt::format("'network.allow': '{}': {}", host.get<std::string>(), problem));
    } else {
      throw BadRequest("'network' must be none, host, restricted or {\"allow\": [\"host\", ...]}");
    }
  }
  if (body.contains("limits")) {
    const json& l = body["limits"];
    if (!l.is_object()) throw BadRequest("'limits' must be an object");
    for (const auto& [key, value] : l.items()) {
      if (key == "memory") {
        spec.memory_bytes = Size(value, "limits.memory", &spec.memory);
      } else if (key == "tmpfs") {
        (void)Size(value, "limits.tmpfs", &spec.tmpfs);
      } else if (key == "pids") {
        if (!value.is_number_unsigned() || value.get<uint64_t>() == 0 || value.get<uint64_t>() > 1 << 20)
          throw BadRequest("'limits.pids' must be a positive whole number");
        spec.pids = value.get<uint64_t>();
      } else if (key == "cpus") {
        // From a hundredth: below it the cgroup set-up refuses the quota, after the session's clone (a 500).
        if (!value.is_number() || value.get<double>() < 0.01 || value.get<double>() > 1024)
          throw BadRequest("'limits.cpus' must be a number of CPUs from 0.01 to 1024");
        spec.cpus = value.get<double>();
      } else {
        throw BadRequest(fmt::format("unknown field 'limits.{}' (memory, pids, cpus, tmpfs)", key));
      }
    }
    spec.limits_given = !l.empty();
    // The engine's own bounds (a memory limit of at least 4M, ...), judged now: a value it refuses is the client's
    // error, not the server's failure to start a session.
    uint64_t tmpfs_bytes = 0;
    if (auto tmpfs = ParseSize(spec.tmpfs); tmpfs.ok()) tmpfs_bytes = spec.tmpfs_bytes = *tmpfs;
    CgroupLimits limits;
    limits.memory_max_bytes = spec.memory_bytes;
    limits.pids_max = spec.pids;
    limits.cpus = spec.cpus;
    auto checked = PolicyBuilder().SetCgroupLimits(limits).SetTmpfsSize(tmpfs_bytes).TryBuild();
    if (!checked.ok()) throw BadRequest(fmt::format("'limits': {}", checked.status().message()));
  }
  if (body.contains("env")) spec.env = StringMap(body["env"], "env", true);
  if (body.contains("labels")) spec.labels = StringMap(body["labels"], "labels", false);
  spec.idle_timeout_s =
      body.contains("idle_timeout") ? Seconds(body["idle_timeout"], "idle_timeout") : config.default_idle_timeout_s;
  spec.max_lifetime_s =
      body.contains("max_lifetime") ? Seconds(body["max_lifetime"], "max_lifetime") : config.default_max_lifetime_s;
  // The operator's caps win.
  spec.idle_timeout_s = std::min(spec.idle_timeout_s, config.max_idle_timeout_s);
  spec.max_lifetime_s = std::min(spec.max_lifetime_s, config.max_lifetime_cap_s);
  return spec;
}

const std::vector<std::string> kExecFields = {
    "argv", "cmd", "language", "code",         "stdin",           "timeout",
    "env",  "cwd", "repl",     "output_limit", "compile_timeout", "compile_memory"};

ExecSpec ParseExecSpec(const json& body, const ServeConfig& config, const std::vector<std::string>& extra) {
  CheckKnownFields(body, kExecFields, extra);
  ExecSpec exec;
  const int forms = body.contains("argv") + body.contains("cmd") + body.contains("language");
  if (forms != 1) throw BadRequest("give exactly one of 'argv', 'cmd', or 'language' with 'code'");
  if (body.contains("code") && !body.contains("language")) throw BadRequest("'code' needs 'language'");
  if (body.contains("argv")) {
    const json& a = body["argv"];
    if (!a.is_array() || a.empty()) throw BadRequest("'argv' must be a non-empty array of strings");
    for (const auto& s : a) {
      if (!s.is_string()) throw BadRequest("'argv' must be a non-empty array of strings");
      exec.argv.push_back(s.get<std::string>());
    }
    if (exec.argv[0].empty()) throw BadRequest("'argv[0]' is empty");
  } else if (body.contains("cmd")) {
    if (!body["cmd"].is_string() || body["cmd"].get<std::string>().empty())
      throw BadRequest("'cmd' must be a non-empty string (run by /bin/sh -c)");
    exec.argv = {"/bin/sh", "-c", body["cmd"].get<std::string>()};
  } else {
    if (!body["language"].is_string() || body["language"].get<std::string>().empty())
      throw BadRequest("'language' must be a language's name (python, bash, c, ...)");
    exec.language = body["language"].get<std::string>();
    if (!body.contains("code") || !body["code"].is_string()) throw BadRequest("'language' needs 'code' (a string)");
    exec.code = body["code"].get<std::string>();
  }
  for (const auto& arg : exec.argv)
    if (arg.find('\0') != std::string::npos)
      throw BadRequest(fmt::format("'{}' holds a NUL byte", body.contains("argv") ? "argv" : "cmd"));
  if (body.contains("stdin")) {
    if (!body["stdin"].is_string()) throw BadRequest("'stdin' must be a string");
    exec.stdin_text = body["stdin"].get<std::string>();
    exec.has_stdin = true;
  }
  double timeout = body.contains("timeout") ? Seconds(body["timeout"], "timeout")
                                            : static_cast<double>(config.default_timeout.count());
  timeout = std::min(timeout, static_cast<double>(config.max_timeout.count()));  // the operator's cap wins
  exec.timeout = std::chrono::milliseconds(std::max<int64_t>(1, std::llround(timeout * 1000)));
  if (body.contains("compile_timeout")) {
    if (exec.language.empty()) throw BadRequest("'compile_timeout' needs 'language' with a compiled language");
    double compile = std::min(Seconds(body["compile_timeout"], "compile_timeout"),
                              static_cast<double>(config.max_timeout.count()));  // capped as 'timeout' is
    exec.compile_timeout = std::chrono::milliseconds(std::max<int64_t>(1, std::llround(compile * 1000)));
  }
  if (body.contains("compile_memory")) {
    if (exec.language.empty()) throw BadRequest("'compile_memory' needs 'language' with a compiled language");
    std::string text;
    exec.compile_memory = Size(body["compile_memory"], "compile_memory", &text);
    if (*exec.compile_memory < kMinMemoryLimitBytes) throw BadRequest("'compile_memory' must be at least 4M");
  }
  if (body.contains("env")) exec.env = StringMap(body["env"], "env", true);
  if (body.contains("cwd")) {
    if (!body["cwd"].is_string() || body["cwd"].get<std::string>().empty() || body["cwd"].get<std::string>()[0] != '/')
      throw BadRequest("'cwd' must be an absolute path inside the sandbox");
    exec.cwd = body["cwd"].get<std::string>();
  }
  if (body.contains("repl")) {
    if (!body["repl"].is_boolean()) throw BadRequest("'repl' must be true or false");
    exec.repl = body["repl"].get<bool>();
    if (exec.repl && exec.language != "python" && exec.language != "python3")
      throw BadRequest("'repl' needs 'language': 'python' with 'code'");
    if (exec.repl && exec.has_stdin) throw BadRequest("'stdin' is not available with 'repl'");
    if (exec.repl && body.contains("cwd"))
      throw BadRequest("'cwd' is not available with 'repl': a cell runs where the interpreter is (os.chdir moves it)");
  }
  if (body.contains("output_limit")) {
    if (!body["output_limit"].is_number_unsigned() || body["output_limit"].get<uint64_t>() == 0)
      throw BadRequest("'output_limit' must be a positive number of bytes");
    exec.output_limit = body["output_limit"].get<uint64_t>();
    if (std::string why = CheckOutputLimit(exec.output_limit); !why.empty()) throw BadRequest("'output_limit': " + why);
  }
  return exec;
}

uint64_t ExecAnswerRoom(const ExecSpec& exec, bool compiled) {
  return exec.stdin_text.size() + exec.code.size() + (compiled ? 2 : 1) * 2 * 6 * exec.output_limit +
         session::kMaxChangedFilesBytes + (1 << 20);
}

}  // namespace nsbox::serve
