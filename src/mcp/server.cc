// McpServer: initialize/version negotiation, ping, tools/list, tools/call on worker threads, batches, cancellation,
// the end of input, and JSON-RPC errors for everything malformed. stdout carries protocol messages only. A call's
// arguments and its tool result are made in tool_call.cc.
#include "nsbox_config.h"
#include "src/mcp/server.h"

#include <poll.h>
#include <unistd.h>

#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "sandbox/base/bounded_json.h"
#include "src/mcp/tool_call.h"
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
  ToolRun run = ParseToolCall(name, args, options_);
  run.exec.cancel = cancel;

  if (run.code_tool && !progress_token.is_null()) {
    // The output as it comes, one notification a chunk (stdout and stderr alike), before the result; progress counts
    // the chunks. None once the call is cancelled: its token is no longer an active request's.
    run.exec.on_output = [this, &progress_token, cancel, count = 0](int, std::string_view text) mutable {
      if (cancel && *cancel) return;
      Send({{"jsonrpc", "2.0"},
            {"method", "notifications/progress"},
            {"params", {{"progressToken", progress_token}, {"progress", ++count}, {"message", text}}}});
    };
  }
  auto rt = Runtime();
  if (!rt.ok()) return ToolErrorResult("could not start the sandbox: " + rt.status().message());
  auto result = (*rt)->execute(run.language, run.code, run.exec);
  if (!result.ok()) return ToolErrorResult("sandbox error: " + result.status().message());
  return ToolCallResult(*result, run, options_.result_budget_bytes);
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
      response = {{"jsonrpc", "2.0"}, {"id", id}, {"result", ToolErrorResult(e.what())}};
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
