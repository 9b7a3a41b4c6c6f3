// The MCP server's tools: their list (schemas, output schema, annotations), argument checks, and the file tools' code.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"

namespace nsbox::mcp {

inline constexpr const char* kPythonReplTool = "python_repl";

// Bad arguments of a known tool: answered as a tool result with isError (the model reads it and calls again), not
// as a JSON-RPC error, which SDK clients throw and the model never sees.
class ToolArgumentError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ToolListOptions {
  double default_timeout_seconds = 30;
  double max_timeout_seconds = 600;
  bool open_world = false;  // the sandbox has a network (--network allow= or host)
};

nlohmann::json ToolList(const ToolListOptions& options);

// Workspace paths: relative, no "..", no NUL; the sandbox itself confines what the code can reach.
Status CheckWorkspacePath(const std::string& path);

// The Python program that does write_file, read_file or list_files inside the sandbox. Errors are one line on stderr
// and exit code 1.
std::string FileToolCode(const std::string& tool, const std::string& path, const std::string& content);

}  // namespace nsbox::mcp
