// Supervisor: the poll loop that drains a program's output, feeds its stdin, keeps its clock and reads its reports.
#include "sandbox/supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "sandbox/base/fd_passing.h"
#include "sandbox/launch.h"

namespace nsbox {

ControlChannel::ControlChannel(UniqueFd fd) : fd_(std::move(fd)) { SetNonBlocking(fd_.get()); }

void ControlChannel::Read(const std::function<void(const InitMessage&)>& on_message) {
  char buffer[4096];
  while (fd_) {
    ssize_t n = ::read(fd_.get(), buffer, sizeof buffer);
    if (n > 0) {
      bytes_.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) fd_.reset();
    break;
  }
  while (bytes_.size() >= sizeof(InitMessage)) {
    InitMessage msg;
    memcpy(&msg, bytes_.data(), sizeof msg);
    bytes_.erase(0, sizeof msg);
    on_message(msg);
  }
}

void ControlChannel::ReadSetupFailure(std::optional<SetupFailure>* failure) {
  Read([&](const InitMessage& msg) {
    if (msg.kind == InitMessage::kSetupError && !*failure)
      *failure = SetupFailure{msg.text, msg.err, msg.at_execve != 0};
  });
}

void SeccompListener::Receive(int notify_errno, bool threaded) {
  if (!socket) return;
  int fd = ReceiveFd(socket.get());
  if (fd < 0 && errno == EAGAIN) return;
  if (fd >= 0) {
    notifier = std::make_unique<SeccompNotifier>(UniqueFd(fd), notify_errno);
    if (threaded) notifier->Start();
  }
  socket.reset();  // one listener per payload; end of file means it never got that far
}

void SeccompListener::Report(VerdictInputs* in) {
  if (!notifier) return;
  notifier->Stop();
  in->denied_syscalls = notifier->Denied();
  in->denied_syscalls_capped = notifier->Capped();
}

void Supervisor::AddOutput(UniqueFd* out, UniqueFd* err, LiveOutput* live) {
  out_ = out;
  err_ = err;
  live_ = live;
  SetNonBlocking(out->get());
  SetNonBlocking(err->get());
}

void Supervisor::AddSource(std::function<int()> fd, short events, std::function<void(short)> on_poll) {
  sources_.push_back({std::move(fd), events, std::move(on_poll)});
}

void Supervisor::AddSeccompListener(SeccompListener* listener, int notify_errno, bool threaded) {
  if (!threaded) {  // answered here; a threaded notifier answers on its own
    AddSource([listener] { return listener->notifier ? listener->notifier->listener_fd() : -1; }, POLLIN,
              [listener](short revents) {
                if (revents) listener->notifier->OnReady(revents);
              });
  }
  AddSource([listener] { return listener->socket.get(); }, POLLIN,
            [listener, notify_errno, threaded](short) { listener->Receive(notify_errno, threaded); });
}

void Supervisor::AddControl(ControlChannel* control, std::function<void(const InitMessage&)> on_message) {
  AddSource([control] { return control->fd(); }, POLLIN,
            [control, on_message = std::move(on_message)](short) { control->Read(on_message); });
}

void Supervisor::SetDeadline(Clock::time_point deadline, std::function<void()> on_deadline) {
  deadline_ = deadline;
  on_deadline_ = std::move(on_deadline);
}

Status Supervisor::Run(const std::function<bool()>& done) {
  std::vector<struct pollfd> fds;
  std::vector<int> index;  // each source's entry in fds, -1 when not polled
  while (!done()) {
    const auto now = Clock::now();
    if (!ending_ && on_deadline_ && now >= deadline_) {
      on_deadline_();
      on_deadline_ = nullptr;
      if (done()) break;
    }
    int wait_ms = -1;
    if (ending_) {
      wait_ms = 50;
    } else if (deadline_ != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now).count();
      wait_ms = static_cast<int>(std::clamp<int64_t>(left + 1, 0, INT_MAX));
    }
    fds.clear();
    index.assign(sources_.size(), -1);
    for (size_t i = 0; i < sources_.size(); ++i) {
      const int fd = sources_[i].fd();
      if (fd < 0) continue;
      index[i] = static_cast<int>(fds.size());
      fds.push_back({fd, sources_[i].events, 0});
    }
    for (UniqueFd* stream : {out_, err_})
      if (stream && *stream) fds.push_back({stream->get(), POLLIN, 0});
    const size_t feeder_index = fds.size();
    if (feeder_) {
      fds.resize(fds.size() + 2);
      fds.resize(feeder_index + static_cast<size_t>(feeder_->AddPollFds(fds.data() + feeder_index)));
    }
    int rc = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), wait_ms);
    if (rc < 0 && errno != EINTR) return Status::Errno("poll");
    if (rc > 0 && feeder_) feeder_->OnPoll(fds.data() + feeder_index);
    if (out_ && *out_) Drain(out_, stdout_, 1);
    if (err_ && *err_) Drain(err_, stderr_, 2);
    for (size_t i = 0; i < sources_.size(); ++i)
      sources_[i].on_poll(rc > 0 && index[i] >= 0 ? fds[static_cast<size_t>(index[i])].revents : 0);
  }
  return OkStatus();
}

void Supervisor::Drain(UniqueFd* fd, OutputBuffer& sink, int stream) {
  while (*fd) {
    ssize_t n = ::read(fd->get(), buffer_.get(), kReadChunk);
    if (n > 0) {
      std::string_view chunk(buffer_.get(), static_cast<size_t>(n));
      sink.Append(chunk);
      if (live_) {  // what the head has settled, as it grows; the rest of what is kept once the program is done
        std::string_view settled = sink.SettledHead();
        uint64_t& passed = live_passed_[stream == 2];
        if (settled.size() > passed) live_->Add(stream, settled.substr(passed));
        passed = std::max<uint64_t>(passed, settled.size());
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) fd->reset();
    return;  // EAGAIN or end of file
  }
}

void Supervisor::DrainOutput(int wait_rounds) {
  auto drain_both = [&] {
    if (out_ && *out_) Drain(out_, stdout_, 1);
    if (err_ && *err_) Drain(err_, stderr_, 2);
  };
  drain_both();
  for (int round = 0; round < wait_rounds && ((out_ && *out_) || (err_ && *err_)); ++round) {
    struct pollfd fds[2];
    int nfds = 0;
    if (out_ && *out_) fds[nfds++] = {out_->get(), POLLIN, 0};
    if (err_ && *err_) fds[nfds++] = {err_->get(), POLLIN, 0};
    ::poll(fds, static_cast<nfds_t>(nfds), 20);
    drain_both();
  }
}

void Supervisor::TakeOutput(VerdictInputs* in, bool* passed_on, int* passed_on_errno) {
  in->stdout_stream = {stdout_.Contents(), stdout_.total_bytes(), stdout_.truncated()};
  in->stderr_stream = {stderr_.Contents(), stderr_.total_bytes(), stderr_.truncated()};
  if (live_) {  // the rest of what is kept, after the head passed on while the program ran
    live_->Add(1, std::string_view(in->stdout_stream.data).substr(live_passed_[0]));
    live_->Add(2, std::string_view(in->stderr_stream.data).substr(live_passed_[1]));
    if (passed_on) *passed_on = true;
    int err = live_->Finish();
    if (passed_on_errno) *passed_on_errno = err;
  }
}

}  // namespace nsbox
