// One tools/call apart from the protocol: its arguments checked and made into a run (ParseToolCall), and the run's
// Result made into the tool result the model reads (ToolCallResult).
#include "src/mcp/tool_call.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/agent/tools.h"
#include "src/cli/languages.h"
#include "src/mcp/tools.h"

namespace nsbox::mcp {
namespace {

using json = nlohmann::json;

}  // namespace

json TextContent(const std::string& text) { return json::array({{{"type", "text"}, {"text", text}}}); }

json ToolErrorResult(const std::string& text) { return json{{"content", TextContent(text)}, {"isError", true}}; }

ToolRun ParseToolCall(const std::string& name, const json& args, const ServerOptions& options) {
  // Bad arguments are the model's to fix: each message says what to send instead.
  auto bad = [&name](const std::string& what) {
    return ToolArgumentError(fmt::format("invalid arguments for {}: {}", name, what));
  };
  // An argument the tool does not have is refused, naming it: a misspelt "timeout" must not run with the default.
  for (const auto& tool : ToolList({})) {
    if (tool["name"] != name) continue;
    const json& known = tool["inputSchema"]["properties"];
    for (const auto& [key, value] : args.items()) {
      if (known.contains(key)) continue;
      std::vector<std::string> takes;
      for (const auto& [k, v] : known.items()) takes.push_back(k);
      throw bad(fmt::format("unknown argument '{}' (it takes: {})", key, fmt::join(takes, ", ")));
    }
  }
  auto get_string = [&](const char* key, std::string& out) -> bool {
    if (!args.contains(key) || !args[key].is_string()) return false;
    out = args[key].get<std::string>();
    return true;
  };
  std::string language, code;
  runtime::ExecuteOptions exec;
  exec.timeout = options.default_timeout;
  exec.compile_timeout_cap = options.max_timeout;  // "the most time any tool call gets": its compile step's too
  exec.output_limit_bytes = options.output_limit_bytes;
  std::vector<std::string> notes;  // said to the model before the result

  const bool code_tool = name == agent::kExecuteCodeTool || name == agent::kRunPythonTool || name == kPythonReplTool;
  if (code_tool) {
    if (name == agent::kExecuteCodeTool) {
      if (!get_string("language", language))
        throw bad(
            fmt::format("'language' must be a string, one of {}", fmt::join(cli::CanonicalLanguageNames(), ", ")));
      if (auto found = cli::LookupLanguage(language); !found.ok()) throw bad(found.status().message());
    } else {
      language = "python";
    }
    if (!get_string("code", code)) throw bad("'code' must be a string holding the whole program");
    if (code.size() > cli::kMaxCodeBytes)
      throw bad(
          fmt::format("'code' is {} bytes, more than the {} a program may have: write large data to a "
                      "file with write_file, or generate it in the code",
                      code.size(), cli::kMaxCodeBytes));
    exec.repl = name == kPythonReplTool;
    if (args.contains("timeout_seconds")) {
      const json& seconds = args["timeout_seconds"];
      if (!seconds.is_number() || !(seconds.get<double>() > 0))
        throw bad(
            fmt::format("'timeout_seconds' must be a positive number of seconds (one over the cap, {:g}, runs for "
                        "{:g}), or left out for the default of {:g}",
                        options.max_timeout.count() / 1000.0, options.max_timeout.count() / 1000.0,
                        options.default_timeout.count() / 1000.0));
      // Clamped while still a double: 1e18 s in milliseconds overflows int64 and would wrap to a tiny time-out.
      const double asked_ms = seconds.get<double>() * 1000;
      const double cap_ms = static_cast<double>(options.max_timeout.count());
      if (asked_ms > cap_ms)
        notes.push_back(
            fmt::format("note: timeout_seconds {:g} is over the operator's cap; this run was limited to "
                        "{:g} s",
                        seconds.get<double>(), cap_ms / 1000));
      exec.timeout = std::max(std::chrono::milliseconds(static_cast<int64_t>(std::min(asked_ms, cap_ms))),
                              std::chrono::milliseconds(1));
    }
  } else if (name == "write_file" || name == "read_file" || name == "list_files") {
    std::string path, content;
    if (name != "list_files" && !get_string("path", path))
      throw bad("'path' must be a string, a path relative to /workspace");
    if (name == "list_files" && args.contains("path") && !get_string("path", path))
      throw bad("'path' must be a string, a directory relative to /workspace, or left out for all of it");
    if (name == "list_files" && path.empty()) path.assign(1, '.');
    if (Status s = CheckWorkspacePath(path); !s.ok()) throw bad(s.message());
    if (name == "write_file" && !get_string("content", content))
      throw bad("'content' must be a string, the file's full text");
    // The content goes into the sandbox base64-encoded inside a program, which may have kMaxCodeBytes.
    constexpr size_t kMaxContentBytes = cli::kMaxCodeBytes / 4 * 3 - (64 << 10);
    if (content.size() > kMaxContentBytes)
      throw bad(
          fmt::format("'content' is {} bytes, more than write_file takes ({} bytes): generate large data in "
                      "code instead",
                      content.size(), kMaxContentBytes));
    language = "python";
    // File tools run inside the sandbox too: the sandbox user, its own root, nothing of the host.
    code = FileToolCode(name, path, content);
  } else {
    throw std::out_of_range(fmt::format("unknown tool '{}'", name));
  }
  return ToolRun{std::move(language), std::move(code), std::move(exec), code_tool, std::move(notes)};
}

json ToolCallResult(Result& r, const ToolRun& run, size_t result_budget_bytes) {
  std::vector<std::string> notes = run.notes;
  const bool failed = agent::IsToolError(r);
  if (const json restarted = GetExtra(r, "session_restarted"); restarted.is_string())
    notes.push_back("note: " + restarted.get<std::string>());
  if (run.exec.repl) {
    // Shown as an interactive interpreter shows it, after the cell's own output.
    const json repl = GetExtra(r, "repl");
    if (repl.is_object() && repl.value("state_lost", false))
      notes.push_back(
          "note: the previous Python interpreter had died; this call ran in a fresh one, so variables "
          "and imports of earlier calls are gone (files in /workspace are not)");
    if (const json value = repl.is_object() ? repl.value("value", json()) : json(); value.is_string())
      r.stdout_data += value.get<std::string>() + "\n";
  }
  // The structured result carries the streams clipped exactly as the text does: a client that forwards it to the
  // model must not undo the clipping.
  json structured = ResultToJson(r);
  std::string text;
  if (!run.code_tool && !failed) {
    agent::ClipResult clip = agent::ClipHeadTail(r.stdout_data, result_budget_bytes * 2, "file");
    text = SanitizeUtf8(clip.text);
    structured["stdout"] = text;
    structured["stdout_clipped_bytes"] = clip.cut_bytes;
    structured["stderr"] = SanitizeUtf8(r.stderr_data.substr(0, result_budget_bytes));
    structured["stderr_clipped_bytes"] = r.stderr_data.size() - structured["stderr"].get<std::string>().size();
  } else {
    text = agent::FormatToolResult(r, result_budget_bytes);
    const agent::ClippedStreams clipped = agent::ClipStreams(r, result_budget_bytes);
    structured["stdout"] = SanitizeUtf8(clipped.stdout_clip.text);
    structured["stderr"] = SanitizeUtf8(clipped.stderr_clip.text);
    structured["stdout_clipped_bytes"] = clipped.stdout_clip.cut_bytes;
    structured["stderr_clipped_bytes"] = clipped.stderr_clip.cut_bytes;
  }
  std::string shown;
  for (const auto& note : notes) shown += note + "\n";
  return json{{"content", TextContent(shown + text)}, {"structuredContent", structured}, {"isError", failed}};
}

}  // namespace nsbox::mcp
