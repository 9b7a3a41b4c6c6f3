// The session supervisor: a detached process that owns one SessionSandbox and serves requests on a unix socket.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/policy.h"

namespace nsbox::cli {
struct NetworkAllowSpec;  // src/cli/network.h: the front end's, only passed through here
}  // namespace nsbox::cli

namespace nsbox::session {

struct SupervisorConfig {
  std::string id, name;
  std::string dir;  // the session's state directory, made by LaunchSupervisor (0700)
  Policy policy;
  std::chrono::milliseconds idle_timeout{15 * 60 * 1000};
  std::chrono::milliseconds max_lifetime{2 * 60 * 60 * 1000};
  // When set, the session ends as soon as this process ends (the MCP server or agent that owns it), however it ends.
  pid_t owner_pid = 0;
  // --network allow=: the egress proxy the supervisor runs for the session's whole life.
  std::shared_ptr<const cli::NetworkAllowSpec> network_allow;
  std::string repl_driver_source;  // rootfs/repl/driver.py; empty: REPL calls fail with a setup error
  std::string repl_driver_error;   // why it could not be read, for that error
  nlohmann::json record;           // what session.json says besides the pids (options, limits, owner)
};

// A supervisor that is ready, and waits to be claimed before it serves.
struct LaunchedSupervisor {
  nlohmann::json record;  // what session.json says
  // Claim() once the session's id has reached whoever asked for it. Until then the session is provisional: if this
  // descriptor closes unclaimed (the creating command failed, or was killed, SIGKILL included), the session ends.
  UniqueFd claim;
  void Claim() {
    const char byte = 'C';
    (void)!::write(claim.get(), &byte, 1);
    claim.reset();
  }
  // Gives it up: the session ends; waits until it has (at most `deadline`).
  void Disown(std::chrono::milliseconds deadline);
};

// Double-forks a supervisor (new session, stdio on /dev/null, so it outlives the calling command), which starts the
// sandbox, listens on <dir>/socket and writes <dir>/session.json. Returns that record once the supervisor is ready,
// or the error that stopped it (the directory is removed then).
StatusOr<LaunchedSupervisor> LaunchSupervisor(SupervisorConfig config);

}  // namespace nsbox::session
