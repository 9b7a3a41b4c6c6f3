// Unit tests: the MCP server's protocol handling (versions, errors, batches, tool results, the read loop and the end
// of input), with a scripted runtime.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "src/mcp/server.h"

using namespace nsbox;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// What the scripted runtime answers, and what it was asked (runs may come from the server's worker threads).
struct Script {
  Result answer;
  milliseconds run_time{0};  // each run takes this long, unless it is cancelled first
  std::mutex mutex;
  std::vector<std::string> calls;  // "language:timeout_ms:code"
  std::atomic<int> cancelled_runs{0};
  std::vector<std::pair<int, std::string>> chunks;  // passed to on_output, when the call asks for it, before answering
  std::atomic<int> streamed_runs{0};                // runs that were given an on_output
};

class ScriptedRuntime : public runtime::SandboxRuntime {
 public:
  explicit ScriptedRuntime(Script* script) : script_(script) {}
  std::string name() const override { return "scripted"; }
  StatusOr<runtime::ExecutionResult> execute(const std::string& language, const std::string& code,
                                             const runtime::ExecuteOptions& options) override {
    {
      std::lock_guard lock(script_->mutex);
      script_->calls.push_back(language + ":" + std::to_string(options.timeout.count()) + ":" + code);
    }
    if (options.on_output) {
      ++script_->streamed_runs;
      for (const auto& [stream, text] : script_->chunks) options.on_output(stream, text);
    }
    auto end = steady_clock::now() + script_->run_time;
    while (steady_clock::now() < end) {
      if (options.cancel && *options.cancel) {
        ++script_->cancelled_runs;
        Result cancelled;
        cancelled.status = RunStatus::kTimeout;
        return cancelled;
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    return script_->answer;
  }

 private:
  Script* script_;
};

struct Fixture {
  explicit Fixture(mcp::ServerOptions options = {})
      : server(
            [this]() -> StatusOr<std::unique_ptr<runtime::SandboxRuntime>> {
              ++runtimes_made;
              return std::unique_ptr<runtime::SandboxRuntime>(new ScriptedRuntime(&script));
            },
            options) {}
  Script script;
  int runtimes_made = 0;
  mcp::McpServer server;
  json One(const json& msg) { return OneLine(msg.dump()); }
  json OneLine(const std::string& line) {
    auto out = server.HandleForTest(line);
    REQUIRE(out.size() == 1);
    return out[0];
  }
};

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::vector<json> ParseLines(const std::string& output) {
  std::vector<json> messages;
  size_t start = 0;
  for (size_t newline; (newline = output.find('\n', start)) != std::string::npos; start = newline + 1)
    messages.push_back(json::parse(output.substr(start, newline - start)));
  CHECK(start == output.size());  // every message ends with a newline
  return messages;
}

// Serve() over pipes, as `nsbox mcp` runs it: writes `input`, ends the input, and returns what the server wrote
// until it returned.
std::vector<json> ServeOverPipes(mcp::McpServer& server, const std::string& input) {
  int in[2], out[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  std::thread serving([&] {
    server.Serve(in[0], out[1]);
    ::close(out[1]);
  });
  std::thread writing([&] {
    WriteAll(in[1], input);
    ::close(in[1]);
  });
  std::string output;
  char buf[65536];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) output.append(buf, static_cast<size_t>(n));
  writing.join();
  serving.join();
  ::close(in[0]);
  ::close(out[0]);
  return ParseLines(output);
}

// Ignores SIGPIPE while it lives, as `nsbox mcp` does, so that writing to a closed pipe fails with EPIPE.
struct IgnoreSigpipe {
  IgnoreSigpipe() { previous = ::signal(SIGPIPE, SIG_IGN); }
  ~IgnoreSigpipe() { ::signal(SIGPIPE, previous); }
  sighandler_t previous;
};

json Call(int id, const std::string& tool, const json& args) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"}, {"params", {{"name", tool}, {"arguments", args}}}};
}

json Ping(int id) { return {{"jsonrpc", "2.0"}, {"id", id}, {"method", "ping"}}; }

json ById(const std::vector<json>& messages, int id) {
  for (const auto& m : messages)
    if (m.is_object() && m["id"] == id) return m;
  FAIL("no message with id " << id);
  return nullptr;
}

std::string Lines(const std::vector<json>& messages) {
  std::string text;
  for (const auto& m : messages) text += m.dump() + "\n";
  return text;
}

}  // namespace

TEST_CASE("mcp initialize echoes a supported version and offers the newest otherwise", "[mcp]") {
  Fixture f;
  json init = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"},
               {"params", {{"protocolVersion", "2025-03-26"}, {"capabilities", json::object()}}}};
  CHECK(f.One(init)["result"]["protocolVersion"] == "2025-03-26");
  init["params"]["protocolVersion"] = "2000-01-01";
  json reply = f.One(init);
  CHECK(reply["result"]["protocolVersion"] == mcp::SupportedProtocolVersions().front());
  CHECK(reply["result"]["capabilities"].contains("tools"));
  CHECK(f.runtimes_made == 0);  // the sandbox is created lazily, on the first tool call
}

TEST_CASE("mcp answers malformed input with JSON-RPC errors", "[mcp]") {
  Fixture f;
  auto out = f.server.HandleForTest("{\"jsonrpc\": ");
  REQUIRE(out.size() == 1);
  CHECK(out[0]["error"]["code"] == -32700);
  CHECK(out[0]["id"].is_null());
  CHECK(f.One({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "nope"}})["error"]["code"] == -32601);
  CHECK(f.One({{"id", 3}, {"method", "ping"}})["error"]["code"] == -32600);
  CHECK(f.One({{"jsonrpc", "2.0"}, {"id", 4}, {"method", "tools/call"}, {"params", 5}})["error"]["code"] == -32602);
  // Bad arguments of a known tool are the model's to fix: a tool result with isError (SEP-1303); an unknown tool is
  // a protocol fault.
  json missing_language = f.One(Call(5, "execute_code", {{"code", "x"}}));
  CHECK(missing_language["result"]["isError"] == true);
  CHECK(missing_language["result"]["content"][0]["text"].get<std::string>().find("'language' must be a string") !=
        std::string::npos);
  CHECK(f.One(Call(6, "unknown_tool", json::object()))["error"]["code"] == -32602);
  CHECK(f.One(Call(7, "read_file", {{"path", "../../etc/passwd"}}))["result"]["isError"] == true);
  CHECK(f.server.HandleForTest(json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}.dump()).empty());
  CHECK(f.script.calls.empty());
}

TEST_CASE("mcp tool results carry exit code, clipped output, structuredContent and isError", "[mcp]") {
  Fixture f;
  f.script.answer.status = RunStatus::kExit;
  f.script.answer.exit_code = 1;
  f.script.answer.stdout_data = std::string(100'000, 'a') + "END";
  f.script.answer.stderr_data = "Traceback...\nZeroDivisionError: division by zero\n";
  json reply = f.One(Call(1, "execute_code", {{"language", "python"}, {"code", "1/0"}, {"timeout_seconds", 2}}));
  const json& result = reply["result"];
  CHECK(result["isError"] == true);
  std::string text = result["content"][0]["text"];
  CHECK(text.starts_with("exit_code: 1"));
  CHECK(text.find("bytes of stdout cut") != std::string::npos);
  CHECK(text.find("END") != std::string::npos);
  CHECK(text.find("ZeroDivisionError") != std::string::npos);
  CHECK(text.size() < 50'000);
  CHECK(result["structuredContent"]["exit_code"] == 1);
  REQUIRE(f.script.calls.size() == 1);
  CHECK(f.script.calls[0] == "python:2000:1/0");
}

TEST_CASE("mcp refuses code over the program size limit as the model's error, naming the limit", "[mcp]") {
  Fixture f;
  json result = f.One(Call(1, "run_python", {{"code", std::string((16 << 20) + 1, '#')}}))["result"];
  CHECK(result["isError"] == true);
  CHECK(result["content"][0]["text"] ==
        "invalid arguments for run_python: 'code' is 16777217 bytes, more than the 16777216 a program may have: "
        "write large data to a file with write_file, or generate it in the code");
  CHECK(f.script.calls.empty());  // nothing ran
  // write_file's content travels base64-encoded in such a program: past 12M less 64K it was refused naming a CLI
  // flag (--file) the model never used.
  result = f.One(Call(2, "write_file", {{"path", "big.txt"}, {"content", std::string(13'000'000, 'a')}}))["result"];
  CHECK(result["isError"] == true);
  CHECK(result["content"][0]["text"] ==
        "invalid arguments for write_file: 'content' is 13000000 bytes, more than write_file takes (12517376 bytes): "
        "generate large data in code instead");
  CHECK(f.script.calls.empty());
}

// A misspelt limit ("timeout" for "timeout_seconds") ran with the default, silently: the API and batch refuse theirs.
TEST_CASE("mcp refuses an argument the tool does not have, naming it and those it takes", "[mcp]") {
  Fixture f;
  json result = f.One(Call(1, "run_python", {{"code", "print(1)"}, {"timeout", 1}}))["result"];
  CHECK(result["isError"] == true);
  CHECK(result["content"][0]["text"] ==
        "invalid arguments for run_python: unknown argument 'timeout' (it takes: code, timeout_seconds)");
  result = f.One(Call(2, "read_file", {{"path", "a"}, {"encoding", "base64"}}))["result"];
  CHECK(result["content"][0]["text"] ==
        "invalid arguments for read_file: unknown argument 'encoding' (it takes: path)");
  CHECK(f.script.calls.empty());  // nothing ran
  result = f.One(Call(3, "execute_code", {{"language", "python"}, {"code", "1"}, {"timeout_seconds", 3}}))["result"];
  CHECK(f.script.calls.size() == 1);
}

TEST_CASE("mcp input schemas say what a call refuses: no other argument, a time-out above 0", "[mcp]") {
  Fixture f;
  json tools = f.One({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/list"}})["result"]["tools"];
  REQUIRE(tools.size() == 6);
  for (const json& tool : tools) {
    INFO(tool["name"]);
    CHECK(tool["inputSchema"]["additionalProperties"] == false);
    const json& properties = tool["inputSchema"]["properties"];
    if (properties.contains("timeout_seconds")) CHECK(properties["timeout_seconds"]["exclusiveMinimum"] == 0);
  }
  json zero = f.One(Call(2, "run_python", {{"code", "1"}, {"timeout_seconds", 0}}))["result"];
  CHECK(zero["isError"] == true);  // what the schema's exclusiveMinimum says
}

TEST_CASE("mcp run_python runs python and a clean exit is not an error", "[mcp]") {
  Fixture f;
  f.script.answer.status = RunStatus::kOk;
  f.script.answer.exit_code = 0;
  f.script.answer.stdout_data = "42\n";
  json result = f.One(Call(1, "run_python", {{"code", "print(42)"}}))["result"];
  CHECK(result["isError"] == false);
  CHECK(f.script.calls.at(0).starts_with("python:30000:print(42)"));
  f.One(Call(2, "run_python", {{"code", "print(1)"}}));
  CHECK(f.runtimes_made == 1);  // one sandbox for the whole connection
}

TEST_CASE("mcp answers lines nlohmann cannot represent or type-check with errors and keeps serving", "[mcp]") {
  Fixture f;
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":1e400}})", -32700},
      {R"({"jsonrpc":"2.0","id":1e400,"method":"ping"})", -32700},
      {R"({"jsonrpc":"2.0","id":2,"method":"tools/call",)"
       R"("params":{"name":"run_python","arguments":{"code":"1","timeout_seconds":1e400}}})",
       -32700},
      {R"({"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":5}})", -32602},
      {R"({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":null}})", -32602},
      {R"({"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":["x"]}})", -32602},
      {R"({"jsonrpc":5,"id":6,"method":"ping"})", -32600},
      {R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})", -32600},
      // 100000 levels in 200 KB: a recursive copy of the params would overflow the stack (it once did).
      {R"({"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":)" + std::string(100000, '[') +
           std::string(100000, ']') + "}}",
       -32700},
  };
  std::string input;
  for (const auto& [line, code] : cases) input += line + "\n";
  input += Ping(7).dump() + "\n";
  auto out = ServeOverPipes(f.server, input);
  REQUIRE(out.size() == cases.size() + 1);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].first);
    CHECK(out[i]["error"]["code"] == cases[i].second);
  }
  CHECK(out[3]["id"] == 3);  // an invalid parameter is answered with the request's id
  CHECK(out.back() == json{{"jsonrpc", "2.0"}, {"id", 7}, {"result", json::object()}});
  CHECK(f.script.calls.empty());
}

TEST_CASE("mcp clamps a huge timeout_seconds to the maximum instead of wrapping it", "[mcp]") {
  Fixture f;
  for (double seconds : {601.0, 1e18, 1e20, 1e300}) {
    INFO(seconds);
    f.script.calls.clear();
    f.One(Call(1, "run_python", {{"code", "x"}, {"timeout_seconds", seconds}}));
    REQUIRE(f.script.calls.size() == 1);
    CHECK(f.script.calls[0] == "python:600000:x");
  }
  f.script.calls.clear();
  f.One(Call(2, "run_python", {{"code", "x"}, {"timeout_seconds", 1e-9}}));
  CHECK(f.script.calls.at(0) == "python:1:x");
}

TEST_CASE("mcp answers each over-long line with exactly one parse error and reads the next line normally", "[mcp]") {
  mcp::ServerOptions options;
  options.max_message_bytes = 1000;
  Fixture f(options);
  // The first line spans many reads; the second is over-long but arrives whole.
  std::string input = std::string(300'000, 'x') + "\n" + Ping(1).dump() + "\n" + std::string(2000, 'y') + "\n" +
                      Ping(2).dump() + "\n" + std::string(999, ' ') + "\n";
  auto out = ServeOverPipes(f.server, input);
  REQUIRE(out.size() == 4);
  CHECK(out[0]["error"]["code"] == -32700);
  CHECK(out[0]["id"].is_null());
  CHECK(out[1]["id"] == 1);
  CHECK(out[2]["error"]["code"] == -32700);
  CHECK(out[3]["id"] == 2);
}

TEST_CASE("mcp refuses batches once a version without them is negotiated, and takes them under 2025-03-26", "[mcp]") {
  auto initialize = [](const char* version) {
    return json{{"jsonrpc", "2.0"},
                {"id", 1},
                {"method", "initialize"},
                {"params",
                 {{"protocolVersion", version},
                  {"capabilities", json::object()},
                  {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}};
  };
  for (const char* version : {"2025-06-18", "2025-11-25"}) {
    Fixture f;
    REQUIRE(f.One(initialize(version))["result"]["protocolVersion"] == version);
    json refused = f.One(json::array({Ping(5), Ping(6)}));
    REQUIRE(refused.is_object());
    CHECK(refused["error"]["code"] == -32600);
    CHECK(refused["id"].is_null());
    CHECK(f.One(Ping(7))["id"] == 7);  // single messages go on
  }
  Fixture old;
  REQUIRE(old.One(initialize("2025-03-26"))["result"]["protocolVersion"] == "2025-03-26");
  CHECK(old.One(json::array({Ping(5), Ping(6)})).size() == 2);
}

TEST_CASE("mcp answers a batch with one array, in order, without notifications", "[mcp]") {
  Fixture f;
  json notification = {{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}};
  json reply = f.One(json::array({Ping(5), notification, Ping(6)}));
  REQUIRE(reply.is_array());
  REQUIRE(reply.size() == 2);
  CHECK(reply[0]["id"] == 5);
  CHECK(reply[1]["id"] == 6);

  CHECK(f.server.HandleForTest(json::array({notification, notification}).dump()).empty());

  json empty = f.OneLine("[]");
  CHECK(empty.is_object());
  CHECK(empty["error"]["code"] == -32600);

  // One error for a batch too large, not an answer for each of its messages (gigabytes for a "[1,1,...]" line).
  std::string huge = "[1";
  for (int i = 0; i < 200000; ++i) huge += ",1";
  json refused = f.OneLine(huge + "]");
  REQUIRE(refused.is_object());
  CHECK(refused["error"]["code"] == -32600);
  CHECK(refused["error"]["message"] ==
        "invalid request: a batch of 200001 messages (at most 128; send them one by one)");
  json pings = json::array();
  for (int i = 0; i < 128; ++i) pings.push_back(Ping(i));
  CHECK(f.One(pings).size() == 128);

  json mixed = f.OneLine(R"([1, [], {"jsonrpc":"2.0","id":7,"method":"ping"}])");
  REQUIRE(mixed.size() == 3);
  CHECK(mixed[0]["error"]["code"] == -32600);
  CHECK(mixed[1]["error"]["code"] == -32600);
  CHECK(mixed[2]["id"] == 7);

  f.script.answer.status = RunStatus::kOk;
  json calls = f.One(json::array({Call(8, "run_python", {{"code", "a"}}), Call(9, "run_python", {{"code", "b"}})}));
  REQUIRE(calls.size() == 2);
  CHECK(calls[0]["id"] == 8);
  CHECK(calls[1]["id"] == 9);
  CHECK(calls[1]["result"]["isError"] == false);
  CHECK(f.script.calls == std::vector<std::string>{"python:30000:a", "python:30000:b"});
}

TEST_CASE("mcp keeps a batch's array to its own responses while other calls answer concurrently", "[mcp]") {
  Fixture f;
  f.script.answer.status = RunStatus::kOk;
  f.script.run_time = milliseconds(300);
  // Call 1 runs on a worker and finishes while the batch's two calls run, one after the other, on another.
  std::string input =
      Lines({Call(1, "run_python", {{"code", "a"}}),
             json::array({Call(2, "run_python", {{"code", "b"}}), Call(3, "run_python", {{"code", "c"}}), Ping(4)})});
  auto out = ServeOverPipes(f.server, input);
  REQUIRE(out.size() == 2);
  const json& batch = out[0].is_array() ? out[0] : out[1];
  const json& single = out[0].is_array() ? out[1] : out[0];
  REQUIRE(batch.size() == 3);
  CHECK(batch[0]["id"] == 2);
  CHECK(batch[1]["id"] == 3);
  CHECK(batch[2]["id"] == 4);
  CHECK(single["id"] == 1);
  CHECK(single["result"]["isError"] == false);
}

TEST_CASE("mcp runs at most 16 tool calls at once; the 17th is refused, saying so", "[mcp]") {
  // Each call is a thread and an nsbox exec on the host: a thousand pipelined calls made a thousand of each.
  Fixture f;
  f.script.answer.status = RunStatus::kOk;
  f.script.run_time = milliseconds(5'000);  // the 16 still run when the 17th is read, on a loaded machine too
  std::vector<json> calls;
  for (int i = 1; i <= 17; ++i) calls.push_back(Call(i, "run_python", {{"code", "x"}}));
  auto out = ServeOverPipes(f.server, Lines(calls));
  REQUIRE(out.size() == 17);
  int refused = 0;
  for (const auto& answer : out) {
    if (!answer.contains("error")) continue;
    ++refused;
    CHECK(answer["id"] == 17);
    CHECK(answer["error"]["message"] ==
          "16 tool calls are running already, the most at once: send this one when one has ended");
  }
  CHECK(refused == 1);
}

TEST_CASE("mcp reads on while a batch's calls run: a later ping is answered first, a cancelled call is left out",
          "[mcp]") {
  Fixture f;
  f.script.run_time = milliseconds(60'000);  // ended early by the cancel
  json cancel = {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 1}}}};
  auto started = steady_clock::now();
  auto out = ServeOverPipes(f.server, Lines({json::array({Call(1, "run_python", {{"code", "x"}}), Ping(2)}), cancel,
                                             Ping(3)}));
  REQUIRE(out.size() == 2);
  CHECK(out[0]["id"] == 3);  // not held up behind the batch
  REQUIRE(out[1].is_array());
  REQUIRE(out[1].size() == 1);  // the cancelled call has no response
  CHECK(out[1][0]["id"] == 2);
  CHECK(f.script.cancelled_runs == 1);
  CHECK(steady_clock::now() - started < milliseconds(30'000));
}

TEST_CASE("mcp answers the calls in flight when its input ends (a half-close)", "[mcp]") {
  Fixture f;
  f.script.answer.status = RunStatus::kOk;
  f.script.answer.stdout_data = "done\n";
  f.script.run_time = milliseconds(200);
  json init = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "initialize"},
               {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", json::object()}}}};
  auto out = ServeOverPipes(f.server, Lines({init, Call(2, "run_python", {{"code", "print('done')"}}),
                                             Call(3, "nope", json::object())}));
  REQUIRE(out.size() == 3);
  CHECK(ById(out, 1)["result"].contains("protocolVersion"));
  CHECK(ById(out, 3)["error"]["code"] == -32602);
  CHECK(ById(out, 2)["result"]["isError"] == false);
  CHECK(f.script.cancelled_runs == 0);
}

TEST_CASE("mcp notifications/cancelled stops a call, which gets no response", "[mcp]") {
  Fixture f;
  f.script.run_time = milliseconds(60'000);  // ended early by the cancel
  json cancel = {{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 7}}}};
  auto started = steady_clock::now();
  auto out = ServeOverPipes(f.server, Lines({Call(7, "run_python", {{"code", "x"}}), cancel, Ping(8)}));
  REQUIRE(out.size() == 1);
  CHECK(out[0]["id"] == 8);
  CHECK(f.script.cancelled_runs == 1);
  CHECK(steady_clock::now() - started < milliseconds(30'000));
}

TEST_CASE("mcp cancels running calls when the client is gone for good", "[mcp]") {
  IgnoreSigpipe ignore_sigpipe;
  Fixture f;
  f.script.run_time = milliseconds(60'000);  // ended early by the cancel
  int in[2], out[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  ::close(out[0]);  // nobody reads the answers
  auto started = steady_clock::now();
  std::thread serving([&] { f.server.Serve(in[0], out[1]); });
  WriteAll(in[1], Call(1, "run_python", {{"code", "x"}}).dump() + "\n");

  SECTION("a write fails while the input is still open") {
    WriteAll(in[1], Ping(2).dump() + "\n");
    while (f.script.cancelled_runs == 0 && steady_clock::now() - started < milliseconds(30'000))
      std::this_thread::sleep_for(milliseconds(10));
    CHECK(f.script.cancelled_runs == 1);
  }
  SECTION("the input ends and nothing more is written") {}

  ::close(in[1]);
  serving.join();
  CHECK(f.script.cancelled_runs == 1);
  CHECK(steady_clock::now() - started < milliseconds(30'000));
  ::close(in[0]);
  ::close(out[1]);
}

TEST_CASE("mcp joins the threads of finished calls as it goes, not only when the connection ends", "[mcp]") {
  // A finished but unjoined thread keeps its stack mapped: a long connection would hold one per call it served.
  Fixture f;
  f.script.answer.status = RunStatus::kOk;
  int in[2], out[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  std::thread serving([&] {
    f.server.Serve(in[0], out[1]);
    ::close(out[1]);
  });
  auto mappings = [] {
    std::ifstream maps("/proc/self/maps");
    return std::count(std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>(), '\n');
  };
  std::string pending;
  auto answer = [&] {  // the next line the server writes
    char buf[4096];
    size_t newline;
    while ((newline = pending.find('\n')) == std::string::npos) {
      ssize_t n = ::read(out[0], buf, sizeof buf);
      REQUIRE(n > 0);
      pending.append(buf, static_cast<size_t>(n));
    }
    json line = json::parse(pending.substr(0, newline));
    pending.erase(0, newline + 1);
    return line;
  };
  WriteAll(in[1], Call(0, "run_python", {{"code", "warm-up"}}).dump() + "\n");
  answer();
  const auto before = mappings();
  for (int id = 1; id <= 40; ++id) {
    WriteAll(in[1], Call(id, "run_python", {{"code", "x"}}).dump() + "\n");
    CHECK(answer()["id"] == id);
  }
  const auto after = mappings();
  ::close(in[1]);
  serving.join();
  ::close(in[0]);
  ::close(out[0]);
  INFO("mappings before " << before << ", after 40 calls " << after);
  CHECK(after - before < 20);
}

TEST_CASE("mcp sends a call's output as notifications/progress before its result when it has a progressToken",
          "[mcp]") {
  Fixture f;
  f.script.answer.status = RunStatus::kOk;
  f.script.answer.stdout_data = "1\n2\n";
  f.script.answer.stderr_data = "warn\n";
  f.script.chunks = {{1, "1\n"}, {2, "warn\n"}, {1, "2\n"}};
  json with_token = Call(1, "run_python", {{"code", "print(1)"}});
  with_token["params"]["_meta"] = {{"progressToken", "tok-1"}};
  json int_token = Call(2, "execute_code", {{"language", "sh"}, {"code", "echo 1"}});
  int_token["params"]["_meta"] = {{"progressToken", 7}};
  auto out = ServeOverPipes(f.server, Lines({with_token}));
  REQUIRE(out.size() == 4);
  for (size_t i = 0; i < 3; ++i) {
    INFO(out[i].dump());
    CHECK(out[i]["jsonrpc"] == "2.0");
    CHECK(out[i]["method"] == "notifications/progress");
    CHECK_FALSE(out[i].contains("id"));
    CHECK(out[i]["params"]["progressToken"] == "tok-1");
    CHECK(out[i]["params"]["progress"] == i + 1);  // increasing with each notification
    CHECK(out[i]["params"]["message"] == f.script.chunks[i].second);
  }
  CHECK(out[3]["id"] == 1);
  CHECK(out[3]["result"]["isError"] == false);

  Fixture g;
  g.script.answer.status = RunStatus::kOk;
  g.script.chunks = {{1, "x"}};
  auto ints = ServeOverPipes(g.server, Lines({int_token}));
  REQUIRE(ints.size() == 2);
  CHECK(ints[0]["params"]["progressToken"] == 7);
  CHECK(ints[1]["id"] == 2);

  // Without a token (or with one that is neither a string nor an integer): no notifications, and no streaming asked.
  Fixture h;
  h.script.answer.status = RunStatus::kOk;
  h.script.chunks = {{1, "1\n"}};
  json bad_token = Call(4, "run_python", {{"code", "print(1)"}});
  bad_token["params"]["_meta"] = {{"progressToken", json::array()}};
  auto none = ServeOverPipes(h.server, Lines({Call(3, "run_python", {{"code", "print(1)"}}), bad_token}));
  REQUIRE(none.size() == 2);
  for (const auto& m : none) CHECK_FALSE(m.contains("method"));
  CHECK(h.script.streamed_runs == 0);
}
