// Sandbox::RunAsync and AwaitResult: Run() on a thread of its own, for callers that Kill() it or wait elsewhere.
#include "sandbox/sandbox.h"

#include "sandbox/launch.h"

namespace nsbox {

Sandbox::~Sandbox() {
  if (async_run_.joinable()) {
    Kill();
    async_run_.join();
  }
}

void Sandbox::RunAsync() {
  if (async_run_.joinable()) return;
  async_run_ = std::thread([this] { async_result_ = Run(); });
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
