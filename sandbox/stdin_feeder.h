// StdinFeeder: the payload's standard input as a pipe that nsbox fills from the real source, so that the sandbox
// never holds a descriptor of a host object; or, for a sealed file of stdin bytes (SealedStdin), that file itself.
#pragma once

#include <poll.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"

namespace nsbox {

// Why a pipe and not the source itself: a descriptor of a host file names the file's host path in /proc/self/fd/0,
// and that link can be opened again, for writing too where the file's mode lets the sandbox's uid; nsbox's own stdin
// may be the user's terminal. Through the pipe the sandbox sees "pipe:[N]" and the bytes, nothing else.
//
// Used from a supervising poll loop: AddPollFds before poll(), OnPoll after. The source is read only while the pipe
// has room for what was read before (a program that never reads its stdin costs 64 KiB at most). End of file on the
// source closes the pipe, and the program sees end of file; a program that closes its stdin ends the copying.
// A program's stdin as a file rather than a pipe: the bytes in a memfd sealed against every write, growth and
// shrinking, which the feeder hands the program as it is. Seekable and with its size, as a judge's `prog < input`
// is (os.fstat(0).st_size, mmap, fseek), and naming no host path (/proc/self/fd/0 is "/memfd:nsbox-stdin").
// The bytes live in memory while the program runs: for the inputs nsbox holds anyway (a test case's, a batch
// job's, an API exec's), and a --stdin file of at most kMaxSealedStdinBytes (a larger one, or a pipe, is fed). Handed
// over as it is only to a sandbox whose processes all end with the run (StdinFeeder::Start); a session's exec gets it
// through a pipe.
StatusOr<UniqueFd> SealedStdin(std::string_view data);
inline constexpr uint64_t kMaxSealedStdinBytes = 64ull << 20;

class StdinFeeder {
 public:
  StdinFeeder() = default;
  StdinFeeder(const StdinFeeder&) = delete;
  StdinFeeder& operator=(const StdinFeeder&) = delete;

  // source: the descriptor to copy from, not owned; it must stay open while the feeder runs. With pass_sealed_file, a
  // SealedStdin file is not copied: the payload gets a descriptor of it (child_end), and the feeder has nothing to
  // do. Only where every process of the sandbox ends with the run: a process left behind holding the file would keep
  // memory (nsbox's, or its caller's) that no limit of the sandbox counts.
  Status Start(int source, bool pass_sealed_file = false);
  // The pipe's read end, for the payload's fd 0 (close-on-exec: the payload dup2s it); -1 before Start.
  int child_end() const { return read_.get(); }
  // Closes nsbox's copy of the read end once the payload's process exists.
  void ReleaseChildEnd() { read_.reset(); }
  // Adds at most two entries at fds[0..]; returns how many.
  int AddPollFds(struct pollfd* fds);
  // fds: the same array position given to AddPollFds, after poll().
  void OnPoll(const struct pollfd* fds);
  // Stops copying: the program sees end of file (or already has exited).
  void Stop();
  bool active() const { return static_cast<bool>(write_); }

 private:
  void ReadSome();
  void WriteSome();

  int source_ = -1;
  bool source_done_ = false;
  UniqueFd read_, write_;
  std::string pending_;
  size_t pending_offset_ = 0;
  int source_index_ = -1, write_index_ = -1;
};

}  // namespace nsbox
