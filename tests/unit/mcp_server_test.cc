// Unit tests: the MCP server's protocol handling (versions, errors, tool results), with a scripted runtime.
#include <catch2/catch.hpp>

#include "src/mcp/server.h"

using namespace nsbox;
using nlohmann::json;

namespace {

// Records what it was asked to run and answers with a prepared result.
class ScriptedRuntime : public runtime::SandboxRuntime {
 public:
  explicit ScriptedRuntime(Result answer, std::vector<std::string>* calls) : answer_(std::move(answer)), calls_(calls) {}
  std::string name() const override { return "scripted"; }
  StatusOr<runtime::ExecutionResult> execute(const std::string& language, const std::string& code,
                                             const runtime::ExecuteOptions& options) override {
    calls_->push_back(language + ":" + std::to_string(options.timeout.count()) + ":" + code);
    return answer_;
  }

 private:
  Result answer_;
  std::vector<std::string>* calls_;
};

struct Fixture {
  std::vector<std::string> calls;
  int runtimes_made = 0;
  Result answer;
  mcp::McpServer server{[this]() -> StatusOr<std::unique_ptr<runtime::SandboxRuntime>> {
                          ++runtimes_made;
                          return std::unique_ptr<runtime::SandboxRuntime>(new ScriptedRuntime(answer, &calls));
                        },
                        mcp::ServerOptions{}};
  json One(const json& msg) {
    auto out = server.HandleForTest(msg.dump());
    REQUIRE(out.size() == 1);
    return out[0];
  }
};

json Call(int id, const std::string& tool, const json& args) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"}, {"params", {{"name", tool}, {"arguments", args}}}};
}

}  // namespace

TEST_CASE("mcp initialize echoes a supported version and offers the newest otherwise") {
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

TEST_CASE("mcp answers malformed input with JSON-RPC errors") {
  Fixture f;
  auto out = f.server.HandleForTest("{\"jsonrpc\": ");
  REQUIRE(out.size() == 1);
  CHECK(out[0]["error"]["code"] == -32700);
  CHECK(out[0]["id"].is_null());
  CHECK(f.One({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "nope"}})["error"]["code"] == -32601);
  CHECK(f.One({{"id", 3}, {"method", "ping"}})["error"]["code"] == -32600);
  CHECK(f.One({{"jsonrpc", "2.0"}, {"id", 4}, {"method", "tools/call"}, {"params", 5}})["error"]["code"] == -32602);
  CHECK(f.One(Call(5, "execute_code", {{"code", "x"}}))["error"]["code"] == -32602);
  CHECK(f.One(Call(6, "unknown_tool", json::object()))["error"]["code"] == -32602);
  CHECK(f.One(Call(7, "read_file", {{"path", "../../etc/passwd"}}))["error"]["code"] == -32602);
  CHECK(f.server.HandleForTest(json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}.dump()).empty());
  CHECK(f.calls.empty());
}

TEST_CASE("mcp tool results carry exit code, clipped output, structuredContent and isError") {
  Fixture f;
  f.answer.status = RunStatus::kExit;
  f.answer.exit_code = 1;
  f.answer.stdout_data = std::string(100'000, 'a') + "END";
  f.answer.stderr_data = "Traceback...\nZeroDivisionError: division by zero\n";
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
  REQUIRE(f.calls.size() == 1);
  CHECK(f.calls[0] == "python:2000:1/0");
}

TEST_CASE("mcp run_python runs python and a clean exit is not an error") {
  Fixture f;
  f.answer.status = RunStatus::kOk;
  f.answer.exit_code = 0;
  f.answer.stdout_data = "42\n";
  json result = f.One(Call(1, "run_python", {{"code", "print(42)"}}))["result"];
  CHECK(result["isError"] == false);
  CHECK(f.calls.at(0).starts_with("python:30000:print(42)"));
  f.One(Call(2, "run_python", {{"code", "print(1)"}}));
  CHECK(f.runtimes_made == 1);  // one sandbox for the whole connection
}
