// Tools: the model-facing descriptions, argument checks, and the clipped text a tool call returns.
#include "src/agent/tools.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sandbox/output_buffer.h"
#include "src/cli/languages.h"

namespace nsbox::agent {

std::vector<ToolSpec> CodeTools() {
  // The languages are the table's (rootfs/languages.json); whether the chosen root has a language's toolchain is
  // said by the call's result.
  const std::vector<std::string> languages = cli::CanonicalLanguageNames();
  ToolSpec execute_code{
      kExecuteCodeTool,
      fmt::format(
          "Run a short, self-contained program in an isolated sandbox and get back its real exit code, stdout and "
          "stderr. Use it whenever an answer depends on computation, data processing, checking a fact that code "
          "can check, or testing code: do not work such things out in your head and do not guess output. "
          "Languages: {}. Compiled languages (c, cpp, go, rust, java, typescript) are compiled first: a program "
          "that does not compile ends as status compile_error with the compiler's messages in stderr; Java's class "
          "must be named Main. The sandbox has no network, a time limit and an output limit; print what you need "
          "to see. Files written under the working directory may be there in later calls of the same "
          "conversation, but do not rely on it. If the program fails, read the error, fix the code and run it "
          "again.",
          fmt::join(languages, ", ")),
      {{"type", "object"},
       {"properties",
        {{"language", {{"type", "string"}, {"enum", languages},
                       {"description", "The language of the code (interpreted, or compiled and then run)."}}},
         {"code", {{"type", "string"}, {"description", "The complete program. Print the results you need."}}}}},
       {"required", {"language", "code"}}}};
  ToolSpec run_python{
      kRunPythonTool,
      "Run a short, self-contained Python 3 script in an isolated sandbox and get back its real exit code, stdout "
      "and stderr. The quickest way to compute, verify or explore anything with Python (standard library only, "
      "no network). Always print the values you want to see; nothing is shown otherwise. If it fails, read the "
      "traceback, fix the script and run it again.",
      {{"type", "object"},
       {"properties",
        {{"code", {{"type", "string"}, {"description", "The complete Python script. Print the results."}}}}},
       {"required", {"code"}}}};
  return {execute_code, run_python};
}

std::string SystemPrompt() {
  return "You are a careful assistant that answers by running real code. You have tools that execute code in "
         "an isolated sandbox and return its actual output. Whenever a question involves computation, data, or "
         "anything code can verify, write a short self-contained program, run it with a tool first, read its "
         "output, and base your answer on that output. Never make up, predict or simulate the output of code: "
         "if you have not run it, you do not know what it prints. If the program fails or times out, read the "
         "error, fix the code and run it again. When you have the result, give a concise final answer that "
         "states it.";
}

ClipResult ClipHeadTail(std::string_view text, uint64_t budget_bytes, std::string_view stream_name) {
  if (text.size() <= budget_bytes) return {std::string(text), 0};
  uint64_t head = budget_bytes - budget_bytes / 2, tail = budget_bytes / 2;
  uint64_t cut = text.size() - head - tail;
  // Prefer to cut at line boundaries when one is near, so the model sees whole lines.
  std::string_view head_part = text.substr(0, head);
  size_t nl = head_part.rfind('\n');
  if (nl != std::string_view::npos && nl + 1 >= head / 2) head_part = head_part.substr(0, nl + 1);
  std::string_view tail_part = text.substr(text.size() - tail);
  size_t tail_nl = tail_part.find('\n');
  if (tail_nl != std::string_view::npos && tail_nl + 1 <= tail / 2 && tail_nl + 1 < tail_part.size())
    tail_part = tail_part.substr(tail_nl + 1);
  cut = text.size() - head_part.size() - tail_part.size();
  std::string out(head_part);
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += fmt::format("[... {} bytes of {} cut here: kept the first {} and the last {} of {} bytes ...]\n", cut,
                     stream_name, head_part.size(), tail_part.size(), text.size());
  out += tail_part;
  return {std::move(out), cut};
}

ClippedStreams ClipStreams(const runtime::ExecutionResult& r, uint64_t budget_bytes) {
  uint64_t out_size = r.stdout_data.size(), err_size = r.stderr_data.size();
  uint64_t out_budget = out_size, err_budget = err_size;
  if (out_size + err_size > budget_bytes) {
    uint64_t half = budget_bytes / 2;
    if (err_size <= half) out_budget = budget_bytes - err_size;
    else if (out_size <= half) err_budget = budget_bytes - out_size;
    else out_budget = budget_bytes - half, err_budget = half;
  }
  return {ClipHeadTail(r.stdout_data, out_budget, "stdout"), ClipHeadTail(r.stderr_data, err_budget, "stderr")};
}

std::string FormatToolResult(const runtime::ExecutionResult& r, uint64_t budget_bytes) {
  std::string out = fmt::format("exit_code: {}\n", r.ShellExitCode());
  if (r.status != RunStatus::kOk && r.status != RunStatus::kExit)
    out += fmt::format("status: {} ({})\n", RunStatusName(r.status), r.reason);
  const ClippedStreams clipped = ClipStreams(r, budget_bytes);
  auto section = [&](const char* name, const std::string& data, const ClipResult& clip, bool truncated,
                     uint64_t produced) {
    if (data.empty()) {
      out += fmt::format("{}: (empty)\n", name);
      return;
    }
    out += fmt::format("{}:\n{}", name, clip.text);
    if (out.back() != '\n') out += '\n';
    if (truncated)
      out += fmt::format("[the sandbox kept {} of the {} bytes the program wrote to {}]\n",
                         OutputBuffer::KeptBytes(data, produced), produced, name);
  };
  section("stdout", r.stdout_data, clipped.stdout_clip, r.stdout_truncated, r.stdout_bytes);
  section("stderr", r.stderr_data, clipped.stderr_clip, r.stderr_truncated, r.stderr_bytes);
  return SanitizeUtf8(out);
}

bool IsToolError(const runtime::ExecutionResult& r) { return r.status != RunStatus::kOk; }

StatusOr<CodeRequest> ParseCodeCall(const ToolCall& call) {
  if (!call.input_error.empty()) return Status::Error(call.input_error);
  auto string_field = [&](const char* key) -> StatusOr<std::string> {
    if (!call.input.contains(key) || !call.input[key].is_string())
      return Status::Error(fmt::format("{} needs a string \"{}\" argument", call.name, key));
    return call.input[key].get<std::string>();
  };
  CodeRequest request;
  if (call.name == kExecuteCodeTool) {
    auto language = string_field("language");
    if (!language.ok()) return language.status();
    request.language = *language;
  } else if (call.name == kRunPythonTool) {
    request.language = "python";
  } else {
    return Status::Error(fmt::format("there is no tool named \"{}\"; the tools are {} and {}", call.name,
                                     kExecuteCodeTool, kRunPythonTool));
  }
  // An argument the tool does not have is refused, naming it, as nsbox mcp does: a model that sent "timeout" must not
  // believe it applied.
  if (!call.input.is_object()) return Status::Error(fmt::format("{}'s arguments must be a JSON object", call.name));
  const std::vector<std::string> takes =
      call.name == kExecuteCodeTool ? std::vector<std::string>{"language", "code"} : std::vector<std::string>{"code"};
  for (const auto& [key, value] : call.input.items()) {
    if (std::find(takes.begin(), takes.end(), key) == takes.end())
      return Status::Error(
          fmt::format("{} has no argument \"{}\" (it takes: {})", call.name, key, fmt::join(takes, ", ")));
  }
  auto code = string_field("code");
  if (!code.ok()) return code.status();
  if (code->size() > cli::kMaxCodeBytes)
    return Status::Error(fmt::format("the code is {} bytes, more than the {} bytes (16 MiB) a call may run",
                                     code->size(), cli::kMaxCodeBytes));
  request.code = *code;
  return request;
}

}  // namespace nsbox::agent
