// McpServer: initialize/version negotiation, ping, tools/list, tools/call on worker threads, batches, cancellation,
// the end of input, and JSON-RPC errors for everything malformed. stdout carries protocol messages only.
#include "nsbox_config.h"
#include "src/mcp/server.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sandbox/base/bounded_json.h"
#include "sandbox/result.h"
#include "src/agent/tools.h"
#include "src/cli/languages.h"
#include "src/mcp/tools.h"

namespace nsbox::mcp {
namespace {

using json = nlohmann::json;

constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;
constexpr int kInternalError = -32603;
// A batch's messages are answered in one array held until its last call ends: an error answer is some 500 bytes of
// memory for each byte of a "[1,1,...]" line, so a batch is kept small (batches are gone from MCP since 2025-06-18).
constexpr size_t kMaxBatchMessages = 128;
// Tool calls (or batches of them) running at once on one connection.
constexpr size_t kMaxCallsAtOnce = 16;

json TextContent(const std::string& text) { return json::array({{{"type", "text"}, {"text", text}}}); }

json ErrorResponse(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

// JSON-RPC ids are strings or integers; anything else cannot be echoed back as one.
bool IsValidId(const json& id) { return id.is_string() || id.is_number_integer(); }

}  // namespace

const std::vector<std::string>& SupportedProtocolVersions() {
  static const std::vector<std::string> versions = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05",
                                                    "2024-10-07"};
  return versions;
}

McpServer::McpServer(RuntimeFactory factory, ServerOptions options)
    : factory_(std::move(factory)), options_(options) {}

McpServer::~McpServer() {
  JoinWorkers(false);
  Shutdown();
}

void McpServer::JoinWorkers(bool finished_only) {
  std::erase_if(workers_, [finished_only](Worker& w) {
    if (finished_only && !*w.done) return false;
    if (w.thread.joinable()) w.thread.join();
    return true;
  });
}

void McpServer::Shutdown() {
  std::lock_guard lock(runtime_mutex_);
  if (runtime_) {
    runtime_->close();
    runtime_.reset();
  }
}

void McpServer::Send(const json& msg) {
  std::string line = msg.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  bool failed = false;
  {
    std::lock_guard lock(out_mutex_);
    size_t done = 0;
    while (done < line.size()) {
      ssize_t n = ::write(out_fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        failed = true;
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  // EPIPE or the like: nobody reads the answers any more, so the calls still running are stopped, not waited for.
  if (failed) CancelAll();
}

void McpServer::CancelAll() {
  std::lock_guard lock(calls_mutex_);
  output_broken_ = true;
  for (auto& [key, call] : calls_) call->cancelled = true;
}

StatusOr<runtime::SandboxRuntime*> McpServer::Runtime() {
  std::lock_guard lock(runtime_mutex_);
  if (!runtime_) {
    auto made = factory_();
    if (!made.ok()) return made.status();
    runtime_ = std::move(*made);
  }
  return runtime_.get();
}

json McpServer::CallTool(const std::string& name, const json& args, const std::atomic<bool>* cancel,
                         const json& progress_token) {
  auto tool_error = [](const std::string& text) {
    return json{{"content", TextContent(text)}, {"isError", true}};
  };
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
  exec.timeout = options_.default_timeout;
  exec.compile_timeout_cap = options_.max_timeout;  // "the most time any tool call gets": its compile step's too
  exec.output_limit_bytes = options_.output_limit_bytes;
  exec.cancel = cancel;
  std::vector<std::string> notes;  // said to the model before the result

  const bool code_tool = name == agent::kExecuteCodeTool || name == agent::kRunPythonTool || name == kPythonReplTool;
  if (code_tool) {
    if (name == agent::kExecuteCodeTool) {
      if (!get_string("language", language))
        throw bad(fmt::format("'language' must be a string, one of {}", fmt::join(cli::CanonicalLanguageNames(), ", ")));
      if (auto found = cli::LookupLanguage(language); !found.ok()) throw bad(found.status().message());
    } else {
      language = "python";
    }
    if (!get_string("code", code)) throw bad("'code' must be a string holding the whole program");
    if (code.size() > cli::kMaxCodeBytes)
      throw bad(fmt::format("'code' is {} bytes, more than the {} a program may have: write large data to a "
                            "file with write_file, or generate it in the code",
                            code.size(), cli::kMaxCodeBytes));
    exec.repl = name == kPythonReplTool;
    if (args.contains("timeout_seconds")) {
      const json& seconds = args["timeout_seconds"];
      if (!seconds.is_number() || !(seconds.get<double>() > 0))
        throw bad(
            fmt::format("'timeout_seconds' must be a positive number of seconds (one over the cap, {:g}, runs for "
                        "{:g}), or left out for the default of {:g}",
                        options_.max_timeout.count() / 1000.0, options_.max_timeout.count() / 1000.0,
                        options_.default_timeout.count() / 1000.0));
      // Clamped while still a double: 1e18 s in milliseconds overflows int64 and would wrap to a tiny time-out.
      const double asked_ms = seconds.get<double>() * 1000;
      const double cap_ms = static_cast<double>(options_.max_timeout.count());
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

  if (code_tool && !progress_token.is_null()) {
    // The output as it comes, one notification a chunk (stdout and stderr alike), before the result; progress counts
    // the chunks. None once the call is cancelled: its token is no longer an active request's.
    exec.on_output = [this, &progress_token, cancel, count = 0](int, std::string_view text) mutable {
      if (cancel && *cancel) return;
      Send({{"jsonrpc", "2.0"},
            {"method", "notifications/progress"},
            {"params", {{"progressToken", progress_token}, {"progress", ++count}, {"message", text}}}});
    };
  }
  auto rt = Runtime();
  if (!rt.ok()) return tool_error("could not start the sandbox: " + rt.status().message());
  auto result = (*rt)->execute(language, code, exec);
  if (!result.ok()) return tool_error("sandbox error: " + result.status().message());
  Result& r = *result;
  const bool failed = agent::IsToolError(r);
  if (const json restarted = GetExtra(r, "session_restarted"); restarted.is_string())
    notes.push_back("note: " + restarted.get<std::string>());
  if (exec.repl) {
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
  if (!code_tool && !failed) {
    agent::ClipResult clip = agent::ClipHeadTail(r.stdout_data, options_.result_budget_bytes * 2, "file");
    text = SanitizeUtf8(clip.text);
    structured["stdout"] = text;
    structured["stdout_clipped_bytes"] = clip.cut_bytes;
    structured["stderr"] = SanitizeUtf8(r.stderr_data.substr(0, options_.result_budget_bytes));
    structured["stderr_clipped_bytes"] = r.stderr_data.size() - structured["stderr"].get<std::string>().size();
  } else {
    text = agent::FormatToolResult(r, options_.result_budget_bytes);
    const agent::ClippedStreams clipped = agent::ClipStreams(r, options_.result_budget_bytes);
    structured["stdout"] = SanitizeUtf8(clipped.stdout_clip.text);
    structured["stderr"] = SanitizeUtf8(clipped.stderr_clip.text);
    structured["stdout_clipped_bytes"] = clipped.stdout_clip.cut_bytes;
    structured["stderr_clipped_bytes"] = clipped.stderr_clip.cut_bytes;
  }
  std::string shown;
  for (const auto& note : notes) shown += note + "\n";
  return json{{"content", TextContent(shown + text)}, {"structuredContent", structured}, {"isError", failed}};
}

std::optional<json> McpServer::HandleRequest(const json& msg, bool inline_tools, DeferredCall* defer) {
  const json& id = msg["id"];
  const std::string method = msg["method"].get<std::string>();
  const json params = msg.contains("params") ? msg["params"] : json::object();
  if (!params.is_object()) return ErrorResponse(id, kInvalidParams, "params must be an object");

  if (method == "initialize") {
    std::string requested;
    if (params.contains("protocolVersion")) {
      if (!params["protocolVersion"].is_string())
        return ErrorResponse(id, kInvalidParams, "protocolVersion must be a string");
      requested = params["protocolVersion"].get<std::string>();
    }
    const auto& versions = SupportedProtocolVersions();
    std::string chosen = versions.front();
    for (const auto& v : versions)
      if (v == requested) chosen = v;
    initialized_ = true;
    // Batches were removed in 2025-06-18 (the stdio transport carries single messages): refused from then on.
    batches_allowed_ = chosen < "2025-06-18";
    return json{{"jsonrpc", "2.0"},
                {"id", id},
                {"result",
                 {{"protocolVersion", chosen},
                  {"capabilities", {{"tools", {{"listChanged", false}}}}},
                  {"serverInfo", {{"name", "nsbox"}, {"version", NSBOX_VERSION}}},
                  {"instructions",
                   "Tools that run code in an isolated nsbox sandbox. Always run code to get real output; never "
                   "invent results. Files under /workspace persist for this connection."}}}};
  }
  if (method == "ping") return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", json::object()}};
  if (method == "tools/list") {
    const ToolListOptions list{.default_timeout_seconds = options_.default_timeout.count() / 1000.0,
                               .max_timeout_seconds = options_.max_timeout.count() / 1000.0,
                               .open_world = options_.open_world};
    return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", {{"tools", ToolList(list)}}}};
  }
  if (method != "tools/call") return ErrorResponse(id, kMethodNotFound, fmt::format("method not found: {}", method));

  if (!params.contains("name") || !params["name"].is_string())
    return ErrorResponse(id, kInvalidParams, "tools/call needs a string 'name'");
  json args = params.contains("arguments") ? params["arguments"] : json::object();
  if (!args.is_object()) return ErrorResponse(id, kInvalidParams, "'arguments' must be an object");
  std::string tool = params["name"].get<std::string>();
  json progress_token;  // a string or an integer (MCP's progress utility); anything else asks for no progress
  if (params.contains("_meta") && params["_meta"].is_object() && params["_meta"].contains("progressToken")) {
    const json& token = params["_meta"]["progressToken"];
    if (token.is_string() || token.is_number_integer()) progress_token = token;
  }
  auto call = std::make_shared<Call>();
  std::string key = id.dump();
  {
    std::lock_guard lock(calls_mutex_);
    if (output_broken_) call->cancelled = true;
    calls_[key] = call;
  }
  auto run = [this, id, tool, args, call, key, progress_token]() -> std::optional<json> {
    json response;
    try {
      response = {{"jsonrpc", "2.0"}, {"id", id}, {"result", CallTool(tool, args, &call->cancelled, progress_token)}};
    } catch (const ToolArgumentError& e) {
      // The model's mistake: a tool result it can read and act on (MCP 2025-11-25, SEP-1303).
      response = {{"jsonrpc", "2.0"}, {"id", id}, {"result", {{"content", TextContent(e.what())}, {"isError", true}}}};
    } catch (const std::invalid_argument& e) {
      response = ErrorResponse(id, kInvalidParams, e.what());
    } catch (const std::out_of_range& e) {
      response = ErrorResponse(id, kInvalidParams, e.what());
    } catch (const std::exception& e) {
      response = ErrorResponse(id, kInternalError, e.what());
    }
    {
      std::lock_guard lock(calls_mutex_);
      if (auto it = calls_.find(key); it != calls_.end() && it->second == call) calls_.erase(it);
    }
    // A cancelled request gets no response (the client has stopped waiting for it, or is gone).
    if (call->cancelled) return std::nullopt;
    return response;
  };
  if (defer) {
    *defer = run;
    return std::nullopt;
  }
  if (inline_tools) return run();
  std::string error;
  if (!StartWorker(
          [this, run] {
            if (auto response = run()) Send(*response);
          },
          &error)) {
    std::lock_guard lock(calls_mutex_);
    calls_.erase(key);
    return ErrorResponse(id, kInternalError, error);
  }
  return std::nullopt;
}

bool McpServer::StartWorker(std::function<void()> work, std::string* error) {
  JoinWorkers(true);
  // Each running call is a thread here and an nsbox exec on the host: a client pipelining a thousand calls made a
  // thousand of each.
  if (workers_.size() >= kMaxCallsAtOnce) {
    *error = fmt::format("{} tool calls are running already, the most at once: send this one when one has ended",
                         workers_.size());
    return false;
  }
  try {
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers_.push_back({std::thread([work = std::move(work), done] {
                          work();
                          *done = true;
                        }),
                        done});
  } catch (const std::system_error& e) {
    *error = fmt::format("cannot start a thread for the call: {}", e.what());
    return false;
  }
  return true;
}

void McpServer::HandleNotification(const json& msg) {
  const std::string method = msg["method"].get<std::string>();
  if (method == "notifications/cancelled") {
    if (!msg.contains("params") || !msg["params"].is_object() || !msg["params"].contains("requestId")) return;
    std::lock_guard lock(calls_mutex_);
    auto it = calls_.find(msg["params"]["requestId"].dump());
    if (it != calls_.end()) it->second->cancelled = true;
  }
  // notifications/initialized and unknown notifications need no answer.
}

std::optional<json> McpServer::HandleMessage(const json& msg, bool inline_tools, DeferredCall* defer) {
  bool is_request = msg.is_object() && msg.contains("id");
  json id = is_request && IsValidId(msg["id"]) ? msg["id"] : json(nullptr);
  try {
    if (!msg.is_object() || !msg.contains("jsonrpc") || msg["jsonrpc"] != "2.0" || !msg.contains("method") ||
        !msg["method"].is_string()) {
      // A response from the client (we send no requests) is ignored; anything else is an invalid request.
      if (is_request && (msg.contains("result") || msg.contains("error"))) return std::nullopt;
      return ErrorResponse(id, kInvalidRequest,
                           "invalid request: expected a JSON-RPC 2.0 object with a string 'method'");
    }
    if (!is_request) {
      HandleNotification(msg);
      return std::nullopt;
    }
    if (id.is_null()) return ErrorResponse(nullptr, kInvalidRequest, "id must be a string or an integer");
    return HandleRequest(msg, inline_tools, defer);
  } catch (const std::exception& e) {
    // The safety net: every bad shape known is answered above with its own code, but no message, however
    // malformed, may end the server. A notification gets no answer even so.
    if (!is_request) return std::nullopt;
    return ErrorResponse(id, kInternalError, fmt::format("internal error: {}", e.what()));
  }
}

std::optional<json> McpServer::HandleBatch(const json& batch, bool inline_tools) {
  if (batch.empty()) return ErrorResponse(nullptr, kInvalidRequest, "invalid request: empty batch");
  if (batch.size() > kMaxBatchMessages)
    return ErrorResponse(nullptr, kInvalidRequest,
                         fmt::format("invalid request: a batch of {} messages (at most {}; send them one by one)",
                                     batch.size(), kMaxBatchMessages));
  // One array answers the whole batch, in order, once its last call is done. Everything but tool calls is answered
  // here; the tool calls run one after another on a worker, so that the reader goes on meanwhile: a ping is
  // answered and a notifications/cancelled reaches a batch's call (a cancelled call has no place in the array).
  auto answers = std::make_shared<std::vector<std::optional<json>>>(batch.size());
  std::vector<std::pair<size_t, DeferredCall>> calls;
  for (size_t i = 0; i < batch.size(); ++i) {
    DeferredCall call;
    (*answers)[i] = HandleMessage(batch[i], inline_tools, &call);
    if (call) calls.emplace_back(i, std::move(call));
  }
  auto collect = [answers]() -> std::optional<json> {
    json responses = json::array();
    for (auto& answer : *answers)
      if (answer) responses.push_back(std::move(*answer));
    if (responses.empty()) return std::nullopt;  // notifications and cancelled calls only
    return responses;
  };
  auto run_calls = [answers, calls] {
    for (const auto& [index, call] : calls) (*answers)[index] = call();
  };
  if (inline_tools || calls.empty()) {
    run_calls();
    return collect();
  }
  std::string error;
  if (!StartWorker(
          [this, run_calls, collect] {
            run_calls();
            if (auto responses = collect()) Send(*responses);
          },
          &error)) {
    // No thread: each call is answered with the error, in its place.
    for (const auto& [index, call] : calls) {
      const json& id = batch[index]["id"];
      {
        std::lock_guard lock(calls_mutex_);
        calls_.erase(id.dump());
      }
      (*answers)[index] = ErrorResponse(id, kInternalError, error);
    }
    return collect();
  }
  return std::nullopt;
}

std::optional<json> McpServer::HandleLine(const std::string& line, bool inline_tools) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  json msg;
  try {
    msg = ParseBoundedJson(line);
  } catch (const std::exception& e) {
    // Not only parse_error: a number too large for a double (1e400) is an out_of_range; too deep a nesting JsonTooDeep.
    return ErrorResponse(nullptr, kParseError, fmt::format("parse error: {}", JsonErrorText(e)));
  }
  if (msg.is_array() && !batches_allowed_)
    return ErrorResponse(nullptr, kInvalidRequest,
                         "invalid request: a JSON-RPC batch, which the negotiated MCP version does not have (batches "
                         "ended with 2025-06-18); send the messages one by one");
  if (msg.is_array()) return HandleBatch(msg, inline_tools);
  return HandleMessage(msg, inline_tools);
}

std::vector<json> McpServer::HandleForTest(const std::string& line) {
  std::vector<json> out;
  if (auto response = HandleLine(line, true)) out.push_back(std::move(*response));
  return out;
}

void McpServer::Serve(int in_fd, int out_fd) {
  out_fd_ = out_fd;
  const size_t max_bytes = options_.max_message_bytes;
  auto handle = [&](const std::string& line) {
    if (line.size() > max_bytes)
      return Send(ErrorResponse(nullptr, kParseError, fmt::format("message larger than {} bytes", max_bytes)));
    if (auto response = HandleLine(line, false)) Send(*response);
  };
  std::string pending;    // the start of a line whose newline has not come yet
  bool skipping = false;  // inside an over-long line, already answered: its bytes are dropped up to its newline
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(in_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    // Only the new bytes are searched for newlines: a long line costs its length, not its length squared.
    std::string_view chunk(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t newline; (newline = chunk.find('\n', start)) != std::string_view::npos; start = newline + 1) {
      if (skipping) {
        skipping = false;
        continue;
      }
      pending.append(chunk.substr(start, newline - start));
      handle(pending);
      pending.clear();
    }
    if (skipping) continue;
    pending.append(chunk.substr(start));
    if (pending.size() > max_bytes) {
      handle(pending);  // the one error for this line
      pending.clear();
      skipping = true;
    }
  }
  if (!skipping) handle(pending);
  // End of input is a half-close: the client sends nothing more but still reads. Calls in flight run to their end
  // (each is bounded by its own time limit) and are answered. If the client is gone for good, they are cancelled:
  // by Send() when a write fails, or here when the output's reader is gone (POLLERR on a pipe whose read end is
  // closed, POLLHUP on a socket or terminal) before any call had something to write.
  for (;;) {
    {
      std::lock_guard lock(calls_mutex_);
      if (calls_.empty() || output_broken_) break;
    }
    pollfd output{.fd = out_fd, .events = 0, .revents = 0};
    if (::poll(&output, 1, 100) > 0 && (output.revents & (POLLERR | POLLHUP | POLLNVAL))) CancelAll();
  }
  JoinWorkers(false);
  Shutdown();
}

}  // namespace nsbox::mcp
