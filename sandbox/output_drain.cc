// OutputDrain: one thread polling the pipes of ended execs, splicing what comes into /dev/null until end-of-file.
#include "sandbox/output_drain.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace nsbox {

OutputDrain::~OutputDrain() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  if (wake_) {
    const uint64_t one = 1;
    ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
}

void OutputDrain::Add(UniqueFd pipe) {
  if (!pipe) return;
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  if (!wake_) {
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) return;  // no drain: the pipe is closed, as it was before there was one
    thread_ = std::thread([this] { Run(); });
  }
  added_.push_back(std::move(pipe));
  const uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
  (void)ignored;
}

void OutputDrain::Run() {
  UniqueFd null_fd(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  std::deque<UniqueFd> pipes;  // this thread's alone, oldest first
  std::vector<struct pollfd> polled;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      while (!added_.empty()) {
        pipes.push_back(std::move(added_.front()));
        added_.pop_front();
      }
    }
    while (pipes.size() > kMaxPipes) pipes.pop_front();
    polled.assign(1, {wake_.get(), POLLIN, 0});
    for (const UniqueFd& pipe : pipes) polled.push_back({pipe.get(), POLLIN, 0});
    if (::poll(polled.data(), polled.size(), -1) < 0 && errno != EINTR) return;
    if (polled[0].revents & POLLIN) {
      uint64_t count;
      ssize_t ignored = ::read(wake_.get(), &count, sizeof count);
      (void)ignored;
    }
    std::vector<bool> ended(pipes.size(), false);
    for (size_t i = 0; i < pipes.size(); ++i) {
      if (!polled[i + 1].revents) continue;
      // What is there, dropped: spliced into /dev/null (no copy), or read where that cannot be. A few rounds at most,
      // so that one busy writer does not keep the others, or the stop, waiting.
      ssize_t n = 0;
      char buffer[4096];
      for (int round = 0; round < 16; ++round) {
        n = null_fd ? ::splice(pipes[i].get(), nullptr, null_fd.get(), nullptr, 1 << 20, SPLICE_F_NONBLOCK)
                    : ::read(pipes[i].get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINVAL && null_fd) {  // a /dev/null that takes no splice: read instead
          null_fd.reset();
          n = 1;
          continue;
        }
        if (n <= 0) break;
      }
      ended[i] = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
    }
    for (size_t i = pipes.size(); i-- > 0;)
      if (ended[i]) pipes.erase(pipes.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

}  // namespace nsbox
