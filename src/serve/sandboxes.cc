// Sandboxes: each one is an nsbox session made by `nsbox session create` (a subprocess: the server never forks
// itself, it has threads), owned by the server (--end-with-pid: they end with it however it ends) and spoken to
// in-process over the session's own socket, as `nsbox exec` and `nsbox cp` do. Here: their life, capacity and look-up;
// their execs are in sandbox_exec.cc, their files in sandbox_files.cc, the warm pool in pool.cc.
#include "src/serve/sandboxes.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "src/cli/compiled_program.h"
#include "src/cli/image_store.h"
#include "src/runtime/subprocess.h"
#include "src/serve/api_error.h"
#include "src/session/state.h"

namespace nsbox::serve {
namespace {

using json = nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
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
      {"pids", room(config_.pids_budget, Committed(PidsFootprint))},
      {"client",
       {{"sandboxes", {{"running", mine}, {"max", config_.max_per_client}}},
        {"memory_bytes", room(ClientShare(config_.memory_budget_bytes, share), Committed(MemoryFootprint, &owner))},
        {"pids", room(ClientShare(config_.pids_budget, share), Committed(PidsFootprint, &owner))}}}};
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
    if (Committed(PidsFootprint, &owner) + spec.pids > client_pids)
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
      if (Committed(PidsFootprint) + spec.pids > config_.pids_budget)
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
