// `nsbox run`: one program in one fresh sandbox; output passed through, or one JSON result.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <streambuf>

#include <fmt/format.h>

#include "nsbox/sandbox.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/host_id_lease.h"
#include "sandbox/result_json.h"
#include "sandbox/session.h"
#include "src/cli/commands.h"
#include "src/cli/sandbox_options.h"
#include "src/cli/stop_signals.h"
#include "src/cli/test_cases.h"

namespace nsbox::cli {
namespace {

// A stream buffer that writes through to a descriptor in 64 KiB pieces and keeps the first write's errno: a JSON
// result is serialized straight to stdout, never whole in memory (a stream of NUL bytes grows sixfold as \u0000).
class FdStreamBuf : public std::streambuf {
 public:
  explicit FdStreamBuf(int fd) : fd_(fd) { setp(buffer_, buffer_ + sizeof buffer_); }
  int error() const { return error_; }

 protected:
  int overflow(int c) override {
    if (sync() != 0) return traits_type::eof();
    if (c != traits_type::eof()) {
      *pptr() = static_cast<char>(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override {
    if (error_ == 0) error_ = WriteAll(fd_, std::string_view(pbase(), static_cast<size_t>(pptr() - pbase())));
    setp(buffer_, buffer_ + sizeof buffer_);
    return error_ == 0 ? 0 : -1;
  }

 private:
  int fd_;
  int error_ = 0;
  char buffer_[1 << 16];
};

// One JSON object and a newline on fd; 0 or the errno of the write that failed. The result's strings are valid
// UTF-8 already (ResultToJson sanitizes them); if one were not, that is EILSEQ, not an exception.
int WriteJsonLine(int fd, const nlohmann::json& value) {
  auto out = std::make_unique<FdStreamBuf>(fd);
  std::ostream stream(out.get());
  try {
    stream << value << '\n';
  } catch (const nlohmann::json::exception&) {
    return EILSEQ;
  }
  stream.flush();
  return out->error();
}

}  // namespace

// One result as a JSON line on stdout; 0 or the errno of the write that failed.
int WriteJsonResultLine(const Result& result) { return WriteJsonLine(1, ResultToJson(result)); }

// Prints a result the way run and exec do; returns the exit code. A result that cannot be delivered (a full disk, an
// I/O error) is an nsbox failure, said on stderr: the caller must not take the program's exit code for the whole
// story when its output is lost. (A standard descriptor nsbox was started without is /dev/null: see main.cc.)
int EmitResult(const Result& result, bool json) {
  // Written with write(2), not stdio: fmt::print throws when stderr itself cannot be written.
  int err = 0;
  const char* what = "the result";
  const std::string reason = InCliTerms(result.reason);
  if (json) {
    nlohmann::json shown = ResultToJson(result);
    shown["reason"] = SanitizeUtf8(reason);
    err = WriteJsonLine(1, shown);
    // nsbox's own failure is said on stderr as well, as without --json and as a bad option is (docs/cli.md's 125).
    if (err == 0 && result.status == RunStatus::kSetupError)
      (void)WriteAll(2, fmt::format("nsbox: {}: {}\n", RunStatusName(result.status), PrintableLine(reason)));
  } else {
    what = "the program's output";
    if (result.output_passed_on) {
      err = result.output_write_errno;  // written while it ran
      // Given up on a reader that took nothing, after a signal asked nsbox to stop: what the signal made of the run
      // is the answer, not a failure of nsbox's.
      if (err == ECANCELED) {
        (void)WriteAll(2, "nsbox: the rest of the output was not written: stopped while its reader took nothing\n");
        err = 0;
      }
    } else {
      err = WriteAll(1, result.stdout_data);
      if (err == 0) err = WriteAll(2, result.stderr_data);
    }
    if (err == 0 && result.status != RunStatus::kOk && result.status != RunStatus::kExit)
      err = WriteAll(2, fmt::format("nsbox: {}: {}\n", RunStatusName(result.status), PrintableLine(reason)));
  }
  if (err != 0) {
    (void)WriteAll(2, fmt::format("nsbox: writing {}: {} ({})\n", what, std::strerror(err), ErrnoName(err)));
    return kExitNsboxFailure;
  }
  return result.ShellExitCode();
}

int FailBeforeRun(std::string_view verb, std::string_view engine_message, bool json, const nlohmann::json& extras) {
  // One line with its control bytes escaped: CLI11's own messages quote the value as given (--cpus $'1\e[31m').
  const std::string message = PrintableLine(InCliTerms(std::string(engine_message)));
  (void)WriteAll(2, fmt::format("nsbox{}{}: {}\n", verb.empty() ? "" : " ", verb, message));
  if (json) {
    Result result;
    result.status = RunStatus::kSetupError;  // exit_code stays -1: no program ran
    result.reason = message;
    for (const auto& [key, value] : extras.items()) SetExtra(result, key, value);
    (void)WriteJsonLine(1, ResultToJson(result));
  }
  return kExitNsboxFailure;
}

namespace {

std::string StoppedReason(int sig) {
  return fmt::format("nsbox was stopped by SIG{}: the running step was killed and no later one ran", sigabbrev_np(sig));
}

}  // namespace

bool WantsJsonResult(int argc, char** argv) {
  if (argc < 2 || (std::string_view(argv[1]) != "run" && std::string_view(argv[1]) != "exec")) return false;
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--json") return true;
  }
  return false;
}

void RegisterRun(CLI::App& app, ExitCode& exit_code) {
  auto* run = app.add_subcommand("run", "run one program in a fresh sandbox");
  static SandboxOptions sandbox_options;
  static ProgramOptions program_options;
  AddSandboxOptions(run, sandbox_options);
  AddProgramOptions(run, program_options);
  static std::string cases_file;
  run->add_option("--cases", cases_file,
                  "a JSONL file of test cases {\"stdin\", \"expected_stdout\", \"name\"}: compile once, run each "
                  "case (docs/cli.md)");
  run->callback([&exit_code] {
    auto fail = [&](const Status& status) {
      exit_code.value = FailBeforeRun("run", status.message(), program_options.json);
    };
    auto program_memory = ApplyCompileMemory(program_options, sandbox_options);
    if (!program_memory.ok()) return fail(program_memory.status());
    auto policy = BuildPolicy(sandbox_options);
    if (!policy.ok()) return fail(policy.status());
    // Run as root: a host uid of this sandbox's own for as long as nsbox runs (see sandbox/host_id_lease.h).
    auto host_ids = LeaseHostIdsIfRoot(*policy);
    if (!host_ids.ok()) return fail(host_ids.status());
    auto network = BuildNetworkSpec(sandbox_options);
    if (!network.ok()) return fail(network.status());
    std::vector<TestCase> cases;
    if (!cases_file.empty()) {
      // A bad cases file is a usage error (exit 2), found before any sandbox exists.
      auto bad = [&](const Status& status) {
        (void)FailBeforeRun("run", status.message(), program_options.json);
        exit_code.value = 2;
      };
      // Options that cannot go together are a bad command line (125), as every other.
      if (!program_options.stdin_source.empty())
        return fail(Status::Error("--cases gives each case its stdin: no --stdin"));
      if (cases_file == "-" && program_options.file_given && program_options.file == "-")
        return fail(Status::Error("--file - and --cases - both want nsbox's standard input"));
      auto text = ReadInput(cases_file, kMaxCasesFileBytes, "--cases");
      if (!text.ok()) return bad(text.status());
      auto parsed = ParseCases(*text, "--cases " + cases_file);
      if (!parsed.ok()) return bad(parsed.status());
      cases = std::move(*parsed);
    }
    // A compiled program's own limit is --memory; the sandbox's may be the compile step's larger one.
    auto program = BuildProgram(program_options, policy->rootfs_dir(),
                                *program_memory > 0 ? std::optional(*program_memory) : ProgramMemory(*policy));
    if (!program.ok()) return fail(program.status());
    std::unique_ptr<EgressProxyHooks> proxy;
    if (*network) {
      for (const auto& [key, value] : netproxy::ProxyEnvironment(netproxy::kSandboxProxyPort)) {
        program->run.env[key] = value;
        if (program->compile) program->compile->env[key] = value;
      }
      proxy = std::make_unique<EgressProxyHooks>(**network);
    }
    if (program->compile) {
      // Each step in a group with its own memory limit, the sandbox's the larger (ApplyCompileMemory).
      program->run.memory_max_bytes = *program_memory;
      if (sandbox_options.no_limits) program->compile->memory_max_bytes = 0;
    }
    if (!cases.empty()) {
      CasesReport report;
      StopSignals stop;
      Status started = RunSteps(std::move(*policy), proxy.get(), stop.fd(), [&](const StepRunner& run_step) {
        report = RunCases(std::move(*program), cases, run_step);
      });
      if (!started.ok()) return fail(started);
      if (proxy) proxy->AddToReport(report.json);
      // A signal that came after the last case stopped nothing: the report stands.
      if (int sig = stop.Received(); sig != 0 && report.json.value("status", "") == "killed") {
        report.json["reason"] = StoppedReason(sig);
        report.exit_code = 128 + sig;
      }
      int err = 0;
      if (program_options.json) {
        err = WriteJsonLine(1, report.json);
      } else {
        if (report.json["status"] != "ok")
          err = WriteAll(2,
                         fmt::format("{}{}nsbox: {}: {}\n", report.json.value("stdout", ""),
                                     report.json.value("stderr", ""), report.json["status"].get<std::string>(),
                                     report.json["reason"].get<std::string>()));
        if (err == 0) err = WriteAll(1, CasesText(report.json));
      }
      if (err != 0) {
        (void)WriteAll(2, fmt::format("nsbox: writing the report: {} ({})\n", std::strerror(err), ErrnoName(err)));
        exit_code.value = kExitNsboxFailure;
        return;
      }
      exit_code.value = report.exit_code;
      return;
    }
    if (program->compile) {
      StopSignals stop;
      // Without --json the program's output is passed on as it comes, as a plain run's is (the compiler's
      // diagnostics, of a compile that failed, are printed from the result).
      // A reader that takes nothing is given up on once a stop signal is pending (StopSignals holds it blocked).
      std::optional<LiveOutput> live;
      if (!program_options.json) live.emplace(1, 2, [] { return StopSignals::Pending(); });
      Result result =
          RunCompiledProgram(std::move(*program), std::move(*policy), proxy.get(), stop.fd(), live ? &*live : nullptr);
      if (int sig = stop.Received(); sig != 0 && result.status == RunStatus::kKilled) {
        result.signal = sig;  // the exit code is 128 + the signal, as for a plain run's program killed by it
        result.reason = StoppedReason(sig);
      }
      exit_code.value = EmitResult(result, program_options.json);
      return;
    }
    Sandbox sandbox(std::move(program->run), std::move(*policy));
    sandbox.ForwardSignals(true);
    if (!program_options.json) sandbox.PassOutputOn(1, 2);
    if (proxy) sandbox.SetHooks(proxy.get());
    Result result = sandbox.Run();
    exit_code.value = EmitResult(result, program_options.json);
  });
}

}  // namespace nsbox::cli
