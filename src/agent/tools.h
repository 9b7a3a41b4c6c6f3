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

// stdout and stderr clipped head and tail to share budget_bytes: a stream smaller than half keeps all of it and the
// other gets the rest. The text a model sees and the structured result MCP sends are both made from these.
struct ClippedStreams {
  ClipResult stdout_clip, stderr_clip;
};
ClippedStreams ClipStreams(const runtime::ExecutionResult& result, uint64_t budget_bytes);

// "exit_code: N", a status line when the program did not simply exit, then stdout and stderr,
// together clipped to budget_bytes (ClipStreams). Always valid UTF-8.
std::string FormatToolResult(const runtime::ExecutionResult& result, uint64_t budget_bytes);

// The one rule for a tool result's error flag (Anthropic's is_error, MCP's isError): the code did not end with exit
// code 0 (it exited non-zero, timed out, was killed, or could not be set up). The model reads the flag as "this
// did not work"; the text says how.
bool IsToolError(const runtime::ExecutionResult& result);

struct CodeRequest {
  std::string language;
  std::string code;
};
// Reads a tool call's arguments; an unknown tool or missing field is an error addressed to the model.
StatusOr<CodeRequest> ParseCodeCall(const ToolCall& call);

}  // namespace nsbox::agent
