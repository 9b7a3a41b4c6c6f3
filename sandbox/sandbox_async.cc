// Sandbox::RunAsync and AwaitResult: Run() on a thread of its own, for callers that Kill() it or wait elsewhere.
#include "sandbox/sandbox.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include <fmt/format.h>

#include "sandbox/launch.h"
#include "sandbox/verdict.h"

namespace nsbox {

// The kill eventfd lives as long as the Sandbox: Kill() (from any thread, or a signal handler) never writes to a
// descriptor that a finished run closed and the process reused.
Sandbox::Sandbox(Executor executor, Policy policy)
    : executor_(std::move(executor)),
      policy_(std::move(policy)),
      kill_eventfd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      kill_eventfd_errno_(kill_eventfd_ < 0 ? errno : 0) {}

Sandbox::~Sandbox() {
  if (async_run_.joinable()) {
    Kill();
    async_run_.join();
  }
  if (kill_eventfd_ >= 0) ::close(kill_eventfd_);
}

void Sandbox::RunAsync() {
  if (async_run_.joinable()) return;
  try {
    async_run_ = std::thread([this] { async_result_ = Run(); });
  } catch (const std::system_error& e) {  // no thread (EAGAIN: RLIMIT_NPROC, threads-max): the run's setup error
    ran_ = true;
    async_result_ = SetupError(fmt::format("RunAsync: starting the run's thread: {}", e.what()));
  }
}

Result Sandbox::AwaitResult() {
  if (!async_run_.joinable()) {
    if (!async_result_) return SetupError("AwaitResult: no run was started with RunAsync, or its result was taken");
  } else {
    async_run_.join();
  }
  Result result = std::move(*async_result_);
  async_result_.reset();
  return result;
}

}  // namespace nsbox
