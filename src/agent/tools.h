// The code tools offered to the model (execute_code, run_python), the system prompt, and tool-result formatting with
// head-and-tail clipping.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/base/status.h"
#include "src/agent/provider.h"
#include "src/runtime/sandbox_runtime.h"

namespace nsbox::agent {

inline constexpr const char* kExecuteCodeTool = "execute_code";
inline constexpr const char* kRunPythonTool = "run_python";

std::vector<ToolSpec> CodeTools();
// Tells the model to run code rather than guess, and never to make up output.
std::string SystemPrompt();

struct ClipResult {
  std::string text;
  uint64_t cut_bytes = 0;
};
// Keeps the head and the tail of text within budget_bytes (plus a note of what was cut, naming
// the stream), so both the start of the output and the end of a traceback survive.
ClipResult ClipHeadTail(std::string_view text, uint64_t budget_bytes, std::string_view stream_name);

// "exit_code: N", a status line when the program did not simply exit, then stdout and stderr,
// together clipped to budget_bytes. Always valid UTF-8.
std::string FormatToolResult(const runtime::ExecutionResult& result, uint64_t budget_bytes);

struct CodeRequest {
  std::string language;
  std::string code;
};
// Reads a tool call's arguments; an unknown tool or missing field is an error addressed to the model.
StatusOr<CodeRequest> ParseCodeCall(const ToolCall& call);

}  // namespace nsbox::agent
