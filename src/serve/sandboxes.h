// Sandboxes: the service's sandboxes (each one an nsbox session under the server's state directory), whose client
// owns each, the warm pool, time-to-live and capacity, and the calls into a sandbox (exec, files, removal).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/unique_fd.h"
#include "src/cli/compiled_program.h"
#include "src/serve/spec.h"
#include "src/session/state.h"

namespace nsbox::serve {

struct Sandbox {
  std::string id, owner, session_id, rootfs;
  // The session's record, found once when it was made: each exec connects to its socket without a look-up.
  std::shared_ptr<const session::SessionRecord> record;
  SandboxSpec spec;
  int64_t created_at_ms = 0;
  bool from_pool = false;
  std::atomic<int64_t> last_used_ms{0};
  std::atomic<int> busy{0};
  nlohmann::json ToJson() const;
};

// Chunks of a streamed exec: stream 1 or 2 and the text. False: the client is gone.
using OutputSink = std::function<bool(int stream, const std::string& text)>;

class Sandboxes {
 public:
  explicit Sandboxes(ServeConfig config);
  ~Sandboxes();

  // Ends what a predecessor on this state directory left, then starts the pool and the time-to-live watcher.
  Status Start();
  // Ends every sandbox (the pool's too) and stops the threads.
  void EndAll();

  std::shared_ptr<Sandbox> Create(const std::string& owner, const SandboxSpec& spec);
  std::shared_ptr<Sandbox> Find(const std::string& owner, const std::string& id);  // throws not_found
  std::vector<std::shared_ptr<Sandbox>> List(const std::string& owner);
  void Remove(const std::string& owner, const std::string& id);  // throws not_found
  // Ends the sandbox; `why` becomes the reason of the execs it cuts short.
  void Remove(const std::shared_ptr<Sandbox>& sandbox, const std::string& why = "the sandbox was deleted");

  // The program an exec asks for, as `nsbox exec` would send it (a compiled language's compile step too). Throws
  // BadRequest for what the sandbox cannot run (an unknown language, a toolchain its root lacks, compile fields
  // without a compile step): called before a streamed answer commits its 200.
  cli::Program PlanExec(const Sandbox& sandbox, const ExecSpec& exec) const;
  // Runs the planned exec: its result object (nsbox exec --json's). `sink` (may be empty) gets output as it comes;
  // `client_gone` ends the exec early when it says so.
  // `room` (may be null): takes the answer's reservation, to be kept until the answer has been sent (else it ends
  // with the call).
  nlohmann::json Exec(const std::shared_ptr<Sandbox>& sandbox, const ExecSpec& exec, const cli::Program& program,
                      const OutputSink& sink, const std::function<bool()>& client_gone,
                      std::shared_ptr<void>* room = nullptr);

  // Files under the sandbox's /workspace (paths as the API takes them).
  uint64_t WriteFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path, const std::string& data);
  // The file's bytes, whose room in the answer room is reserved (waiting up to 10 s, then 503) before they are read
  // and passed out in `room`.
  std::string ReadFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path, std::shared_ptr<void>* room);
  nlohmann::json ListFiles(const std::shared_ptr<Sandbox>& sandbox, const std::string& path);
  void RemoveFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path);

  // The server's totals, and under "client" the caller's own share of them (what its next create is judged by).
  nlohmann::json Capacity(const std::string& owner);
  // A pool template whose last sandbox could not be made (the pool retries every 5 s), or empty: what readiness
  // (GET /v1/readyz) reports.
  std::string FailingPoolTemplate() const;
  const ServeConfig& config() const { return config_; }

  // Throws the 400 of a request whose answer's room is more than a client's share of it.
  void CheckAnswerRoomShare(uint64_t bytes) const;

 private:
  struct Made {
    std::string session_id, rootfs;
    std::shared_ptr<const session::SessionRecord> record;
  };
  Made MakeSession(const SandboxSpec& spec);           // throws ApiError (setup_failed)
  void EndSession(const std::string& session_id, const std::string& why);  // never throws
  std::string ResolveTemplate(const std::string& name);  // the --rootfs for a template; throws bad_request
  bool PoolCanServe(const SandboxSpec& spec) const;
  UniqueFd OpenWorkspace(const std::shared_ptr<Sandbox>& sandbox, uid_t* uid, gid_t* gid);
  void Touch(Sandbox& sandbox);
  // Whether the sandbox was removed meanwhile (a DELETE, its time-to-live) or its session ended (then it is removed):
  // a request on it that failed is then a conflict, not the server's failure. Throws when the look-up fails.
  bool Ended(const std::shared_ptr<Sandbox>& sandbox);
  void PoolLoop();
  // Waits, with `lock` held on mutex_, until a refill of `template_name` due since `wanted_since` may start
  // (RefillWaitUntil). False: the end came.
  bool AwaitRefillTurn(std::unique_lock<std::mutex>& lock, const std::string& template_name,
                       std::chrono::steady_clock::time_point wanted_since);
  void MarkClientWork(int running_delta);  // locks mutex_
  // Reserves `bytes` of the exec answer room for `owner`'s answer, waiting while the client is there, up to 10 s
  // (then 503); released when the returned object goes. With several possible clients each holds at most its share
  // of the room (ServeConfig::client_budget_share), and a request larger than that share is a 400.
  class AnswerRoomTicket;

  std::shared_ptr<AnswerRoomTicket> ReserveAnswerRoom(uint64_t bytes, const std::string& owner,
                                                      const std::function<bool()>& client_gone);
  void PreloadRepl(const Made& made);
  void ReaperLoop();
  // The sum of `measure` over the sandboxes (the pool's, and those it is making, too), or over `owner`'s alone; with
  // mutex_ held.
  uint64_t Committed(uint64_t (*measure)(const SandboxSpec&), const std::string* owner = nullptr) const;
  nlohmann::json CapacityLocked(const std::string& owner) const;

  ServeConfig config_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;                               // the end came (the reaper)
  std::condition_variable pool_wake_;                          // the pool is short, or the end came
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;  // by id
  struct PoolEntry {
    Made made;
    SandboxSpec spec;
  };
  std::map<std::string, std::deque<PoolEntry>> pool_;  // by template
  std::map<std::string, int> pool_filling_;            // creates in progress, by template
  // The record of each session this server made and has not ended, by session id: what ends one whose directory was
  // removed from outside (EndSession). Its own mutex: EndSession runs without mutex_.
  std::mutex records_mutex_;
  std::map<std::string, std::shared_ptr<const session::SessionRecord>> records_;
  // Clients' work, for the pool's refills to yield to (PoolLoop): execs running, and the last take or exec start or
  // end.
  int client_execs_ = 0;
  std::chrono::steady_clock::time_point last_client_work_;
  bool ending_ = false;
  std::set<std::string> pool_failing_;  // templates whose last make failed, with mutex_
  std::mutex room_mutex_;
  std::condition_variable room_freed_;
  uint64_t room_used_ = 0;  // of config_.exec_answer_room_bytes, with room_mutex_
  std::map<std::string, uint64_t> room_by_owner_;  // room_used_ by client, with room_mutex_
  std::thread pool_thread_, reaper_thread_;
};

// A directory listing's answer at most, as JSON; past it (or 20000 entries) the answer says "truncated": true.
inline constexpr size_t kMaxListingBytes = 8 << 20;

// A refill is a whole sandbox start (a process tree, namespaces, a root, cgroups): on a small host, run beside a
// client's exec it takes CPU from it, and a create from the pool is usually followed at once by its first exec. So
// while the pool still holds at least half its target, a due refill yields to the clients' work: it starts once no
// exec runs and none started or ended, and nothing was taken from the pool, for kRefillQuiet; but at most
// kRefillMaxDelay after it fell due. Below half, under a steady stream of creates, it starts at once.
inline constexpr std::chrono::milliseconds kRefillQuiet{20};
inline constexpr std::chrono::milliseconds kRefillMaxDelay{500};
struct RefillState {
  std::chrono::steady_clock::time_point now, wanted_since, last_client_work;
  int client_execs = 0;
  int ready = 0, filling = 0, target = 0;  // the template's pool
};
// When a refill may start: now (nullopt), or the time to look again.
std::optional<std::chrono::steady_clock::time_point> RefillWaitUntil(const RefillState& state);

// "sb-" and 24 hex digits from getrandom.
std::string NewSandboxId();

}  // namespace nsbox::serve
