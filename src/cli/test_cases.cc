// Test cases for one program: parsing the cases file, the trailing-whitespace comparison, one compile and a run a case.
#include "src/cli/test_cases.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "nsbox/result.h"
#include "sandbox/base/bounded_json.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/result_json.h"
#include "sandbox/stdin_feeder.h"

namespace nsbox::cli {
namespace {

StatusOr<TestCase> ParseCaseObject(const nlohmann::json& object) {
  if (!object.is_object()) return Status::Error(fmt::format("not a JSON object but {}", object.type_name()));
  TestCase c;
  bool has_expected = false;
  for (const auto& [key, value] : object.items()) {
    if (key != "stdin" && key != "expected_stdout" && key != "name")
      return Status::Error(fmt::format("unknown field \"{}\" (fields: stdin, expected_stdout, name)", key));
    if (!value.is_string())
      return Status::Error(fmt::format("\"{}\" must be a string, not {}", key, value.type_name()));
    if (key == "stdin") c.stdin_data = value.get<std::string>();
    if (key == "name") c.name = value.get<std::string>();
    if (key == "expected_stdout") {
      c.expected_stdout = value.get<std::string>();
      has_expected = true;
    }
  }
  if (!has_expected) return Status::Error("no \"expected_stdout\"");
  return c;
}

StatusOr<TestCase> ParseCase(std::string_view text) {
  nlohmann::json object;
  try {
    object = ParseBoundedJson(text);
  } catch (const JsonRefused& e) {
    return Status::Error(e.what());
  } catch (const std::exception& e) {
    return Status::Error(fmt::format("not a JSON object: {}", JsonErrorText(e)));  // where the parse stopped, as batch
  }
  return ParseCaseObject(object);
}

// The lines of `text` without their trailing spaces, tabs and CRs, and without the blank lines at the end.
std::vector<std::string_view> JudgedLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    size_t keep = line.find_last_not_of(" \t\r");
    lines.push_back(keep == std::string_view::npos ? std::string_view() : line.substr(0, keep + 1));
    start = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

Result WithStdin(const Executor& program, const TestCase& c, const StepRunner& run_step) {
  Executor step = program;
  auto fd = SealedStdin(c.stdin_data);  // a file, as a judge gives it: seekable, with its size
  if (!fd.ok()) {
    Result failed;
    failed.status = RunStatus::kSetupError;
    failed.reason = fd.status().Wrap("the case's stdin").message();
    return failed;
  }
  step.stdin_fd = fd->get();
  // The verdict compares the whole stdout: a correct answer longer than --output-limit is kept whole (up to twice the
  // expected output and 64 KiB more, for the trailing spaces and blank lines the comparison drops).
  const uint64_t limit = std::min(
      kMaxOutputLimitBytes, std::max<uint64_t>(step.output_limit_bytes, 2 * c.expected_stdout.size() + (64 << 10)));
  step.output_limit_bytes = limit;
  Result result = run_step(std::move(step), Step::kProgram);
  if (result.stdout_truncated)
    result.reason += fmt::format(
        "; its stdout ({} bytes) was cut at the case's output limit of {} bytes, so it does "
        "not match (--output-limit, or twice expected_stdout and 64 KiB when that is more)",
        result.stdout_bytes, limit);
  return result;
}

}  // namespace

StatusOr<std::vector<TestCase>> ParseCases(std::string_view text, std::string_view source) {
  std::vector<TestCase> cases;
  uint64_t number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto parsed = ParseCase(line);
    if (!parsed.ok()) return parsed.status().Wrap(fmt::format("{} line {}", source, number));
    if (cases.size() == kMaxCases)
      return Status::Error(fmt::format("{} line {}: more than {} cases", source, number, kMaxCases));
    parsed->line = number;
    if (parsed->name.empty()) parsed->name = fmt::format("line {}", number);
    cases.push_back(std::move(*parsed));
  }
  if (cases.empty()) return Status::Error(fmt::format("{}: no cases", source));
  return cases;
}

StatusOr<std::vector<TestCase>> ParseCaseArray(const nlohmann::json& array) {
  if (!array.is_array() || array.empty())
    return Status::Error("\"cases\" must be a non-empty array of {\"stdin\", \"expected_stdout\", \"name\"} objects");
  if (array.size() > kMaxCases) return Status::Error(fmt::format("\"cases\" has more than {} cases", kMaxCases));
  std::vector<TestCase> cases;
  for (size_t i = 0; i < array.size(); ++i) {
    auto parsed = ParseCaseObject(array[i]);
    if (!parsed.ok()) return parsed.status().Wrap(fmt::format("cases[{}]", i));
    if (parsed->name.empty()) parsed->name = fmt::format("case {}", i + 1);
    cases.push_back(std::move(*parsed));
  }
  return cases;
}

bool OutputMatches(std::string_view actual, std::string_view expected) {
  return JudgedLines(actual) == JudgedLines(expected);
}

namespace {

// 80 bytes of a line from byte `from` on, quoted: quotes, backslashes, control bytes and bytes that are not UTF-8
// escaped (\n, \t, \xff), so two lines that differ look different, and the line stays one printable line.
std::string ShownLine(std::string_view line, size_t from) {
  constexpr size_t kShown = 80;
  // The window starts at a character's first byte (a continuation byte shown alone would read as not UTF-8), and
  // stops before a character it would cut.
  for (size_t back = 1; back <= 3 && back <= from && (static_cast<unsigned char>(line[from]) & 0xC0) == 0x80; ++back) {
    if (ValidUtf8Length(line, from - back) > back) {
      from -= back;
      break;
    }
  }
  std::string out = from > 0 ? "...\"" : "\"";
  size_t end = std::min(line.size(), from + kShown);
  for (size_t i = from; i < end;) {
    const auto c = static_cast<unsigned char>(line[i]);
    const size_t len = ValidUtf8Length(line, i);
    if (c >= 0x80 && len > 0) {
      if (i + len > end) {
        end = i;  // cut here, before the character
        break;
      }
      out.append(line.substr(i, len));
      i += len;
      continue;
    }
    if (c == '"' || c == '\\')
      out += fmt::format("\\{}", static_cast<char>(c));
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c < 0x20 || c >= 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
    ++i;
  }
  return out + (end < line.size() ? "\"..." : "\"");
}

}  // namespace

std::string FirstDifference(std::string_view actual, std::string_view expected) {
  const std::vector<std::string_view> got = JudgedLines(actual), want = JudgedLines(expected);
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return "";
  if (i == got.size())
    return fmt::format("wrong output: it ends before line {}, expected {}", i + 1, ShownLine(want[i], 0));
  if (i == want.size())
    return fmt::format("wrong output: line {} is {}, expected no more lines", i + 1, ShownLine(got[i], 0));
  // Where the two lines part, with a little of what came before it.
  size_t at = 0;
  while (at < got[i].size() && at < want[i].size() && got[i][at] == want[i][at]) ++at;
  const size_t from = at > 60 ? at - 20 : 0;
  return fmt::format("wrong output: line {} is {}, expected {}{}", i + 1, ShownLine(got[i], from),
                     ShownLine(want[i], from), at > 0 ? fmt::format(" (from byte {})", at + 1) : "");
}

namespace {

// Clips `result`'s output for the report once `kept` (what earlier cases kept) is past the cap; true if it did.
bool ClipForReport(Result& result, uint64_t& kept) {
  bool clipped = false;
  for (auto [data, truncated] : {std::pair{&result.stdout_data, &result.stdout_truncated},
                                 std::pair{&result.stderr_data, &result.stderr_truncated}}) {
    if (kept + data->size() > kMaxCasesReportOutputBytes && data->size() > kClippedCaseOutputBytes) {
      data->resize(kClippedCaseOutputBytes);
      data->shrink_to_fit();
      *truncated = clipped = true;
    }
    kept += data->size();
  }
  return clipped;
}

}  // namespace

CasesReport RunCases(Program program, const std::vector<TestCase>& cases, const StepRunner& run_step) {
  CasesReport report;
  nlohmann::json& out = report.json;
  out["cases"] = nlohmann::json::array();
  const bool compiled = program.compile.has_value();
  CompileOutcome compile = RunCompileStep(program, run_step);
  if (compiled) out["compile"] = compile.figures;
  // The first case is run here: a compiled program that will not start then is a compile that made no program, as
  // RunProgram says for one run, and every case is that compile error.
  const std::string made = program.run.argv.empty() ? "" : program.run.argv[0];
  std::optional<Result> first;
  if (!compile.failed && !cases.empty()) {
    first = WithStdin(program.run, cases.front(), run_step);
    if (CompiledProgramWouldNotStart(*first, made, program.build_dir)) compile.failed = MadeNoProgram(*first, made);
  }
  uint64_t passed = 0;
  uint64_t kept_output = 0;   // bytes of the cases' output the report holds
  uint64_t clipped = 0;       // cases whose output the report cut short (kMaxCasesReportOutputBytes)
  int stopped_exit_code = 0;  // a case that stopped the others: its exit code is the report's
  if (compile.failed) {
    const Result& failed = *compile.failed;
    out["status"] = RunStatusName(failed.status);
    out["reason"] = SanitizeUtf8(failed.reason);
    out["stdout"] = SanitizeUtf8(failed.stdout_data);  // the compiler's diagnostics
    out["stderr"] = SanitizeUtf8(failed.stderr_data);
    for (const TestCase& c : cases) {
      nlohmann::json shown = {{"name", c.name}, {"status", RunStatusName(failed.status)}, {"passed", false}};
      if (c.line != 0) shown["line"] = c.line;
      out["cases"].push_back(std::move(shown));
    }
    report.exit_code = failed.status == RunStatus::kCompileError ? kCompileExitCode : 125;
  } else {
    out["status"] = "ok";
    out["reason"] = "";
    for (const TestCase& c : cases) {
      Result result = &c == &cases.front() ? std::move(*first) : WithStdin(program.run, c, run_step);
      // A compiled program that no longer starts removed or changed its own file in an earlier case: the code's
      // doing, which fails each case from then on, not nsbox's setup error that would end the cases unjudged.
      if (CompiledProgramWouldNotStart(result, made, program.build_dir)) {
        result.status = RunStatus::kExit;
        result.exit_code = result.exec_errno == ENOENT ? 127 : 126;
        result.reason = fmt::format("{} could not be started ({}): an earlier case's run removed or changed it", made,
                                    ErrnoName(result.exec_errno));
        result.exec_errno = 0;
      }
      // The caller stopped the run, or the program could not be started (not found, not executable): no verdict of
      // the program, and the cases after it would end the same way.
      if (result.status == RunStatus::kKilled || result.status == RunStatus::kSetupError) {
        out["status"] = RunStatusName(result.status);
        out["reason"] = SanitizeUtf8(result.reason);
        stopped_exit_code = result.ShellExitCode();
        break;
      }
      const bool ok = result.status == RunStatus::kOk && !result.stdout_truncated &&
                      OutputMatches(result.stdout_data, c.expected_stdout);
      // Why a case that ran to its end failed: the first line that differs (judged as OutputMatches judges).
      if (!ok && result.status == RunStatus::kOk && !result.stdout_truncated)
        result.reason = FirstDifference(result.stdout_data, c.expected_stdout);
      clipped += ClipForReport(result, kept_output) ? 1 : 0;
      nlohmann::json shown = ResultToJson(result);
      shown["name"] = c.name;
      if (c.line != 0) shown["line"] = c.line;
      shown["passed"] = ok;
      out["cases"].push_back(std::move(shown));
      passed += ok ? 1 : 0;
    }
    report.exit_code = stopped_exit_code != 0 ? stopped_exit_code : passed == cases.size() ? 0 : 1;
    if (clipped > 0)
      out["note"] = fmt::format(
          "the output of {} case(s) is cut to {} bytes a stream here: the report keeps {} bytes "
          "of output in all (each verdict was made on the whole output)",
          clipped, kClippedCaseOutputBytes, kMaxCasesReportOutputBytes);
  }
  out["summary"] = {{"passed", passed}, {"failed", cases.size() - passed}, {"total", cases.size()}};
  return report;
}

std::string CasesText(const nlohmann::json& report) {
  std::string text;
  for (const auto& c : report["cases"]) {
    // The name is the cases file's: its control bytes are shown escaped, not sent to the terminal (PrintableLine).
    // A failed case says why: the first line that differs, or how it ended.
    const bool passed = c["passed"].get<bool>();
    const std::string why = passed ? "" : c.value("reason", "");
    text += fmt::format("{}: {} ({}){}\n", PrintableLine(c["name"].get<std::string>()), passed ? "passed" : "FAILED",
                        c["status"].get<std::string>(), why.empty() ? "" : ": " + PrintableLine(why));
  }
  const auto& s = report["summary"];
  text += fmt::format("{}/{} passed\n", s["passed"].get<uint64_t>(), s["total"].get<uint64_t>());
  return text;
}

}  // namespace nsbox::cli
