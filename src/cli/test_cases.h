// Test cases for one program (nsbox run --cases): the JSONL file of {stdin, expected_stdout} pairs, how a case's
// output is judged, and the run of every case after one compile step, each case its own verdict.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"
#include "src/cli/compiled_program.h"

namespace nsbox::cli {

inline constexpr size_t kMaxCasesFileBytes = 16 << 20;
inline constexpr size_t kMaxCases = 10000;
// The program decides how much it prints: 500 cases of 2 MiB took nsbox to 1 GB. A report keeps the cases' output up
// to kMaxCasesReportOutputBytes in all; past it, each later case keeps the first kClippedCaseOutputBytes of each
// stream (marked truncated; its verdict was made on the whole output).
inline constexpr uint64_t kMaxCasesReportOutputBytes = 32 << 20;
inline constexpr size_t kClippedCaseOutputBytes = 1024;

struct TestCase {
  uint64_t line = 0;  // the line of the cases file; 0 for a case of a batch job's "cases" array
  std::string name;   // the case's "name", else "line N" (a file) or "case N" (an array, N from 1)
  std::string stdin_data;
  std::string expected_stdout;
};

// One JSON object a line, {"stdin": "...", "expected_stdout": "...", "name": "..."} ("stdin" and "name" optional,
// nothing else); blank lines are skipped. The first bad line is the error, naming `source` and the line.
StatusOr<std::vector<TestCase>> ParseCases(std::string_view text, std::string_view source);

// The same cases as a JSON array (a batch job's "cases"): each element such an object. The first bad one is the
// error, naming it ("cases[2]: ..."); an empty array or more than kMaxCases is one too.
StatusOr<std::vector<TestCase>> ParseCaseArray(const nlohmann::json& array);

// The judge's comparison: equal once each line's trailing spaces, tabs and carriage returns are dropped and blank
// lines at the end are dropped; everything else (leading spaces, blank lines inside) counts.
bool OutputMatches(std::string_view actual, std::string_view expected);
// Why they do not match, as a case's reason: "wrong output: line 3 is "5", expected "6"" (each line JSON-quoted, cut
// at 80 bytes); empty when they match.
std::string FirstDifference(std::string_view actual, std::string_view expected);

// What RunCases gives: the report (docs/cli.md, "Test cases") and the exit code: 0 every case passed, 1 some case did
// not, kCompileExitCode (123) when the program did not compile, 125 when a step could not be started.
struct CasesReport {
  nlohmann::json json;
  int exit_code = 0;
};

// Runs program.compile (once) and then program.run once per case, each with the case's stdin and the program's own
// time-out, through run_step. A failed compile makes every case compile_error, and none runs. A case cancelled
// (kKilled: the caller stopped the run) or that could not start (kSetupError: the program not found...) ends the
// report there: its status and reason are that case's, its exit code the case's, and the cases after it do not run.
CasesReport RunCases(Program program, const std::vector<TestCase>& cases, const StepRunner& run_step);

// The report as lines for a terminal: one a case ("passed"/"FAILED", its status) and the summary.
std::string CasesText(const nlohmann::json& report);

}  // namespace nsbox::cli
