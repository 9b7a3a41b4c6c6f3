// `nsbox batch JOBS.jsonl`: every job in a sandbox of its own, as many at once as the node's budget allows.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "nsbox/sandbox.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/host_id_lease.h"
#include "sandbox/result_json.h"
#include "sandbox/spec/units.h"
#include "sandbox/stdin_feeder.h"
#include "src/cli/batch_job.h"
#include "src/cli/batch_lines.h"
#include "src/cli/commands.h"
#include "src/cli/network.h"
#include "src/cli/parse_error.h"
#include "src/cli/sandbox_options.h"

namespace nsbox::cli {
namespace batch_internal {

// One job in flight: what it needs alive while it runs, and where its result lands.
struct Running {
  BatchJob job;
  std::unique_ptr<Sandbox> sandbox;  // a job of one step; else a compiled language's, or a job with cases:
  std::optional<Program> program;    // its compile step and program, run in a sandbox of their own (RunSteps)
  std::optional<Policy> policy;
  UniqueFd cancel;  // an eventfd: written to stop the job's running step
  HostIdLease lease;
  UniqueFd stdin_fd;
  std::unique_ptr<EgressProxyHooks> proxy;
  std::thread thread;
  Result result;                      // the job's result, unless it has cases:
  std::optional<CasesReport> report;  // the cases' report (nsbox run --cases --json's object)

  // What its result line holds: the report, or the result as nsbox run --json shows it.
  nlohmann::json Shown() const;
};

struct Options {
  std::string jobs_file;
  std::string output_file;
  uint64_t jobs = 0;  // 0: the node's budget decides
  SandboxOptions sandbox;
  ProgramOptions program;
};

std::string ResultLine(const BatchJob& job, nlohmann::json shown) {
  nlohmann::json line = {{"id", job.id}, {"line", job.line}, {"result", std::move(shown)}};
  if (job.duplicate_of != 0) line["duplicate_of"] = job.duplicate_of;
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json ShownResult(const Result& result) {
  nlohmann::json shown = ResultToJson(result);
  shown["reason"] = SanitizeUtf8(InCliTerms(result.reason));
  return shown;
}

nlohmann::json Running::Shown() const { return report ? report->json : ShownResult(result); }

Result SetupError(const Status& status) {
  Result result;
  result.status = RunStatus::kSetupError;
  result.reason = status.message();
  return result;
}

// The policy and program of one job, built in the main thread (BuildProgram reads the umask by setting it).
Status Prepare(Running& run) {
  auto policy = BuildPolicy(run.job.sandbox);
  if (!policy.ok()) return policy.status();
  auto lease = LeaseHostIdsIfRoot(*policy);
  if (!lease.ok()) return lease.status();
  run.lease = std::move(*lease);
  auto network = BuildNetworkSpec(run.job.sandbox);
  if (!network.ok()) return network.status();
  // A compiled program's own limit is --memory; the sandbox's may be the compile step's larger one.
  auto program = BuildProgram(run.job.program, policy->rootfs_dir(),
                              run.job.program_memory_bytes > 0 ? std::optional(run.job.program_memory_bytes)
                                                               : ProgramMemory(*policy));
  if (!program.ok()) return program.status();
  run.job.program.code.clear();  // the program has it now
  Executor* executor = &program->run;
  if (run.job.stdin_data) {
    auto sealed = SealedStdin(*run.job.stdin_data);  // a file, as a judge gives it: seekable, with its size
    if (!sealed.ok()) return sealed.status();
    run.stdin_fd = std::move(*sealed);
    run.job.stdin_data.reset();
    executor->stdin_fd = run.stdin_fd.get();
  }
  if (*network) {
    for (const auto& [key, value] : netproxy::ProxyEnvironment(netproxy::kSandboxProxyPort)) {
      executor->env[key] = value;
      if (program->compile) program->compile->env[key] = value;
    }
    run.proxy = std::make_unique<EgressProxyHooks>(**network);
  }
  if (program->compile || !run.job.cases.empty()) {
    if (program->compile) {
      // Each step in a group with its own memory limit, the sandbox's the larger (ApplyCompileMemory).
      program->run.memory_max_bytes = run.job.program_memory_bytes;
      if (run.job.sandbox.no_limits) program->compile->memory_max_bytes = 0;
    }
    run.cancel.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!run.cancel) return Status::Errno("eventfd(cancel)");
    run.program = std::move(*program);
    run.policy = std::move(*policy);
    return OkStatus();
  }
  run.sandbox = std::make_unique<Sandbox>(std::move(*executor), std::move(*policy));
  if (run.proxy) run.sandbox->SetHooks(run.proxy.get());
  return OkStatus();
}

class Batch {
 public:
  explicit Batch(Options& options) : o_(options) {}
  int Run();

 private:
  bool Fits(const JobCost& cost) const;
  void Start(BatchJob job);
  Status Emit(const BatchJob& job, const nlohmann::json& shown);
  void Collect();
  void Progress(bool final);
  void StopAll();

  Options& o_;
  NodeBudget budget_;
  JobCost used_;
  std::map<Running*, std::unique_ptr<Running>> running_;
  std::mutex mutex_;
  std::vector<Running*> finished_;  // under mutex_
  UniqueFd done_event_;
  int out_fd_ = 1;
  bool stopping_ = false;
  Status write_error_;
  uint64_t total_ = 0, written_ = 0, skipped_ = 0, not_run_ = 0;
  uint64_t cases_passed_ = 0, cases_failed_ = 0;  // over the jobs with cases (each counts as one "ok" result)
  std::map<std::string, uint64_t> by_status_;
  bool tty_ = false;
  std::chrono::steady_clock::time_point started_, last_progress_;
};

bool Batch::Fits(const JobCost& cost) const {
  if (running_.empty()) return true;  // a job larger than the whole budget still runs, alone
  if (running_.size() >= budget_.max_jobs) return false;
  if (o_.jobs > 0) return true;
  return used_.cpus + cost.cpus <= budget_.cpus + 1e-9 &&
         used_.memory_bytes + cost.memory_bytes <= budget_.memory_bytes && used_.pids + cost.pids <= budget_.pids;
}

Status Batch::Emit(const BatchJob& job, const nlohmann::json& shown) {
  if (int err = WriteAll(out_fd_, ResultLine(job, shown)); err != 0)
    return Status::Errno(fmt::format("writing the result of job on line {} to {}", job.line,
                                     o_.output_file.empty() ? "stdout" : o_.output_file),
                         err);
  ++written_;
  ++by_status_[shown.value("status", "")];
  if (auto summary = shown.find("summary"); summary != shown.end() && summary->is_object()) {  // a job with cases
    cases_passed_ += summary->value("passed", uint64_t{0});
    cases_failed_ += summary->value("failed", uint64_t{0});
  }
  return OkStatus();
}

void Batch::Start(BatchJob job) {
  auto run = std::make_unique<Running>();
  run->job = std::move(job);
  if (Status prepared = Prepare(*run); !prepared.ok()) {
    Status emitted =
        Emit(run->job, ShownResult(SetupError(prepared.Wrap(fmt::format("job on line {}", run->job.line)))));
    if (!emitted.ok()) write_error_ = emitted;
    return;
  }
  used_.cpus += run->job.cost.cpus;
  used_.memory_bytes += run->job.cost.memory_bytes;
  used_.pids += run->job.cost.pids;
  Running* raw = run.get();
  running_[raw] = std::move(run);
  // The thread that clones must live as long as the sandbox: its pid 1 has PR_SET_PDEATHSIG, which the kernel fires
  // when the creating thread ends. Run() returns only after the sandbox is gone.
  raw->thread = std::thread([this, raw] {
    if (raw->sandbox) {
      raw->result = raw->sandbox->Run();
    } else if (raw->job.cases.empty()) {
      raw->result =
          RunCompiledProgram(std::move(*raw->program), std::move(*raw->policy), raw->proxy.get(), raw->cancel.get());
    } else {
      Status started =
          RunSteps(std::move(*raw->policy), raw->proxy.get(), raw->cancel.get(), [raw](const StepRunner& run_step) {
            raw->report = RunCases(std::move(*raw->program), raw->job.cases, run_step);
          });
      if (!started.ok()) raw->result = SetupError(started);
      else if (raw->proxy && raw->report) raw->proxy->AddToReport(raw->report->json);
    }
    std::lock_guard lock(mutex_);
    finished_.push_back(raw);
    uint64_t one = 1;
    (void)!::write(done_event_.get(), &one, sizeof one);
  });
}

void Batch::Collect() {
  std::vector<Running*> finished;
  {
    std::lock_guard lock(mutex_);
    finished.swap(finished_);
  }
  for (Running* raw : finished) {
    raw->thread.join();
    std::unique_ptr<Running> run = std::move(running_[raw]);
    running_.erase(raw);
    used_.cpus -= run->job.cost.cpus;
    used_.memory_bytes -= run->job.cost.memory_bytes;
    used_.pids -= run->job.cost.pids;
    // A job cancelled by a signal to the batch has no result: it is run again on resume.
    nlohmann::json shown = run->Shown();
    if (stopping_ && shown.value("status", "") == RunStatusName(RunStatus::kKilled)) {
      ++not_run_;
      continue;
    }
    if (write_error_.ok()) {
      Status emitted = Emit(run->job, shown);
      if (!emitted.ok()) write_error_ = emitted;
    }
  }
}

void Batch::StopAll() {
  if (stopping_) return;
  stopping_ = true;
  for (auto& [raw, run] : running_) {
    if (run->sandbox) {
      run->sandbox->Kill();
    } else {
      uint64_t one = 1;
      (void)!::write(run->cancel.get(), &one, sizeof one);
    }
  }
}

void Batch::Progress(bool final) {
  if (!tty_) return;
  auto now = std::chrono::steady_clock::now();
  if (!final && now - last_progress_ < std::chrono::milliseconds(250)) return;
  last_progress_ = now;
  double seconds = std::chrono::duration<double>(now - started_).count();
  std::string line = fmt::format("\rnsbox batch: {}/{} done, {} skipped, {} running, {:.1f} jobs/s, {:.0f}s\033[K",
                                 written_, total_ ? fmt::format("{}", total_) : std::string("?"), skipped_,
                                 running_.size(), seconds > 0 ? static_cast<double>(written_) / seconds : 0.0, seconds);
  if (final) line += "\r\033[K";
  (void)WriteAll(2, line);
}

int Batch::Run() {
  auto fail = [](const Status& status) {
    (void)WriteAll(2, fmt::format("nsbox batch: {}\n", InCliTerms(status.message())));
    return kExitNsboxFailure;
  };
  // Each job holds a few descriptors in nsbox: the soft limit goes up to the hard one.
  struct rlimit nofile {};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  budget_ = ComputeNodeBudget(BudgetRoots{});
  // --jobs replaces what the jobs cost, not the descriptors: past those, jobs would fail with EMFILE, and a resume
  // would take those failures as their results.
  std::string jobs_note;
  if (o_.jobs > 0) {
    if (static_cast<uint64_t>(o_.jobs) > budget_.max_jobs)
      jobs_note = fmt::format(" (lowered to {}: RLIMIT_NOFILE)", budget_.max_jobs);
    budget_.max_jobs = std::min<uint64_t>(budget_.max_jobs, o_.jobs);
  }
  if (::getenv("NSBOX_BATCH_EXPLAIN") != nullptr)
    (void)WriteAll(2, fmt::format("nsbox batch: budget: {}\n",
                                  o_.jobs > 0 ? fmt::format("--jobs {}{}", o_.jobs, jobs_note) : budget_.explanation));
  // Check the batch-wide options once, before any job: a bad --memory is the batch's error, not every job's.
  if (auto policy = BuildPolicy(o_.sandbox); !policy.ok()) return fail(policy.status());
  if (auto network = BuildNetworkSpec(o_.sandbox); !network.ok()) return fail(network.status());
  if (auto timeout = ParseDuration(o_.program.timeout); !timeout.ok()) return fail(timeout.status().Wrap("--timeout"));
  if (auto limit = ParseSize(o_.program.output_limit); !limit.ok()) return fail(limit.status().Wrap("--output-limit"));
  if (Status compile = CheckCompileOptions(o_.program, o_.sandbox); !compile.ok()) return fail(compile);

  // O_NONBLOCK: a FIFO with no writer yet would block open() itself, out of reach of the stop signals. It is this
  // open's own flag (stdin's, shared with the caller, is left alone): reads are only made when poll says readable.
  UniqueFd jobs_fd(o_.jobs_file == "-" ? ::dup(0)
                                       : ::open(o_.jobs_file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!jobs_fd) return fail(Status::Errno(fmt::format("open({})", o_.jobs_file)));
  if (struct stat st{}; ::fstat(jobs_fd.get(), &st) == 0 && S_ISDIR(st.st_mode))
    return fail(Status::Error(fmt::format("{} is a directory", o_.jobs_file)));
  std::set<std::string> done;
  UniqueFd out;
  if (!o_.output_file.empty()) {
    // O_NONBLOCK: a FIFO without a reader fails at once rather than blocking here (and is refused below anyway).
    out.reset(::open(o_.output_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644));
    if (!out) return fail(Status::Errno(fmt::format("--output: open({})", o_.output_file)));
    if (struct stat st{}; ::fstat(out.get(), &st) != 0 || !S_ISREG(st.st_mode))
      return fail(Status::Error(fmt::format("--output {}: not a regular file", o_.output_file)));
    // Two batches on one FILE would each run every job the other has not written yet (a requeued Slurm task
    // beside the old one): the second is refused. The lock goes with nsbox's descriptor, even when it is killed.
    if (::flock(out.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK)
        return fail(Status::Error(fmt::format("--output {}: another nsbox batch is writing to it", o_.output_file)));
      // A file system without locks (NFS without its lock daemon, Lustre without -o flock): said, and carried on.
      if (errno != ENOLCK && errno != ENOSYS && errno != EOPNOTSUPP)
        return fail(Status::Errno(fmt::format("--output: flock({})", o_.output_file)));
      (void)WriteAll(2, fmt::format("nsbox batch: --output {}: its file system takes no lock ({}); a second batch on "
                                    "it would not be refused\n", o_.output_file, ErrnoName(errno)));
    }
    auto read = ReadDone(o_.output_file);
    if (!read.ok()) return fail(read.status());
    done = std::move(*read);
    out_fd_ = out.get();
  }
  total_ = CountJobs(o_.jobs_file);
  tty_ = ::isatty(2) == 1;

  // SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the batch: blocked here, before any thread, so every thread has them
  // blocked and the signalfd alone receives them. Sandboxed programs start with no signal blocked (child.cc).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&stop_signals, sig);
  sigset_t previous;
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  UniqueFd signal_fd(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));
  done_event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!signal_fd || !done_event_) return fail(Status::Errno("signalfd/eventfd"));

  started_ = last_progress_ = std::chrono::steady_clock::now();
  LineReader reader(jobs_fd.get());
  std::optional<BatchJob> next;
  std::set<std::string> seen;  // keys of this file, for duplicates
  std::map<std::string, uint64_t> first_line;
  uint64_t line_number = 0;
  bool eof = false;
  int stop_signal = 0;
  Status read_error;
  while (true) {
    // Start what fits. Bad lines and jobs done already cost nothing and are answered at once. JOBS is read only as far
    // as it has whole lines: the rest waits for the poll below, with the signals and the jobs' ends (a pipe or FIFO
    // whose writer is slow must not hold up a stop or the results).
    bool want_input = false;
    while (!stopping_ && write_error_.ok() && !eof) {
      if (!next) {
        std::string text;
        bool too_long = false;
        auto more = reader.Next(text, too_long, /*read_more=*/false);
        if (!more.ok()) {
          read_error = more.status().Wrap(o_.jobs_file);
          StopAll();
          break;
        }
        if (*more == LineReader::kMore) {
          want_input = true;
          break;
        }
        if (*more == LineReader::kEnd) {
          eof = true;
          break;
        }
        ++line_number;
        if (!too_long && Blank(text)) continue;
        BatchJob job;
        if (too_long) {
          job.line = line_number;
          job.key = fmt::format("line:{}", line_number);
          job.error = Status::Error(fmt::format("job on line {}: longer than {} bytes", line_number, kMaxJobLineBytes));
        } else {
          job = ParseJobLine(text, line_number, o_.sandbox, o_.program);
        }
        // An id is taken by the first line that names it, a bad one too. A later line of that id is refused, and
        // its result is keyed by its line ("duplicate_of"): keyed by the id, a resume would take the first line's job
        // as done when only the duplicate's refusal had been written.
        if (!seen.insert(job.key).second) {
          job.error = Status::Error(fmt::format("job on line {}: id {} is the id of the job on line {} already",
                                                line_number, job.key, first_line[job.key]));
          job.duplicate_of = first_line[job.key];
          job.key = fmt::format("line:{}", line_number);
        } else {
          first_line.emplace(job.key, line_number);
        }
        if (done.count(job.key) != 0) {
          ++skipped_;
          continue;
        }
        if (!job.error.ok()) {
          if (Status emitted = Emit(job, ShownResult(SetupError(job.error))); !emitted.ok()) write_error_ = emitted;
          continue;
        }
        next = std::move(job);
      }
      if (!Fits(next->cost)) break;
      Start(std::move(*next));
      next.reset();
    }
    if (!write_error_.ok()) StopAll();
    if (running_.empty() && (eof || stopping_ || !write_error_.ok())) break;
    Progress(false);
    struct pollfd fds[3] = {{signal_fd.get(), POLLIN, 0},
                            {done_event_.get(), POLLIN, 0},
                            {want_input ? jobs_fd.get() : -1, POLLIN, 0}};
    int ready = ::poll(fds, 3, tty_ ? 250 : -1);
    if (ready < 0 && errno != EINTR) {
      read_error = Status::Errno("poll");
      StopAll();
    }
    if (fds[0].revents & POLLIN) {
      struct signalfd_siginfo info {};
      while (::read(signal_fd.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info))
        if (stop_signal == 0) stop_signal = static_cast<int>(info.ssi_signo);
      StopAll();
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count = 0;
      (void)!::read(done_event_.get(), &count, sizeof count);
    }
    if (fds[2].revents != 0 && !stopping_) {  // readable, or its writer gone (end of input, or an error to read)
      if (Status filled = reader.Fill(); !filled.ok()) {
        read_error = filled.Wrap(o_.jobs_file);
        StopAll();
      }
    }
    Collect();
  }
  Progress(true);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  std::string counts;
  for (const auto& [status, count] : by_status_)
    counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", count, status);
  std::string summary =
      fmt::format("nsbox batch: {} results written{}{}{}", written_, counts.empty() ? "" : " (" + counts + ")",
                  skipped_ ? fmt::format(", {} skipped (in {} already)", skipped_, o_.output_file) : "",
                  cases_passed_ + cases_failed_ > 0
                      ? fmt::format("; their cases: {} passed, {} failed", cases_passed_, cases_failed_)
                      : "");
  if (!write_error_.ok()) return fail(write_error_);
  if (!read_error.ok()) return fail(read_error);
  if (stop_signal != 0) {
    (void)WriteAll(
        2, fmt::format("{}; stopped by {}: {} running jobs cancelled, the rest not started (run the same "
                       "command{} to resume)\n",
                       summary, strsignal(stop_signal), not_run_, o_.output_file.empty() ? " with --output FILE" : ""));
    return 128 + stop_signal;
  }
  (void)WriteAll(2, summary + "\n");
  return 0;
}

}  // namespace batch_internal

void RegisterBatch(CLI::App& app, ExitCode& exit_code) {
  auto* batch = app.add_subcommand("batch", "run every job of a JSONL file, each in a fresh sandbox, many at once");
  static batch_internal::Options options;
  batch->add_option("jobs", options.jobs_file, "JSONL file of jobs, one per line, or - for stdin (docs/batch.md)")
      ->required();
  batch->add_option("--output", options.output_file,
                    "append results to FILE instead of stdout; jobs whose results FILE holds already are skipped");
  batch->add_option("--jobs", options.jobs, "run at most N jobs at once, whatever the node's budget (default: budget)")
      ->check(DecimalIn("a number of jobs", 1, 4096));
  AddSandboxOptions(batch, options.sandbox);
  batch->add_option("--timeout", options.program.timeout, "each job's wall-clock limit unless it gives \"timeout\"")
      ->capture_default_str();
  batch
      ->add_option("--output-limit", options.program.output_limit,
                   "bytes kept per stream of each job unless it gives limits.output_limit")
      ->capture_default_str();
  batch->add_option("--compile-timeout", options.program.compile_timeout,
                    "a compiled language's compile step, unless the job gives \"compile_timeout\" (default: the "
                    "language's)");
  batch->add_option("--compile-memory", options.program.compile_memory,
                    "a compiled language's compile step's memory limit, unless the job gives \"compile_memory\" "
                    "(default: the language's, 1G for the shipped compilers)");
  batch->callback([&exit_code] { exit_code.value = batch_internal::Batch(options).Run(); });
}

}  // namespace nsbox::cli
