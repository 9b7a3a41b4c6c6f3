// SessionSandbox's resident process (a REPL's interpreter that lives across requests): its start, one request's turn
// on its channel, and the cell's share of its CPU time and memory peak.
#include "sandbox/session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/spec/cgroup_text.h"

namespace nsbox {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes are waiting on the socket, or its other end is gone.
bool HasBytesWaiting(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// One REPL cell's share of what its interpreter, which outlives the cell, has used: read from /proc before and after.
struct ResidentUsage {
  std::optional<int64_t> cpu_ms;       // user + system time, its own and that of the children it waited for
  std::optional<uint64_t> peak_bytes;  // VmHWM
};

ResidentUsage ReadResidentUsage(pid_t pid) {
  ResidentUsage usage;
  static const int64_t ticks_per_second = ::sysconf(_SC_CLK_TCK);
  if (auto stat = ReadFile(fmt::format("/proc/{}/stat", pid), 4096); stat.ok() && ticks_per_second > 0) {
    if (auto ticks = cgroup_internal::ParseCpuTicks(*stat))
      usage.cpu_ms = static_cast<int64_t>(*ticks) * 1000 / ticks_per_second;
  }
  if (auto status = ReadFile(fmt::format("/proc/{}/status", pid), 64 << 10); status.ok()) {
    const size_t at = status->find("\nVmHWM:");
    unsigned long long kb = 0;
    if (at != std::string::npos && std::sscanf(status->c_str() + at, "\nVmHWM: %llu kB", &kb) == 1)
      usage.peak_bytes = static_cast<uint64_t>(kb) * 1024;
  }
  return usage;
}

// Starts the process's peak resident size afresh (clear_refs 5), so that the next VmHWM is one cell's.
bool ResetResidentPeak(pid_t pid) {
  UniqueFd fd(::open(fmt::format("/proc/{}/clear_refs", pid).c_str(), O_WRONLY | O_CLOEXEC));
  return fd && ::write(fd.get(), "5", 1) == 1;
}

}  // namespace

void SessionSandbox::DropResident() {
  if (!resident_) return;
  resident_->Kill();
  if (!resident_->reaped) ::kill(resident_->pid, SIGKILL);
  if (resident_group_) {
    (void)resident_group_->KillAll();
    KeepExecGroup(std::move(resident_group_));
  }
  resident_->Reap();
  Forget(resident_->pid);
  resident_.reset();
  resident_channel_.reset();
  resident_lost_ = true;
}

ResidentTurn SessionSandbox::AskResident(const ResidentOptions& process, const std::string& request,
                                         const ResidentTurnOptions& options, int cancel_fd) {
  const auto arrived = Clock::now();
  ResidentTurn turn;
  std::shared_lock call(calls_mutex_);
  if (terminating_) {
    turn.result = SetupError("the session is ending");
    return turn;
  }
  // Requests take turns. One that waits out its whole time limit behind another does not run, and leaves the process
  // and its state alone: it never started, so it cannot have timed out in there.
  std::unique_lock lock(resident_mutex_, std::defer_lock);
  if (options.wall_timeout >= std::chrono::hours(24 * 365)) {
    lock.lock();
  } else if (!lock.try_lock_until(arrived + options.wall_timeout)) {
    VerdictInputs waited;
    waited.kind = VerdictInputs::Kind::kSessionExec;
    waited.timed_out = true;
    waited.wall_timeout = options.wall_timeout;
    turn.result = MakeVerdict(std::move(waited));
    turn.result.signal = 0;  // nothing was killed
    turn.result.reason = fmt::format(
        "the time limit of {} ms passed while an earlier request still held the "
        "process: this one did not run, and the process keeps its state",
        options.wall_timeout.count());
    turn.result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - arrived).count();
    return turn;
  }
  if (terminating_) {  // it ended while this request waited
    turn.result = SetupError("the session is ending");
    return turn;
  }
  // The time limit is the request's own, from when it has the process. The session's counters, as for an exec: what
  // the limits did while this request ran (an OOM kill of the process itself among it).
  const auto started = Clock::now();
  RequestWindow window(*this);
  const CgroupStats counters_before = cgroup_ ? cgroup_->ReadCounters() : CgroupStats{};
  // A process that died between requests (killed from an exec, say) is replaced, and the loss reported. So is one
  // whose channel holds bytes that no request asked for: its next answer could be anything.
  if (resident_) {
    struct pollfd fd = {resident_->pidfd.get(), POLLIN, 0};
    if (::poll(&fd, 1, 0) > 0) {
      DropResident();
    } else if (HasBytesWaiting(resident_channel_.get())) {
      DropResident();
      turn.restarted_out_of_step = true;
    }
  }
  if (!resident_) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      turn.result = SetupError(Status::Errno("socketpair(AF_UNIX, resident channel)").message());
      return turn;
    }
    UniqueFd ours(pair[0]), theirs(pair[1]);
    Executor ex;
    ex.argv = process.argv;
    ex.env = process.env;
    ex.umask = process.umask;
    auto group = StartExecGroup();
    if (!group.ok()) {
      turn.result = SetupError(group.status().Wrap("creating the REPL interpreter's cgroup").message());
      return turn;
    }
    CgroupSelfJoin join;
    if (*group) join = (*group)->self_join();
    auto helper = StartHelper(ex, theirs.get(), *group ? &join : nullptr, started + options.wall_timeout);
    if (!helper.ok() || (*helper)->start_timed_out) {
      KeepExecGroup(std::move(*group));
      turn.result = SetupError(helper.ok() ? std::string(kStartHeldUp)
                                           : helper.status().Wrap("starting the REPL interpreter").message());
      return turn;
    }
    resident_ = std::move(*helper);
    resident_group_ = std::move(*group);
    resident_channel_ = std::move(ours);
    turn.state_lost = resident_lost_;
    resident_lost_ = false;
  }
  turn.started = true;
  SessionHelper& h = *resident_;
  // Output of earlier requests' leftovers (background threads) is not this one's.
  h.DiscardOutput();
  h.control.ReadSetupFailure(&h.setup_failure);
  // The interpreter's figures so far, to take the cell's share from, and its peak started afresh for the cell.
  const ResidentUsage usage_before = ReadResidentUsage(h.pid);
  const bool peak_reset = ResetResidentPeak(h.pid);

  bool died = false;
  for (size_t done = 0; done < request.size();) {
    ssize_t n = ::send(resident_channel_.get(), request.data() + done, request.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      died = true;
      break;
    }
    done += static_cast<size_t>(n);
  }

  Supervisor supervisor(options.output_limit_bytes);
  supervisor.AddOutput(&h.out, &h.err);
  // A resident process outlives its requests: a thread answers its seccomp notifications between them.
  supervisor.AddSeccompListener(&h.seccomp, policy_.seccomp() ? policy_.seccomp()->notify_errno : 0, true);
  supervisor.AddSource([&] { return h.control.fd(); }, POLLIN,
                       [&](short) { h.control.ReadSetupFailure(&h.setup_failure); });
  supervisor.SetDeadline(started + options.wall_timeout, [&] { turn.timed_out = true; });
  std::string answer;
  supervisor.AddSource([&] { return resident_channel_.get(); }, POLLIN,
                       [&](short revents) {
                         if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
                         char buffer[65536];
                         ssize_t n = ::recv(resident_channel_.get(), buffer, sizeof buffer, MSG_DONTWAIT);
                         if (n > 0) {
                           answer.append(buffer, static_cast<size_t>(n));
                           std::string why;
                           const int framed = options.frame(answer, &why);
                           if (framed > 0) turn.answered = true;
                           if (framed < 0) turn.out_of_step = why.empty() ? "the channel is out of step" : why;
                         } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                           died = true;
                         }
                       });
  supervisor.AddSource([&] { return h.pidfd.get(); }, POLLIN,
                       [&](short revents) {
                         if (revents & POLLIN) died = true;
                       });
  supervisor.AddSource([&] { return cancel_fd; }, POLLIN | POLLRDHUP,
                       [&](short revents) {
                         if (revents && CancelRequested(revents)) turn.cancelled = true;
                       });
  Status polled = supervisor.Run(
      [&] { return died || turn.answered || !turn.out_of_step.empty() || turn.timed_out || turn.cancelled; });
  if (!polled.ok()) {
    turn.result = SetupError(polled.message());
    return turn;
  }
  // An interpreter whose end is first seen at or past the deadline (held up, then killed by its start's own deadline;
  // or nsbox late to look): the cell's time ran out, whatever ended the process.
  if (died && !turn.answered && !turn.cancelled && options.wall_timeout < std::chrono::hours(24 * 365) &&
      Clock::now() >= started + options.wall_timeout)
    turn.timed_out = true;
  VerdictInputs in;
  if (turn.answered) {
    turn.answer = std::move(answer);
    supervisor.DrainOutput();  // what the process printed before it answered is in the pipes by now
    supervisor.TakeOutput(&in);
    // The process lives on: the answer is the outcome, which the caller reads from it (status ok until it says).
    in.kind = VerdictInputs::Kind::kSessionExec;
    in.program_status = 0;
    const ResidentUsage usage_after = ReadResidentUsage(h.pid);
    if (usage_before.cpu_ms && usage_after.cpu_ms)
      in.cpu_ms = std::max<int64_t>(0, *usage_after.cpu_ms - *usage_before.cpu_ms);
    else
      in.measurement_errors.push_back(fmt::format("cpu_ms: /proc/{}/stat could not be read", h.pid));
    if (peak_reset && usage_after.peak_bytes)
      in.peak_memory_bytes = *usage_after.peak_bytes;
    else
      in.measurement_errors.push_back(fmt::format("peak_memory_bytes: /proc/{}/clear_refs or status", h.pid));
    AddLimits(counters_before, &in);
    in.counters_shared = window.Shared();
    turn.result = MakeVerdict(std::move(in));
  } else {
    // Timed out, cancelled, crashed or out of step: the process goes, and the next request starts a fresh one. Its
    // peak is read while it still lives; its time from its end, less what earlier requests used.
    const ResidentUsage usage_last = died ? ResidentUsage{} : ReadResidentUsage(h.pid);
    h.Kill();
    h.Reap();
    h.control.ReadSetupFailure(&h.setup_failure);
    supervisor.DrainOutput();
    supervisor.TakeOutput(&in);
    GatherVerdict(h, &counters_before, &in);
    if (in.program_status) {
      if (usage_before.cpu_ms) in.cpu_ms = std::max<int64_t>(0, in.cpu_ms - *usage_before.cpu_ms);
      if (peak_reset && usage_last.peak_bytes) in.peak_memory_bytes = *usage_last.peak_bytes;
    }
    in.timed_out = turn.timed_out;
    in.cancelled = turn.cancelled;
    in.wall_timeout = options.wall_timeout;
    in.counters_shared = window.Shared();
    if (terminating_) turn.session_ended = SessionEndedReason("cell");
    turn.result = MakeVerdict(std::move(in));
    DropResident();
  }
  turn.result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  return turn;
}

}  // namespace nsbox
