// The session supervisor's server (internal to supervisor.cc): serves requests on the session's socket, keeps its
// timers, and ends the session.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sandbox/base/unique_fd.h"
#include "sandbox/host_id_lease.h"
#include "sandbox/session.h"
#include "src/session/supervisor.h"

namespace nsbox::cli {
class EgressProxyHooks;  // src/cli/network.h
}  // namespace nsbox::cli

// Not part of supervisor.h's API: only RunSupervisor (supervisor.cc) makes a Server.
namespace nsbox::session::supervisor_internal {

using Clock = std::chrono::steady_clock;

class Server {
 public:
  Server(SupervisorConfig config, HostIdLease host_ids, std::unique_ptr<SessionSandbox> session, UniqueFd listener,
         cli::EgressProxyHooks* proxy, UniqueFd terminate);

  // The timers, on the main thread (pid 1's PR_SET_PDEATHSIG is tied to it): idle time-out, lifetime, pid 1's death.
  // Clients are served by workers blocked in accept(): the kernel hands a connection straight to an idle one.
  void Serve();

  // Ends the session once: every process (pid 1 takes its pid namespace along; exec helpers are killed), the
  // mounts (they lived in the session's mount namespace only), and the state directory. `why` ("removed by nsbox
  // session rm") becomes the reason of the execs and cells it cuts short, whose answers then go out before the process
  // exits; `own_requests`: the caller's own request, if it is one, which is not waited for.
  void Shutdown(std::string_view why, int own_requests);

 private:
  // Keeps an idle worker in accept() at all times (two in the steady state, so that a lone client causes no thread
  // churn); a worker that finds two others idle after a request ends.
  void SpawnWorker();
  void WorkerLoop();
  void ServeClient(UniqueFd conn, uid_t owner);
  // Serves one request; false when it was only a look at the session (info), which is not activity.
  bool Handle(UniqueFd conn);
  nlohmann::json Info();
  nlohmann::json Exec(const nlohmann::json& request, int stdin_fd, int conn);

  SupervisorConfig config_;
  HostIdLease host_ids_;  // before session_: given up only once the sandbox has ended
  std::unique_ptr<SessionSandbox> session_;
  UniqueFd listener_;
  cli::EgressProxyHooks* proxy_;  // null without --network allow=
  const Clock::time_point created_ = Clock::now();
  std::mutex activity_mutex_;
  std::condition_variable request_ended_;  // active_ went down
  int active_ = 0;
  Clock::time_point last_activity_;
  std::atomic<bool> removing_{false};
  bool shutting_down_ = false;  // under activity_mutex_ (read unlocked only by the main thread that sets it)
  std::atomic<int> idle_workers_{0};
  UniqueFd owner_;      // pidfd of config_.owner_pid
  UniqueFd terminate_;  // readable once SIGTERM came (OnTerminate, supervisor.cc)
  std::mutex shutdown_mutex_;
  bool shut_down_ = false;
};

}  // namespace nsbox::session::supervisor_internal
