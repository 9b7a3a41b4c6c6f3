// LiveOutput: a queue of chunks and one writer thread that drains it into nsbox's stdout and stderr.
#include "sandbox/live_output.h"

#include <signal.h>

#include <cerrno>

#include "sandbox/base/fs.h"

namespace nsbox {

LiveOutput::LiveOutput(int stdout_fd, int stderr_fd) : fds_{-1, stdout_fd, stderr_fd} {}

LiveOutput::LiveOutput(Sink sink) : fds_{-1, -1, -1}, sink_(std::move(sink)) {}

LiveOutput::~LiveOutput() { Finish(); }

void LiveOutput::Add(int stream, std::string_view data) {
  if (data.empty() || (stream != 1 && stream != 2)) return;
  std::lock_guard lock(mutex_);
  if (error_ != 0 || finishing_) return;
  if (!queue_.empty() && queue_.back().first == stream) queue_.back().second.append(data);
  else queue_.emplace_back(stream, std::string(data));
  if (!writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
  wake_.notify_one();
}

int LiveOutput::Finish() {
  {
    std::lock_guard lock(mutex_);
    finishing_ = true;
    wake_.notify_one();
  }
  if (writer_.joinable()) writer_.join();
  std::lock_guard lock(mutex_);
  return error_;
}

void LiveOutput::WriterLoop() {
  // A reader that went away is EPIPE here, reported by Finish, not a SIGPIPE that would end the whole process.
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return !queue_.empty() || finishing_; });
    if (queue_.empty()) return;  // finishing, and all written
    auto [stream, chunk] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    int err = sink_ ? (sink_(stream, chunk) ? 0 : EPIPE) : WriteAll(fds_[stream], chunk);
    lock.lock();
    if (err != 0 && error_ == 0) {
      error_ = err;
      queue_.clear();
    }
  }
}

}  // namespace nsbox
