// Sandboxes' warm pool: the refill loop, when a refill may start beside the clients' work (RefillWaitUntil), and
// the REPL a pooled sandbox starts ahead of its first cell.
#include "src/serve/sandboxes.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/serve/api_error.h"

namespace nsbox::serve {

using json = nlohmann::json;

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
        Committed(PidsFootprint) + spec.pids > config_.pids_budget) {
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

}  // namespace nsbox::serve
