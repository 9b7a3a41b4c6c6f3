// One tools/call apart from the protocol: its arguments checked and made into a run, and the run's Result made into
// the tool result the model reads (the text, and structuredContent clipped alike).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/result.h"
#include "src/mcp/server.h"
#include "src/runtime/sandbox_runtime.h"

namespace nsbox::mcp {

// MCP content of one text block.
nlohmann::json TextContent(const std::string& text);
// A tool result with isError, which the model reads: its own bad arguments, or a sandbox that could not run.
nlohmann::json ToolErrorResult(const std::string& text);

// What one tools/call runs.
struct ToolRun {
  std::string language;
  std::string code;
  runtime::ExecuteOptions exec;    // the operator's limits, and the model's time-out within them (no cancel flag)
  bool code_tool = false;          // execute_code, run_python or python_repl, not a file tool
  std::vector<std::string> notes;  // said to the model before the result
};

// Checks a tools/call's arguments and makes its run. Throws ToolArgumentError for arguments the model has to fix,
// std::out_of_range for a tool there is not.
ToolRun ParseToolCall(const std::string& name, const nlohmann::json& args, const ServerOptions& options);

// The tool result of a run that ended: the run's notes and the result's own, the output as text, and
// structuredContent. A REPL cell's value is appended to the result's stdout.
nlohmann::json ToolCallResult(Result& result, const ToolRun& run, size_t result_budget_bytes);

}  // namespace nsbox::mcp
