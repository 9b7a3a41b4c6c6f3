// StdinFeeder: copies --stdin's source into the payload's stdin pipe, inside a supervising poll loop.
#include "sandbox/stdin_feeder.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace nsbox {
namespace {

constexpr size_t kChunk = 64 << 10;

// write(2) to a pipe whose reader is gone raises SIGPIPE, which would end nsbox: blocked for this thread around the
// call, and the one this write raised taken off the pending set again.
ssize_t WriteNoSigpipe(int fd, const char* data, size_t size) {
  sigset_t pipe_only, previous;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &previous);
  const bool was_pending = ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  ssize_t n = ::write(fd, data, size);
  const int err = errno;
  if (n < 0 && err == EPIPE && !was_pending) {
    struct timespec zero = {0, 0};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  errno = err;
  return n;
}

constexpr int kStdinSeals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;

// Whether `fd` is a file nobody can change any more: a memfd with all of SealedStdin's seals.
bool IsSealedFile(int fd) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & kStdinSeals) == kStdinSeals;
}

}  // namespace

StatusOr<UniqueFd> SealedStdin(std::string_view data) {
  UniqueFd fd(::memfd_create("nsbox-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return Status::Errno("memfd_create(nsbox-stdin)");
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Errno("write(nsbox-stdin memfd)");
    done += static_cast<size_t>(n);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, kStdinSeals) != 0) return Status::Errno("fcntl(nsbox-stdin memfd, F_ADD_SEALS)");
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return Status::Errno("lseek(nsbox-stdin memfd)");
  return fd;
}

Status StdinFeeder::Start(int source, bool pass_sealed_file) {
  if (source >= 0 && pass_sealed_file && IsSealedFile(source)) {
    // A descriptor of the file itself, read from its start: nothing of the host, and nothing to copy.
    read_.reset(::fcntl(source, F_DUPFD_CLOEXEC, 3));
    if (!read_) return Status::Errno("fcntl(stdin file, F_DUPFD_CLOEXEC)");
    if (::lseek(read_.get(), 0, SEEK_SET) != 0) return Status::Errno("lseek(stdin file)");
    source_ = -1;
    source_done_ = true;
    return OkStatus();
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Errno("pipe2(stdin)");
  read_.reset(fds[0]);
  write_.reset(fds[1]);
  int flags = ::fcntl(write_.get(), F_GETFL);
  if (flags < 0 || ::fcntl(write_.get(), F_SETFL, flags | O_NONBLOCK) != 0)
    return Status::Errno("fcntl(stdin pipe, O_NONBLOCK)");
  source_ = source;
  source_done_ = source < 0;
  if (source_done_) write_.reset();
  return OkStatus();
}

int StdinFeeder::AddPollFds(struct pollfd* fds) {
  source_index_ = write_index_ = -1;
  if (!write_) return 0;
  int n = 0;
  if (pending_offset_ < pending_.size()) {
    write_index_ = n;
    fds[n++] = {write_.get(), POLLOUT, 0};
  } else if (!source_done_) {
    source_index_ = n;
    fds[n++] = {source_, POLLIN, 0};
  }
  return n;
}

void StdinFeeder::OnPoll(const struct pollfd* fds) {
  if (!write_) return;
  if (write_index_ >= 0 && fds[write_index_].revents) WriteSome();
  if (source_index_ >= 0 && fds[source_index_].revents) {
    ReadSome();
    WriteSome();  // most often the pipe has room: no extra round through poll
  }
  if (write_ && source_done_ && pending_offset_ >= pending_.size()) write_.reset();  // end of file for the program
}

void StdinFeeder::ReadSome() {
  pending_.resize(kChunk);
  pending_offset_ = 0;
  ssize_t n;
  do n = ::read(source_, pending_.data(), kChunk); while (n < 0 && errno == EINTR);
  if (n > 0) {
    pending_.resize(static_cast<size_t>(n));
    return;
  }
  pending_.clear();
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // a non-blocking source with nothing yet
  source_done_ = true;  // end of file, or an error reading it: the program sees end of file either way
}

void StdinFeeder::WriteSome() {
  while (write_ && pending_offset_ < pending_.size()) {
    ssize_t n = WriteNoSigpipe(write_.get(), pending_.data() + pending_offset_, pending_.size() - pending_offset_);
    if (n > 0) {
      pending_offset_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // full: wait for POLLOUT
    Stop();  // EPIPE: no reader is left
  }
}

void StdinFeeder::Stop() {
  write_.reset();
  source_done_ = true;
  pending_.clear();
  pending_offset_ = 0;
}

}  // namespace nsbox
