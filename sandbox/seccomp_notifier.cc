// SeccompNotifier: the user-notification listener that answers a filter's notifications with an errno and counts them.
#include "sandbox/seccomp.h"

#include <poll.h>
#include <seccomp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

namespace nsbox {

SeccompNotifier::SeccompNotifier(UniqueFd listener, int answer_errno, uint64_t answer_budget)
    : listener_(std::move(listener)),
      wake_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      answer_errno_(answer_errno),
      answer_budget_(answer_budget) {}

SeccompNotifier::~SeccompNotifier() {
  Stop();
  if (request_) seccomp_notify_free(request_, response_);
}

void SeccompNotifier::Start() {
  if (thread_.joinable() || !listener_) return;
  thread_ = std::thread([this] { Loop(); });
}

void SeccompNotifier::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  if (!wake_ || write(wake_.get(), &one, sizeof(one)) != sizeof(one)) {
    // Without the eventfd the thread still ends when the filter's last process is gone.
  }
  thread_.join();
}

std::map<std::string, uint64_t> SeccompNotifier::Denied() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return denied_;
}

bool SeccompNotifier::Capped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capped_;
}

bool SeccompNotifier::AnswerOne() {
  if (!request_ && seccomp_notify_alloc(&request_, &response_) < 0) {
    request_ = nullptr;
    return false;
  }
  std::memset(request_, 0, sizeof(*request_));
  // ENOENT: the caller died (or its call was interrupted) between poll and receive.
  if (seccomp_notify_receive(listener_.get(), request_) < 0) return true;
  std::memset(response_, 0, sizeof(*response_));
  response_->id = request_->id;
  response_->val = 0;
  response_->error = -answer_errno_;
  response_->flags = 0;
  // A failure means the caller is gone; the denial happened all the same.
  (void)seccomp_notify_respond(listener_.get(), response_);
  std::lock_guard<std::mutex> lock(mutex_);
  ++denied_[SyscallName(request_->data.nr)];
  // The budget spent: false closes the listener (kAnswerBudget says why).
  if (++answered_ >= answer_budget_) {
    capped_ = true;
    return false;
  }
  return true;
}

void SeccompNotifier::OnReady(short revents) {
  if (!listener_ || thread_.joinable()) return;
  bool keep = true;
  if (revents & POLLIN) keep = AnswerOne();
  // POLLHUP: no process uses the filter any more, so no notification can come. With no listener left the kernel
  // answers any further notification ENOSYS at once.
  else if (revents & (POLLHUP | POLLERR | POLLNVAL)) keep = false;
  if (!keep) listener_.reset();
}

void SeccompNotifier::Loop() {
  for (;;) {
    struct pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    const nfds_t count = wake_ ? 2 : 1;
    if (poll(fds, count, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (count == 2 && (fds[1].revents & POLLIN)) break;
    if (fds[0].revents & POLLIN) {
      if (!AnswerOne()) break;
      continue;
    }
    // POLLHUP: no process uses the filter any more, so no notification can come.
    if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) break;
  }
  // With no listener left the kernel answers further notifications ENOSYS at once, so a sandboxed
  // call can never hang on a notifier that has stopped.
  listener_.reset();
}

}  // namespace nsbox
