// Sandboxes: each one is an nsbox session made by `nsbox session create` (a subprocess: the server never forks
// itself, it has threads), owned by the server (--end-with-pid: they end with it however it ends) and spoken to
// in-process over the session's own socket, as `nsbox exec` and `nsbox cp` do.
#include "src/serve/sandboxes.h"

#include <limits.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "nsbox/executor.h"
#include "nsbox/policy.h"
#include "sandbox/spec/units.h"
#include "sandbox/stdin_feeder.h"
#include "src/cli/compiled_program.h"
#include "src/cli/image_store.h"
#include "src/cli/languages.h"
#include "src/netproxy/allow_list.h"
#include "src/runtime/subprocess.h"
#include "src/serve/api_error.h"
#include "src/session/repl.h"
#include "src/session/state.h"
#include "src/session/wire.h"
#include "src/session/workspace_copy.h"

namespace nsbox::serve {
namespace {

using json = nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

// The session's --network value.
std::string NetworkArg(const json& network, const ServeConfig& config) {
  if (network.is_string() && (network == "none" || network == "host")) return network.get<std::string>();
  const std::vector<std::string> hosts =
      network.is_string() ? config.restricted_hosts : network.at("allow").get<std::vector<std::string>>();
  std::string arg = "allow=";
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (i > 0) arg += ',';
    arg += hosts[i];
  }
  return arg;
}

std::string Seconds(double s) { return fmt::format("{}ms", static_cast<int64_t>(std::llround(s * 1000))); }

// An exec's stdin: a sealed file of `text`, which the program gets as it is (SealedStdin).
UniqueFd StdinFile(const std::string& text) {
  auto fd = SealedStdin(text);
  if (!fd.ok()) throw ApiError(500, "setup_failed", fd.status().Wrap("the exec's stdin").message());
  return std::move(*fd);
}

uint64_t HostMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    meminfo.ignore(1 << 10, '\n');
  }
  return 8ull << 30;
}

}  // namespace

std::string NewSandboxId() {
  unsigned char random[12];
  if (::getrandom(random, sizeof random, 0) != sizeof random) throw ApiError(500, "internal", "getrandom failed");
  std::string id = "sb-";
  for (unsigned char b : random) id += fmt::format("{:02x}", b);
  return id;
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
  spec.idle_timeout_s = body.contains("idle_timeout") ? Seconds(body["idle_timeout"], "idle_timeout")
                                                      : config.default_idle_timeout_s;
  spec.max_lifetime_s = body.contains("max_lifetime") ? Seconds(body["max_lifetime"], "max_lifetime")
                                                      : config.default_max_lifetime_s;
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
    if (arg.find('\0') != std::string::npos) throw BadRequest("'argv' holds a NUL byte");
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

json Sandbox::ToJson() const {
  return {{"id", id},
          {"template", spec.template_name},
          {"rootfs", rootfs},
          {"network", spec.network},
          {"limits", {{"memory", spec.memory}, {"pids", spec.pids}, {"cpus", spec.cpus}, {"tmpfs", spec.tmpfs}}},
          {"labels", spec.labels},
          {"created_at_ms", created_at_ms},
          {"idle_timeout", spec.idle_timeout_s},
          {"max_lifetime", spec.max_lifetime_s},
          {"from_pool", from_pool},
          {"state", "running"}};
}

Sandboxes::Sandboxes(ServeConfig config) : config_(std::move(config)) {
  if (config_.memory_budget_bytes == 0) config_.memory_budget_bytes = HostMemoryBytes();
}

Sandboxes::~Sandboxes() { EndAll(); }

Status Sandboxes::Start() {
  // A predecessor killed without ending its sandboxes: theirs end with it (--end-with-pid), but what is left of
  // them (a directory, a supervisor that has not noticed yet) goes now, all at once (a stopped supervisor takes
  // its whole deadline). A session that no server made (nsbox session create into this directory) is not the
  // server's to end: it refuses to start instead.
  const auto left = session::ListSessions(config_.state_dir);
  for (const auto& session : left)
    if (session.json.value("end_with_pid", 0) <= 0)
      return Status::Error(
          fmt::format("--state-dir {} holds {}, which no nsbox serve made (nsbox session create?): "
                      "give nsbox serve a directory of its own",
                      config_.state_dir, session::DescribeSession(session)));
  std::vector<std::thread> enders;
  for (const auto& session : left) {
    fmt::print(stderr, "nsbox serve: ending {} left by an earlier server\n", session.id());
    enders.emplace_back([this, id = session.id()] { EndSession(id, "an earlier server left it"); });
  }
  for (auto& t : enders) t.join();
  pool_thread_ = std::thread([this] { PoolLoop(); });
  reaper_thread_ = std::thread([this] { ReaperLoop(); });
  return OkStatus();
}

void Sandboxes::EndAll() {
  std::vector<std::string> sessions;
  {
    std::lock_guard lock(mutex_);
    if (ending_ && sandboxes_.empty() && pool_.empty()) return;
    ending_ = true;
    // One still being made has no session yet: Create ends it, seeing ending_, once it has one.
    for (auto& [id, sandbox] : sandboxes_)
      if (!sandbox->session_id.empty()) sessions.push_back(sandbox->session_id);
    sandboxes_.clear();
    for (auto& [name, entries] : pool_)
      for (auto& entry : entries) sessions.push_back(entry.made.session_id);
    pool_.clear();
    wake_.notify_all();
    pool_wake_.notify_all();
  }
  if (pool_thread_.joinable()) pool_thread_.join();
  if (reaper_thread_.joinable()) reaper_thread_.join();
  // In parallel: each may take its execs' ends.
  std::vector<std::thread> enders;
  const std::string why = "the server is shutting down";
  for (const auto& id : sessions) enders.emplace_back([this, id, &why] { EndSession(id, why); });
  for (auto& t : enders) t.join();
  // What the pool thread made while it was being stopped: this server's sessions only.
  for (const auto& left : session::ListSessions(config_.state_dir))
    if (left.json.value("end_with_pid", 0) == ::getpid()) EndSession(left.id(), why);
}

std::string Sandboxes::ResolveTemplate(const std::string& name) {
  if (name == "host") return "host";
  if (cli::ResolveImage(name).ok()) return name;
  // "python" is the host view's Python when no image of that name was built.
  if (name == "python") return "host";
  auto images = cli::ResolveImage(name);
  throw BadRequest(fmt::format("'template': {}", images.status().message()));
}

namespace {

// A lookup that failed for another reason than "no such session" (the record or /proc unreadable now: the server out
// of descriptors or memory) says nothing of the session: it is not taken for ended.
bool SessionEnded(const Status& lookup) { return lookup.kind() == ErrorKind::kNotFound; }

ApiError LookupFailed(const Status& lookup) {
  return ApiError(503, "unavailable", lookup.Wrap("the server could not look up the sandbox's session now").message());
}

}  // namespace

Sandboxes::Made Sandboxes::MakeSession(const SandboxSpec& spec) {
  Made made;
  made.rootfs = ResolveTemplate(spec.template_name);
  // The session's own time-outs are a backstop: the server ends its sandboxes itself (ReaperLoop), from the moment
  // a client has one.
  std::vector<std::string> argv = {config_.nsbox_bin, "session", "create", "--json",
                                   "--rootfs", made.rootfs,
                                   "--network", NetworkArg(spec.network, config_),
                                   "--memory", spec.memory,
                                   "--pids", std::to_string(spec.pids),
                                   "--cpus", fmt::format("{}", spec.cpus),
                                   "--tmpfs-size", spec.tmpfs,
                                   "--idle-timeout", Seconds(config_.max_idle_timeout_s + 60),
                                   "--max-lifetime", Seconds(config_.max_lifetime_cap_s * 2 + 60),
                                   "--end-with-pid", std::to_string(::getpid())};
  runtime::SubprocessSpec sub;
  sub.argv = argv;
  sub.env = {"NSBOX_STATE_DIR=" + config_.state_dir, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "LANG=C.UTF-8"};
  for (const char* keep : {"NSBOX_DATADIR", "NSBOX_IMAGE_STORE", "HOME", "XDG_RUNTIME_DIR"})
    if (const char* v = ::getenv(keep)) sub.env.push_back(fmt::format("{}={}", keep, v));
  sub.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto outcome = runtime::RunSubprocess(sub);
  if (!outcome.ok()) throw ApiError(500, "setup_failed", outcome.status().message());
  if (!outcome->exited || outcome->exit_code != 0) {
    std::string why = outcome->stderr_data;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    if (auto nl = why.rfind('\n'); nl != std::string::npos) why = why.substr(nl + 1);
    if (outcome->deadline_passed) why = "nsbox session create did not finish within 60 s";
    throw ApiError(500, "setup_failed", why.empty() ? "nsbox session create failed" : why);
  }
  try {
    made.session_id = json::parse(outcome->stdout_data).at("id").get<std::string>();
  } catch (const std::exception& e) {
    throw ApiError(500, "setup_failed", fmt::format("nsbox session create answered no id: {}", e.what()));
  }
  auto found = session::FindSession(config_.state_dir, made.session_id);
  if (!found.ok()) {
    // Made, but not readable now (out of descriptors): ended rather than left running, uncounted.
    if (!SessionEnded(found.status())) EndSession(made.session_id, "the server could not read it back");
    throw ApiError(500, "setup_failed", found.status().Wrap("the session just made").message());
  }
  made.record = std::make_shared<const session::SessionRecord>(std::move(*found));
  {
    std::lock_guard lock(records_mutex_);
    records_[made.session_id] = made.record;
  }
  return made;
}

void Sandboxes::EndSession(const std::string& session_id, const std::string& why) {
  auto found = session::FindSession(config_.state_dir, session_id);
  // A session that cannot be looked up now is looked up again for a while before it is given up (and logged): left
  // alone it would run on, no longer the server's, until the server exits.
  for (int tries = 0; !found.ok() && !SessionEnded(found.status()) && tries < 100; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    found = session::FindSession(config_.state_dir, session_id);
  }
  std::shared_ptr<const session::SessionRecord> made_record;  // as it was when this server made the session
  {
    std::lock_guard lock(records_mutex_);
    if (auto it = records_.find(session_id); it != records_.end()) {
      made_record = it->second;
      records_.erase(it);
    }
  }
  if (!found.ok()) {
    // Its directory gone (removed from outside) while its supervisor may run on: ended by the pid and start time
    // the server kept, which name that one process only (EndUnresponsiveSession).
    if (SessionEnded(found.status()) && made_record) {
      if (Status ended = session::EndUnresponsiveSession(*made_record); !ended.ok())
        fmt::print(stderr, "nsbox serve: could not end session {}: {}\n", session_id, ended.message());
      return;
    }
    if (!SessionEnded(found.status()))
      fmt::print(stderr, "nsbox serve: could not end session {}: {}\n", session_id, found.status().message());
    return;  // already gone
  }
  session::RequestOutcome outcome;
  auto removed = session::Request(*found, {{"op", "rm"}, {"reason", why}},
                                  {.deadline = session::kRemoveDeadline, .outcome = &outcome});
  if (!removed.ok() && !outcome.answered) (void)session::EndUnresponsiveSession(*found);
}

bool Sandboxes::PoolCanServe(const SandboxSpec& spec) const {
  return config_.pool.count(spec.template_name) && !spec.limits_given && spec.network == json("none");
}

uint64_t MemoryFootprint(const SandboxSpec& spec) { return spec.memory_bytes + spec.tmpfs_bytes; }

namespace {
uint64_t Pids(const SandboxSpec& spec) { return spec.pids; }
// A client's part of a budget (ServeConfig::client_budget_share).
uint64_t ClientShare(uint64_t budget, double share) {
  return static_cast<uint64_t>(static_cast<double>(budget) * share);
}
}  // namespace

uint64_t Sandboxes::Committed(uint64_t (*measure)(const SandboxSpec&), const std::string* owner) const {
  uint64_t sum = 0;
  for (const auto& [id, s] : sandboxes_)
    if (!owner || s->owner == *owner) sum += measure(s->spec);
  if (owner) return sum;
  for (const auto& [name, entries] : pool_)
    for (const auto& e : entries) sum += measure(e.spec);
  // Those the pool is making count already: a create meanwhile must not take their room.
  for (const auto& [name, filling] : pool_filling_) {
    SandboxSpec pooled;  // a pool's sandboxes have the default spec
    sum += static_cast<uint64_t>(filling) * measure(pooled);
  }
  return sum;
}

json Sandboxes::CapacityLocked(const std::string& owner) const {
  json pool = json::object();
  for (const auto& [name, target] : config_.pool) {
    auto it = pool_.find(name);
    auto filling = pool_filling_.find(name);
    pool[name] = {{"ready", it == pool_.end() ? 0 : it->second.size()},
                  {"target", target},
                  {"filling", filling == pool_filling_.end() ? 0 : filling->second}};
  }
  auto room = [](uint64_t budget, uint64_t committed) {
    return json{{"budget", budget}, {"committed", committed}, {"free", committed > budget ? 0 : budget - committed}};
  };
  size_t mine = 0;
  for (const auto& [id, s] : sandboxes_) mine += s->owner == owner;
  const double share = config_.client_budget_share;
  return {
      {"sandboxes",
       {{"running", sandboxes_.size()}, {"max", config_.max_sandboxes}, {"per_client_max", config_.max_per_client}}},
      {"pool", pool},
      {"memory_bytes", room(config_.memory_budget_bytes, Committed(MemoryFootprint))},
      {"pids", room(config_.pids_budget, Committed(Pids))},
      {"client",
       {{"sandboxes", {{"running", mine}, {"max", config_.max_per_client}}},
        {"memory_bytes", room(ClientShare(config_.memory_budget_bytes, share), Committed(MemoryFootprint, &owner))},
        {"pids", room(ClientShare(config_.pids_budget, share), Committed(Pids, &owner))}}}};
}

std::string Sandboxes::FailingPoolTemplate() const {
  std::lock_guard lock(mutex_);
  return pool_failing_.empty() ? std::string() : *pool_failing_.begin();
}

json Sandboxes::Capacity(const std::string& owner) {
  std::lock_guard lock(mutex_);
  return CapacityLocked(owner);
}

std::shared_ptr<Sandbox> Sandboxes::Create(const std::string& owner, const SandboxSpec& spec) {
  auto sandbox = std::make_shared<Sandbox>();
  sandbox->id = NewSandboxId();
  sandbox->owner = owner;
  sandbox->spec = spec;
  std::optional<PoolEntry> taken;
  {
    std::lock_guard lock(mutex_);
    if (ending_) throw ApiError(503, "unavailable", "the server is shutting down");
    size_t mine = 0;
    for (const auto& [id, s] : sandboxes_) mine += s->owner == owner;
    auto full = [&](const std::string& why) {
      return ApiError(429, "too_many_requests", why, {{"capacity", CapacityLocked(owner)}});
    };
    // A client's share of each budget, whether its sandbox comes from the pool or not.
    const double share = config_.client_budget_share;
    const uint64_t client_memory = ClientShare(config_.memory_budget_bytes, share);
    const uint64_t client_pids = ClientShare(config_.pids_budget, share);
    // Limits that this client's whole share could never hold are the request's fault, not a wait for room (429
    // tells a client to try again): judged before the counts.
    if (MemoryFootprint(spec) > client_memory)
      throw BadRequest(
          fmt::format("'limits': memory and tmpfs come to {} bytes, more than this client may commit in "
                      "all ({} bytes of the server's memory budget)",
                      MemoryFootprint(spec), client_memory));
    if (spec.pids > client_pids)
      throw BadRequest(
          fmt::format("'limits': pids {} is more than this client may commit in all ({} of the server's "
                      "pids budget)",
                      spec.pids, client_pids));
    if (sandboxes_.size() >= config_.max_sandboxes)
      throw full(fmt::format("the server runs its maximum of {} sandboxes", config_.max_sandboxes));
    if (mine >= config_.max_per_client)
      throw full(fmt::format("this client has its maximum of {} sandboxes", config_.max_per_client));
    if (Committed(MemoryFootprint, &owner) + MemoryFootprint(spec) > client_memory)
      throw full(fmt::format("this client's share of the memory budget ({} bytes) has no room for {} more",
                             client_memory, MemoryFootprint(spec)));
    if (Committed(Pids, &owner) + spec.pids > client_pids)
      throw full(fmt::format("this client's share of the pids budget ({}) has no room for {} more", client_pids,
                             spec.pids));
    if (PoolCanServe(spec) && !pool_[spec.template_name].empty()) {
      taken = std::move(pool_[spec.template_name].front());
      pool_[spec.template_name].pop_front();
      last_client_work_ = std::chrono::steady_clock::now();  // its first exec comes next: the refill waits for it
      pool_wake_.notify_one();                               // refill
    } else {
      if (Committed(MemoryFootprint) + MemoryFootprint(spec) > config_.memory_budget_bytes)
        throw full(fmt::format("the memory budget ({} bytes) has no room for {} more", config_.memory_budget_bytes,
                               MemoryFootprint(spec)));
      if (Committed(Pids) + spec.pids > config_.pids_budget)
        throw full(fmt::format("the pids budget ({}) has no room for {} more", config_.pids_budget, spec.pids));
    }
    // Held in the count while it is made, so that concurrent creates cannot overshoot the maximum.
    sandboxes_[sandbox->id] = sandbox;
  }
  // A ready sandbox may have ended while it waited (its session's own idle backstop after hours of quiet, a kill from
  // outside): such an entry is dropped, and a fresh one made in its room.
  if (taken && [&] {
        auto lookup = session::FindSession(config_.state_dir, taken->made.session_id);
        return !lookup.ok() && SessionEnded(lookup.status());
      }()) {
    EndSession(taken->made.session_id, "it ended while it waited in the pool");
    taken.reset();
  }
  Made made;
  try {
    made = taken ? taken->made : MakeSession(spec);
  } catch (...) {
    std::lock_guard lock(mutex_);
    sandboxes_.erase(sandbox->id);
    throw;
  }
  bool ending;
  {
    // Published whole, under the lock: the reaper and Find see a sandbox either being made (no session yet) or
    // complete, never with a session but no creation time.
    std::lock_guard lock(mutex_);
    sandbox->session_id = made.session_id;
    sandbox->rootfs = made.rootfs;
    sandbox->record = made.record;
    sandbox->from_pool = taken.has_value();
    sandbox->created_at_ms = NowMs();
    sandbox->last_used_ms = sandbox->created_at_ms;
    ending = ending_;
  }
  if (ending) {  // the end came while it was made
    EndSession(sandbox->session_id, "the server is shutting down");
    throw ApiError(503, "unavailable", "the server is shutting down");
  }
  return sandbox;
}

std::shared_ptr<Sandbox> Sandboxes::Find(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  // Another client's sandbox is answered as unknown: ids are not an oracle.
  if (it == sandboxes_.end() || it->second->owner != owner || it->second->session_id.empty())
    throw NotFound(fmt::format("no sandbox '{}'", id));
  return it->second;
}

std::vector<std::shared_ptr<Sandbox>> Sandboxes::List(const std::string& owner) {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Sandbox>> out;
  for (const auto& [id, s] : sandboxes_)
    if (s->owner == owner && !s->session_id.empty()) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->created_at_ms < b->created_at_ms; });
  return out;
}

void Sandboxes::Remove(const std::string& owner, const std::string& id) { Remove(Find(owner, id)); }

void Sandboxes::Remove(const std::shared_ptr<Sandbox>& sandbox, const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(sandbox->id);
    if (it == sandboxes_.end() || it->second != sandbox) return;  // removed meanwhile
    sandboxes_.erase(it);
  }
  EndSession(sandbox->session_id, why);
}

void Sandboxes::Touch(Sandbox& sandbox) { sandbox.last_used_ms = NowMs(); }

bool Sandboxes::Ended(const std::shared_ptr<Sandbox>& sandbox) {
  {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(sandbox->id);
    if (it == sandboxes_.end() || it->second != sandbox) return true;
  }
  auto lookup = session::FindSession(config_.state_dir, sandbox->session_id);
  if (lookup.ok()) return false;
  if (!SessionEnded(lookup.status())) throw LookupFailed(lookup.status());
  Remove(sandbox);
  return true;
}

cli::Program Sandboxes::PlanExec(const Sandbox& sandbox, const ExecSpec& exec) const {
  cli::Program program;
  const session::SessionRecord& record = *sandbox.record;
  program.run.argv = exec.argv;
  program.run.env = DefaultSandboxEnv();
  program.run.env["PIP_BREAK_SYSTEM_PACKAGES"] = "1";
  std::optional<cli::Language> lang;
  if (!exec.language.empty()) {
    auto found_lang = cli::LookupLanguage(exec.language);
    if (!found_lang.ok() && found_lang.status().kind() != ErrorKind::kNotFound)  // the server's table, not the request
      throw ApiError(500, "internal", found_lang.status().message());
    if (!found_lang.ok()) throw BadRequest(fmt::format("'language': {}", found_lang.status().message()));
    lang = std::move(*found_lang);
    std::string rootfs_dir = record.json.value("rootfs_dir", "");
    if (Status toolchain = cli::CheckToolchain(*lang, rootfs_dir); !toolchain.ok())
      throw BadRequest(toolchain.message());
    if (lang->compile && exec.repl) throw BadRequest("'repl' is Python's; a compiled language has no REPL");
    const char* misplaced = exec.compile_timeout ? "compile_timeout" : exec.compile_memory ? "compile_memory" : nullptr;
    if (!lang->compile && misplaced)
      throw BadRequest(fmt::format("'{}': language '{}' has no compile step", misplaced, lang->name));
    cli::ApplyLanguage(*lang, program.run);
  }
  for (const auto& [k, v] : sandbox.spec.env) program.run.env[k] = v;
  for (const auto& [k, v] : exec.env) program.run.env[k] = v;
  program.run.cwd = exec.cwd;
  program.run.umask = 022;
  program.run.code = exec.code;
  program.run.wall_timeout = exec.timeout;
  program.run.output_limit_bytes = exec.output_limit;
  cli::Program planned = cli::FinishProgram(lang, std::move(program.run),
                                            {.timeout = exec.compile_timeout, .memory_bytes = exec.compile_memory},
                                            sandbox.spec.memory_bytes);
  // --max-timeout caps the compile step's time-out too, the table's default (up to 60 s) as much as one asked for.
  if (planned.compile)
    planned.compile->wall_timeout =
        std::min<std::chrono::milliseconds>(planned.compile->wall_timeout, config_.max_timeout);
  return planned;
}

uint64_t ExecAnswerRoom(const ExecSpec& exec, bool compiled) {
  return exec.stdin_text.size() + exec.code.size() + (compiled ? 2 : 1) * 2 * 6 * exec.output_limit +
         session::kMaxChangedFilesBytes + (1 << 20);
}

class Sandboxes::AnswerRoomTicket {
 public:
  AnswerRoomTicket(Sandboxes* owner, uint64_t bytes) : owner_(owner), bytes_(bytes) {}
  ~AnswerRoomTicket() {
    std::lock_guard lock(owner_->room_mutex_);
    owner_->room_used_ -= bytes_;
    owner_->room_freed_.notify_all();
  }
  AnswerRoomTicket(const AnswerRoomTicket&) = delete;
  AnswerRoomTicket& operator=(const AnswerRoomTicket&) = delete;

 private:
  Sandboxes* owner_;
  uint64_t bytes_;
};

std::shared_ptr<Sandboxes::AnswerRoomTicket> Sandboxes::ReserveAnswerRoom(uint64_t bytes,
                                                                          const std::function<bool()>& client_gone) {
  constexpr auto kRoomWait = std::chrono::seconds(10);
  const auto give_up = std::chrono::steady_clock::now() + kRoomWait;
  std::unique_lock lock(room_mutex_);
  // One exec alone always has room, whatever its size: the cap bounds how many run beside each other.
  while (room_used_ != 0 && room_used_ + bytes > config_.exec_answer_room_bytes) {
    if (std::chrono::steady_clock::now() >= give_up || (client_gone && client_gone()))
      throw ApiError(
          503, "unavailable",
          fmt::format("the server holds {} bytes of answers being built or not yet read by their clients "
                      "(--max-held-answers {}); this one needs {} (an exec's: its stdin and code, 12 times its "
                      "output_limit and 9 MiB); nothing was done; try again",
                      room_used_, config_.exec_answer_room_bytes, bytes));
    room_freed_.wait_for(lock, std::chrono::milliseconds(200));
  }
  room_used_ += bytes;
  return std::make_shared<AnswerRoomTicket>(this, bytes);
}

json Sandboxes::Exec(const std::shared_ptr<Sandbox>& sandbox, const ExecSpec& exec, const cli::Program& program,
                     const OutputSink& sink, const std::function<bool()>& client_gone,
                     std::shared_ptr<void>* room_out) {
  const session::SessionRecord& record = *sandbox->record;
  json request = cli::ExecRequest(program, exec.repl);
  request["stream"] = static_cast<bool>(sink);

  const bool client_work = !exec.pool_preload;
  // Each exec's answer is built whole, here and in the session's supervisor (both outside every sandbox's limits):
  // their number in one sandbox and the room their answers take in all are bounded before the program runs. An exec
  // counts from here, while it waits for room too.
  if (++sandbox->busy > static_cast<int>(config_.max_execs_per_sandbox) && client_work) {
    --sandbox->busy;
    throw ApiError(429, "too_many_requests",
                   fmt::format("sandbox {} runs its maximum of {} execs at once; try again when one has ended",
                               sandbox->id, config_.max_execs_per_sandbox),
                   {{"capacity", Capacity(sandbox->owner)}});
  }
  if (client_work) MarkClientWork(+1);
  struct Done {
    Sandboxes* self;
    Sandbox& s;
    bool client_work;
    ~Done() {
      self->Touch(s);
      --s.busy;
      if (client_work) self->MarkClientWork(-1);
    }
  } done{this, *sandbox, client_work};
  std::shared_ptr<AnswerRoomTicket> room;
  if (client_work) room = ReserveAnswerRoom(ExecAnswerRoom(exec, program.compile.has_value()), client_gone);
  if (room_out) *room_out = room;
  Touch(*sandbox);

  const auto deadline = std::chrono::steady_clock::now() + cli::ProgramTimeout(program) + session::kExecGrace;
  bool timed_out = false;
  auto conn = session::ConnectSession(record, deadline, &timed_out);
  if (!conn.ok()) {
    // A session that ended (its supervisor gone: `session rm` from outside, a kill) is a conflict, not our failure.
    if (Ended(sandbox)) throw ApiError(409, "conflict", fmt::format("sandbox {} has ended", sandbox->id));
    throw ApiError(500, "setup_failed", conn.status().message());
  }
  UniqueFd stdin_fd;
  if (exec.has_stdin) stdin_fd = StdinFile(exec.stdin_text);
  if (Status s = session::SendMessage(conn->get(), request, stdin_fd.get(), deadline, &timed_out); !s.ok()) {
    if (Ended(sandbox)) throw ApiError(409, "conflict", fmt::format("sandbox {} has ended", sandbox->id));
    throw ApiError(500, "setup_failed", s.message());
  }
  stdin_fd.reset();

  // The answer, and stream messages before it; a client that goes away closes the session connection, which ends
  // the exec (the supervisor watches it).
  session::MessageReader reader(conn->get(), session::MaxExecAnswerBytes(exec.output_limit), deadline);
  // A long answer is read in many pieces: a client that leaves, or the deadline, ends it between them.
  reader.SetStop([&] {
    return (client_gone && client_gone()) || std::chrono::steady_clock::now() >= deadline;
  });
  auto lost = [&](const std::string& why) {
    return json{{"status", "session_lost"},
                {"exit_code", nullptr},
                {"reason", why + "; the program may have run"},
                {"stdout", ""},
                {"stderr", ""}};
  };
  for (;;) {
    struct pollfd p = {conn->get(), POLLIN, 0};
    int ready = ::poll(&p, 1, 200);
    if (ready < 0 && errno != EINTR) return lost("poll(session socket) failed");
    if (client_gone && client_gone()) return json{{"status", "cancelled"}, {"reason", "the client went away"}};
    if (std::chrono::steady_clock::now() >= deadline) return lost("the session did not answer in time");
    if (ready <= 0) continue;
    auto message = reader.Next();
    if (client_gone && client_gone()) return json{{"status", "cancelled"}, {"reason", "the client went away"}};
    if (std::chrono::steady_clock::now() >= deadline) return lost("the session did not answer in time");
    if (!message.ok()) return lost(fmt::format("the session ended before it answered ({})", message.status().message()));
    if (message->contains("type")) {
      const std::string type = message->value("type", "");
      if (sink && (type == "stdout" || type == "stderr") && !sink(type == "stderr" ? 2 : 1, message->value("data", "")))
        return json{{"status", "cancelled"}, {"reason", "the client went away"}};
      continue;
    }
    // A refusal here is the supervisor's (a request it could not read, a REPL driver it lacks): the server's own
    // failure. An exec the session could not start because it is ending is a result (setup_error), not a refusal.
    if (!message->value("ok", false))
      throw ApiError(500, "setup_failed", message->value("error", "the session refused the exec"));
    auto result = message->find("result");
    return result == message->end() ? json::object() : std::move(*result);
  }
}

UniqueFd Sandboxes::OpenWorkspace(const std::shared_ptr<Sandbox>& sandbox, uid_t* uid, gid_t* gid) {
  auto found = session::FindSession(config_.state_dir, sandbox->session_id);
  if (!found.ok() && !SessionEnded(found.status())) throw LookupFailed(found.status());
  if (!found.ok()) {
    Remove(sandbox);
    throw ApiError(409, "conflict", fmt::format("sandbox {} has ended", sandbox->id));
  }
  UniqueFd workspace;
  auto answer = session::Request(*found, {{"op", "workspace"}}, {.received_fd = &workspace});
  if (!answer.ok()) {
    // Deleted (or ended) while this request looked for its workspace.
    if (Ended(sandbox)) throw ApiError(409, "conflict", fmt::format("sandbox {} has ended", sandbox->id));
    throw ApiError(500, "setup_failed", answer.status().message());
  }
  if (!workspace) throw ApiError(500, "setup_failed", "the session sent no workspace descriptor");
  *uid = answer->value("sandbox_host_uid", 65534u);
  *gid = answer->value("sandbox_host_gid", 65534u);
  Touch(*sandbox);
  return workspace;
}

namespace {
// A refusal of the workspace helpers: a missing file is 404, a link or a bad path 400, a full disk 413.
[[noreturn]] void ThrowFileError(const Status& status) {
  switch (status.kind()) {
    case ErrorKind::kNotFound:
      throw NotFound(status.message());
    case ErrorKind::kTooLarge:
      throw ApiError(413, "payload_too_large", status.message());
    case ErrorKind::kRefused:
      throw BadRequest(status.message());
    case ErrorKind::kConflict:
      throw ApiError(409, "conflict", status.message());
    case ErrorKind::kOther:
      break;
  }
  throw ApiError(500, "setup_failed", status.message());
}
}  // namespace

uint64_t Sandboxes::WriteFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path, const std::string& data) {
  std::string rel = WorkspacePath(path);
  if (data.size() > config_.max_file_bytes)
    throw ApiError(413, "payload_too_large", fmt::format("the file is larger than {} bytes", config_.max_file_bytes));
  uid_t uid;
  gid_t gid;
  UniqueFd workspace = OpenWorkspace(sandbox, &uid, &gid);
  auto written = session::WriteWorkspaceFile(workspace.get(), rel, data, uid, gid);
  if (!written.ok()) ThrowFileError(written.status());
  return *written;
}

std::string Sandboxes::ReadFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path,
                                std::shared_ptr<void>* room) {
  std::string rel = WorkspacePath(path);
  uid_t uid;
  gid_t gid;
  UniqueFd workspace = OpenWorkspace(sandbox, &uid, &gid);
  // Room for the bytes before they are read: 16 clients reading a 64 MiB file each and reading no answer held a GiB.
  auto data = session::ReadWorkspaceFile(workspace.get(), rel, config_.max_file_bytes,
                                         [&](uint64_t size) { *room = ReserveAnswerRoom(size, {}); });
  if (!data.ok()) ThrowFileError(data.status());
  return std::move(*data);
}

json Sandboxes::ListFiles(const std::shared_ptr<Sandbox>& sandbox, const std::string& path) {
  std::string rel = path.empty() ? std::string() : WorkspacePath(path);
  while (rel.ends_with("/")) rel.pop_back();
  uid_t uid;
  gid_t gid;
  UniqueFd workspace = OpenWorkspace(sandbox, &uid, &gid);
  auto listing = session::ListWorkspaceDir(workspace.get(), rel);
  if (!listing.ok()) ThrowFileError(listing.status());
  json out = json::array();
  bool truncated = listing->truncated;
  size_t answer_bytes = 0;
  for (const auto& e : listing->entries) {
    json entry = {{"name", e.name}, {"path", e.path}, {"type", e.type}, {"size", e.size}};
    if (!session::AppendListedFile(out, std::move(entry), kMaxListingBytes, &answer_bytes)) {
      truncated = true;
      break;
    }
  }
  json answer = {{"entries", out}};
  if (truncated) answer["truncated"] = true;
  return answer;
}

void Sandboxes::RemoveFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path) {
  std::string rel = WorkspacePath(path);
  uid_t uid;
  gid_t gid;
  UniqueFd workspace = OpenWorkspace(sandbox, &uid, &gid);
  if (Status s = session::RemoveWorkspacePath(workspace.get(), rel); !s.ok()) ThrowFileError(s);
}

void Sandboxes::MarkClientWork(int running_delta) {
  std::lock_guard lock(mutex_);
  client_execs_ += running_delta;
  last_client_work_ = std::chrono::steady_clock::now();
}

std::optional<std::chrono::steady_clock::time_point> RefillWaitUntil(const RefillState& state) {
  if (state.ready + state.filling < state.target / 2) return std::nullopt;
  const auto latest = state.wanted_since + kRefillMaxDelay;
  if (state.now >= latest) return std::nullopt;
  // While execs run, look again a quiet period later: their ends wake nobody (a wake-up would take the CPU from the
  // thread answering the client), so the pool thread polls, at this rate, only while a refill is due.
  if (state.client_execs > 0) return std::min(state.now + kRefillQuiet, latest);
  const auto quiet = state.last_client_work + kRefillQuiet;
  if (state.now >= quiet) return std::nullopt;
  return std::min(quiet, latest);
}

bool Sandboxes::AwaitRefillTurn(std::unique_lock<std::mutex>& lock, const std::string& template_name,
                                std::chrono::steady_clock::time_point wanted_since) {
  while (!ending_) {
    auto until = RefillWaitUntil({.now = std::chrono::steady_clock::now(),
                                  .wanted_since = wanted_since,
                                  .last_client_work = last_client_work_,
                                  .client_execs = client_execs_,
                                  .ready = static_cast<int>(pool_[template_name].size()),
                                  .filling = pool_filling_[template_name],
                                  .target = config_.pool.at(template_name)});
    if (!until) return true;
    pool_wake_.wait_until(lock, *until);
  }
  return false;
}

void Sandboxes::PoolLoop() {
  std::unique_lock lock(mutex_);
  std::optional<std::chrono::steady_clock::time_point> wanted_since;  // since when a refill is due
  bool said_short = false;  // the log said the pool waits for the budgets (once, until it is full again)
  while (!ending_) {
    std::string want;
    for (const auto& [name, target] : config_.pool)
      if (static_cast<int>(pool_[name].size()) + pool_filling_[name] < target) want = name;
    if (want.empty()) {
      wanted_since.reset();
      said_short = false;
      pool_wake_.wait_for(lock, std::chrono::seconds(5));
      continue;
    }
    if (!wanted_since) wanted_since = std::chrono::steady_clock::now();
    SandboxSpec spec;
    spec.template_name = want;
    // The pool is held to the budgets as clients' sandboxes are (docs/service.md: "pool too").
    if (Committed(MemoryFootprint) + MemoryFootprint(spec) > config_.memory_budget_bytes ||
        Committed(Pids) + spec.pids > config_.pids_budget) {
      if (!said_short)
        fmt::print(stderr,
                   "nsbox serve: the pool waits for the budgets: a '{}' sandbox does not fit in "
                   "--memory-budget and --pids-budget beside what is committed\n",
                   want);
      said_short = true;
      pool_wake_.wait_for(lock, std::chrono::seconds(1));
      continue;
    }
    if (!AwaitRefillTurn(lock, want, *wanted_since)) break;
    wanted_since.reset();
    ++pool_filling_[want];
    lock.unlock();
    std::optional<Made> made;
    try {
      made = MakeSession(spec);
    } catch (const ApiError& e) {
      fmt::print(stderr, "nsbox serve: the pool could not make a '{}' sandbox: {}\n", want, e.what());
    }
    lock.lock();
    if (!made) {
      pool_failing_.insert(want);  // readyz says so until a make of it succeeds
      --pool_filling_[want];
      pool_wake_.wait_for(lock, std::chrono::seconds(5));  // not a tight loop on a broken template
      continue;
    }
    if (ending_) {
      --pool_filling_[want];
      lock.unlock();
      EndSession(made->session_id, "the server is shutting down");
      lock.lock();
      break;
    }
    if (want == "python") {
      // The python pool's sandboxes have their REPL interpreter started: a client's first cell does not wait for it.
      // Still counted as filling meanwhile, so that the budgets hold its room.
      lock.unlock();
      PreloadRepl(*made);
      lock.lock();
    }
    pool_failing_.erase(want);
    --pool_filling_[want];
    pool_[want].push_back({*made, spec});
  }
}

void Sandboxes::PreloadRepl(const Made& made) {
  auto sandbox = std::make_shared<Sandbox>();
  sandbox->id = "pool";
  sandbox->session_id = made.session_id;
  sandbox->record = made.record;
  ExecSpec cell;
  cell.language = "python";
  cell.code = "pass";
  cell.repl = true;
  cell.timeout = std::chrono::seconds(30);
  cell.pool_preload = true;
  try {
    (void)Exec(sandbox, cell, PlanExec(*sandbox, cell), {}, {});
  } catch (const ApiError& e) {
    fmt::print(stderr, "nsbox serve: the pool could not start a REPL in {}: {}\n", made.session_id, e.what());
  }
}

void Sandboxes::ReaperLoop() {
  std::unique_lock lock(mutex_);
  while (!ending_) {
    wake_.wait_for(lock, std::chrono::milliseconds(500));
    if (ending_) break;
    const int64_t now = NowMs();
    std::vector<std::pair<std::shared_ptr<Sandbox>, std::string>> expired;
    std::vector<std::shared_ptr<Sandbox>> live;
    for (const auto& [id, s] : sandboxes_) {
      if (s->session_id.empty()) continue;  // being made
      if (now - s->created_at_ms > static_cast<int64_t>(s->spec.max_lifetime_s * 1000))
        expired.emplace_back(s, "the sandbox's max_lifetime passed");
      else if (s->busy == 0 && now - s->last_used_ms > static_cast<int64_t>(s->spec.idle_timeout_s * 1000))
        expired.emplace_back(s, "the sandbox's idle_timeout passed");
      else
        live.push_back(s);
    }
    lock.unlock();
    // A sandbox whose supervisor was killed from outside is gone: listed as running, it would only fail each call.
    for (const auto& s : live) {
      if (!s->record) continue;
      auto runs = session::SupervisorRuns(*s->record);
      if (runs.ok() && !*runs)
        expired.emplace_back(s, "its session's supervisor ended (killed from outside the server)");
    }
    for (const auto& [s, why] : expired) {
      fmt::print(stderr, "nsbox serve: ending {} ({}): {}\n", s->id, s->owner, why);
      Remove(s, why);
    }
    lock.lock();
  }
}

}  // namespace nsbox::serve
