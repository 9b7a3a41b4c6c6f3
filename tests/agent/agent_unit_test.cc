// Unit tests of the agent's pure parts: message assembly for both wire formats, response checks, clipping, tool
// results, retry-after.
#include <algorithm>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "sandbox/output_buffer.h"
#include "src/agent/agent_loop.h"
#include "src/agent/anthropic.h"
#include "src/agent/http_wire.h"
#include "src/agent/openai.h"
#include "src/agent/tools.h"

using namespace nsbox;
using namespace nsbox::agent;
using nlohmann::json;

namespace {

std::unique_ptr<Provider> Make(const std::string& name, const std::string& base_url = "") {
  ProviderConfig config;
  config.provider = name;
  config.api_key = "k-123";
  config.base_url = base_url;
  config.system_prompt = SystemPrompt();
  config.tools = CodeTools();
  auto p = MakeProvider(config);
  REQUIRE(p.ok());
  return std::move(*p);
}

// Why an OpenAI provider cannot be made on base_url; empty when it can.
std::string RefusalOf(const std::string& base_url) {
  ProviderConfig config;
  config.provider = "openai";
  config.base_url = base_url;
  auto made = MakeProvider(config);
  return made.ok() ? "" : made.status().message();
}

json AnthropicToolTurn() {
  return json::parse(R"J({"id":"msg_1","type":"message","role":"assistant","model":"m","stop_reason":"tool_use",
    "content":[{"type":"text","text":"Let me compute."},
               {"type":"tool_use","id":"toolu_a","name":"run_python","input":{"code":"print(1)"}},
               {"type":"tool_use","id":"toolu_b","name":"execute_code",)J"
                 R"J("input":{"language":"bash","code":"echo 2"}}]})J");
}

json OpenAIToolTurn() {
  return json::parse(R"J({"id":"c1","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls",
    "message":{"role":"assistant","content":null,"tool_calls":[
      {"id":"call_a","type":"function","function":{"name":"run_python","arguments":"{\"code\": \"print(1)\"}"}},
      {"id":"call_b","type":"function","function":{"name":"execute_code",)J"
                     R"J("arguments":"{\"language\":\"bash\",\"code\":\"echo 2\"}"}}]}}]})J");
}

}  // namespace

TEST_CASE("a base URL that is not http(s) is refused when the provider is made") {
  for (const char* url : {"notaurl", "api.openai.com/v1", "ftp://example.com", "file:///etc/passwd"}) {
    INFO(url);
    CHECK(RefusalOf(url).find("is not an http:// or https:// URL") != std::string::npos);
  }
  CHECK(Make("openai", "http://127.0.0.1:8080/v1/") != nullptr);
  CHECK(Make("anthropic", "https://api.anthropic.com") != nullptr);
}

TEST_CASE("a base URL without a host is refused as it was given, credentials redacted") {
  for (std::string url : {"http://", "https:///", "http:///v1"})
    CHECK(RefusalOf(url) == "base URL \"" + url + "\" names no host");
  CHECK(RefusalOf("ftp://user:s3cr3t@host/") ==
        "base URL \"ftp://user:[redacted]@host/\" is not an http:// or https:// URL");
}

TEST_CASE("an empty base URL, given or in the environment, is an error; only one left out means the public API") {
  CHECK(ChooseBaseUrl("anthropic", std::nullopt, nullptr).value() == "");
  CHECK(ChooseBaseUrl("openai", std::nullopt, "http://local/v1").value() == "http://local/v1");
  CHECK(ChooseBaseUrl("openai", std::string("http://flag/v1"), "http://env/v1").value() == "http://flag/v1");
  CHECK(ChooseBaseUrl("anthropic", std::string(), "http://env").status().message() ==
        "--base-url is empty: give the endpoint's URL, or leave the option out for the public API");
  CHECK(ChooseBaseUrl("anthropic", std::nullopt, "").status().message() ==
        "ANTHROPIC_BASE_URL is set but empty: give the endpoint's URL, or unset it for the public API");
  CHECK(ChooseBaseUrl("openai", std::nullopt, "").status().message() ==
        "OPENAI_BASE_URL is set but empty: give the endpoint's URL, or unset it for the public API");
}

TEST_CASE("credentials in a URL are redacted the way API keys are") {
  CHECK(RedactUrl("http://user:s3cr3t@host:8080/v1/messages") == "http://user:[redacted]@host:8080/v1/messages");
  CHECK(RedactUrl("https://tok3n@host/v1") == "https://[redacted]@host/v1");
  CHECK(RedactUrl("http://u:p@ss@host/x@y") == "http://u:[redacted]@host/x@y");
  CHECK(RedactUrl("http://host/v1?to=a@b") == "http://host/v1?to=a@b");
  CHECK(RedactUrl("https://api.anthropic.com/v1/messages") == "https://api.anthropic.com/v1/messages");
  CHECK(RedactUrl("not a url") == "not a url");
}

TEST_CASE("anthropic request carries model, max_tokens, system prompt and both tools with input schemas") {
  auto p = Make("anthropic");
  p->AddUserText("hi");
  json body = p->BuildRequest();
  CHECK(body["model"] == "claude-sonnet-4-5");
  CHECK(body["max_tokens"].get<int>() > 0);
  CHECK(body["system"].get<std::string>().find("Never make up") != std::string::npos);
  REQUIRE(body["tools"].size() == 2);
  CHECK(body["tools"][0]["name"] == "execute_code");
  CHECK(body["tools"][0]["input_schema"]["required"] == json({"language", "code"}));
  CHECK(body["tools"][1]["name"] == "run_python");
  CHECK(body["messages"] == json::parse(R"J([{"role":"user","content":"hi"}])J"));
  CHECK(p->url() == "https://api.anthropic.com/v1/messages");
  auto headers = p->headers();
  CHECK(std::find(headers.begin(), headers.end(), "anthropic-version: 2023-06-01") != headers.end());
  CHECK(std::find(headers.begin(), headers.end(), "x-api-key: k-123") != headers.end());
}

TEST_CASE("anthropic base URL works with or without /v1 and a trailing slash") {
  CHECK(Make("anthropic", "http://127.0.0.1:9/")->url() == "http://127.0.0.1:9/v1/messages");
  CHECK(Make("anthropic", "http://127.0.0.1:9/v1")->url() == "http://127.0.0.1:9/v1/messages");
  CHECK(Make("openai", "http://127.0.0.1:9/v1/")->url() == "http://127.0.0.1:9/v1/chat/completions");
  CHECK(Make("openai")->url() == "https://api.openai.com/v1/chat/completions");
}

TEST_CASE("anthropic tool results all go in one user message, ids matching the tool_use blocks in order") {
  auto p = Make("anthropic");
  p->AddUserText("question");
  auto turn = p->AcceptResponse(AnthropicToolTurn());
  REQUIRE(turn.ok());
  CHECK(turn->text == "Let me compute.");
  REQUIRE(turn->tool_calls.size() == 2);
  CHECK(turn->tool_calls[0].id == "toolu_a");
  CHECK(turn->tool_calls[1].input["language"] == "bash");
  p->AddToolResults({{"toolu_a", "exit_code: 0\n", false}, {"toolu_b", "error: boom", true}});
  const json& m = p->messages();
  REQUIRE(m.size() == 3);
  CHECK(m[1]["role"] == "assistant");
  CHECK(m[1]["content"] == AnthropicToolTurn()["content"]);  // verbatim, text block included
  CHECK(m[2]["role"] == "user");
  REQUIRE(m[2]["content"].size() == 2);
  CHECK(m[2]["content"][0] ==
        json::parse(R"J({"type":"tool_result","tool_use_id":"toolu_a","content":"exit_code: 0\n"})J"));
  CHECK(m[2]["content"][1]["tool_use_id"] == "toolu_b");
  CHECK(m[2]["content"][1]["is_error"] == true);
}

TEST_CASE("openai request starts with the system message and declares function tools") {
  auto p = Make("openai");
  p->AddUserText("hi");
  json body = p->BuildRequest();
  CHECK(body["model"] == "gpt-4o");
  REQUIRE(body["messages"].size() == 2);
  CHECK(body["messages"][0]["role"] == "system");
  CHECK(body["messages"][1] == json::parse(R"J({"role":"user","content":"hi"})J"));
  CHECK(body["tools"][1]["type"] == "function");
  CHECK(body["tools"][1]["function"]["name"] == "run_python");
  CHECK(body["tools"][1]["function"]["parameters"]["required"] == json({"code"}));
  auto headers = p->headers();
  CHECK(std::find(headers.begin(), headers.end(), "Authorization: Bearer k-123") != headers.end());
}

TEST_CASE("openai tool calls are answered by one role tool message each, in order, with tool_call_id") {
  auto p = Make("openai");
  p->AddUserText("q");
  auto turn = p->AcceptResponse(OpenAIToolTurn());
  REQUIRE(turn.ok());
  REQUIRE(turn->tool_calls.size() == 2);
  CHECK(turn->tool_calls[0].input["code"] == "print(1)");
  CHECK(turn->stop_reason == "tool_calls");
  p->AddToolResults({{"call_a", "exit_code: 0\nstdout:\n1\n", false}, {"call_b", "exit_code: 0\n", false}});
  const json& m = p->messages();
  REQUIRE(m.size() == 5);
  CHECK(m[2]["role"] == "assistant");
  CHECK(m[2]["content"].is_null());
  CHECK(m[2]["tool_calls"][1]["function"]["arguments"].is_string());
  CHECK(m[3] == json::parse(R"J({"role":"tool","tool_call_id":"call_a","content":"exit_code: 0\nstdout:\n1\n"})J"));
  CHECK(m[4]["tool_call_id"] == "call_b");
}

TEST_CASE("openai arguments that are not JSON become an error for the model, not a crash") {
  auto p = Make("openai");
  p->AddUserText("q");
  json r = OpenAIToolTurn();
  r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{not json";
  auto turn = p->AcceptResponse(r);
  REQUIRE(turn.ok());
  CHECK(turn->tool_calls[0].input_error.find("not a JSON object") != std::string::npos);
  auto parsed = ParseCodeCall(turn->tool_calls[0]);
  CHECK_FALSE(parsed.ok());
}

TEST_CASE("malformed responses are errors naming what is missing") {
  auto a = Make("anthropic");
  a->AddUserText("q");
  auto no_content =
      a->AcceptResponse(json::parse(R"J({"type":"message","role":"assistant","stop_reason":"end_turn"})J"));
  REQUIRE_FALSE(no_content.ok());
  CHECK(no_content.status().message() == "malformed Anthropic response: no \"content\" array");
  auto no_id = a->AcceptResponse(json::parse(
      R"J({"content":[{"type":"tool_use","name":"run_python","input":{}}],"stop_reason":"tool_use"})J"));
  REQUIRE_FALSE(no_id.ok());
  CHECK(no_id.status().message().find("content[0] (tool_use) has no \"id\"") != std::string::npos);
  auto lying = a->AcceptResponse(json::parse(R"J({"content":[{"type":"text","text":"x"}],"stop_reason":"tool_use"})J"));
  REQUIRE_FALSE(lying.ok());
  CHECK(lying.status().message().find("no tool_use block") != std::string::npos);
  CHECK(a->messages().size() == 1);  // nothing malformed entered the history

  auto o = Make("openai");
  auto no_choices = o->AcceptResponse(json::parse(R"J({"id":"x","object":"chat.completion"})J"));
  REQUIRE_FALSE(no_choices.ok());
  CHECK(no_choices.status().message().find("\"choices\"") != std::string::npos);
  auto no_message = o->AcceptResponse(json::parse(R"J({"choices":[{"finish_reason":"stop"}]})J"));
  REQUIRE_FALSE(no_message.ok());
  CHECK(no_message.status().message().find("\"message\"") != std::string::npos);
}

TEST_CASE("provider error bodies are read in both formats") {
  CHECK(ErrorMessageFromBody(
            R"J({"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}})J") ==
        "authentication_error: invalid x-api-key");
  CHECK(
      ErrorMessageFromBody(R"J({"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}})J") ==
      "invalid_request_error: Incorrect API key provided");
  CHECK(ErrorMessageFromBody("<html>bad gateway</html>") == "<html>bad gateway</html>");
}

TEST_CASE("provider error messages are one line, long bodies clipped") {
  CHECK(ErrorMessageFromBody("<html>\r\n<head><title>500 Internal Server "
                             "Error</title></head>\n<body>\n\t<h1>oops</h1>\n</body>\n</html>\n") ==
        "<html> <head><title>500 Internal Server Error</title></head> <body> <h1>oops</h1> </body> </html>");
  CHECK(ErrorMessageFromBody(
            R"J({"error":{"type":"invalid_request_error","message":"messages: line one\nline two\n"}})J") ==
        "invalid_request_error: messages: line one line two");
  CHECK(ErrorMessageFromBody(" \n ") == "(empty body)");
  std::string page = "<html>" + std::string(100000, 'x') + "\n</html>";
  std::string clipped = ErrorMessageFromBody(page);
  CHECK(clipped.size() <= kMaxErrorTextBytes + 4);
  CHECK(clipped.ends_with(" …"));
  // A clip never splits a character, and escape sequences do not reach the terminal.
  CHECK(OneLine(std::string(9, 'a') + "\xc3\xa9zz", 10) == std::string(9, 'a') + " …");
  CHECK(OneLine("red \x1b[31mtext") == "red [31mtext");
}

TEST_CASE("tool calls are read into language and code, and bad ones are explained to the model") {
  ToolCall python{"1", "run_python", {{"code", "print(1)"}}, ""};
  auto r = ParseCodeCall(python);
  REQUIRE(r.ok());
  CHECK(r->language == "python");
  ToolCall bash{"2", "execute_code", {{"language", "bash"}, {"code", "echo"}}, ""};
  CHECK(ParseCodeCall(bash)->language == "bash");
  ToolCall missing{"3", "execute_code", {{"code", "echo"}}, ""};
  CHECK(ParseCodeCall(missing).status().message() == "execute_code needs a string \"language\" argument");
  // An argument the tool does not have: refused, named, with what the tool takes.
  ToolCall extra{"6", "execute_code", {{"language", "python"}, {"code", "1"}, {"timeout", 600}}, ""};
  CHECK(ParseCodeCall(extra).status().message() ==
        "execute_code has no argument \"timeout\" (it takes: language, code)");
  ToolCall unknown{"4", "rm_rf", json::object(), ""};
  CHECK(ParseCodeCall(unknown).status().message().find("there is no tool named \"rm_rf\"") != std::string::npos);
  // Code over what a call runs is said in the tool's terms, not as the CLI's --file error it would become.
  ToolCall huge{"5", "run_python", {{"code", std::string((16 << 20) + 1, '#')}}, ""};
  CHECK(ParseCodeCall(huge).status().message() ==
        "the code is 16777217 bytes, more than the 16777216 bytes (16 MiB) a call may run");
}

TEST_CASE("terminal-safe text shows C0 and C1 controls escaped and keeps lines, tabs and other characters") {
  CHECK(TerminalSafe("a\x1b]0;t\x07\n\tb") == "a\\x1b]0;t\\x07\n\tb");
  CHECK(TerminalSafe("x\xc2\x9b"
                     "31my \xc2\xa9 \xe2\x82\xac") == "x\\u009b31my \xc2\xa9 \xe2\x82\xac");
}

TEST_CASE("clipping keeps text under the budget untouched") {
  auto c = ClipHeadTail("hello\n", 100, "stdout");
  CHECK(c.text == "hello\n");
  CHECK(c.cut_bytes == 0);
}

TEST_CASE("clipping keeps the head and the tail and says how many bytes were cut") {
  std::string text;
  for (int i = 0; i < 10000; ++i) text += std::to_string(i) + "\n";
  auto c = ClipHeadTail(text, 1000, "stdout");
  CHECK(c.text.rfind("0\n1\n2\n", 0) == 0);
  CHECK(c.text.size() < 1000 + 200);
  CHECK(c.text.find("9999\n") == c.text.size() - 5);
  CHECK(c.cut_bytes > text.size() - 1000);
  CHECK(c.text.find(fmt::format("[... {} bytes of stdout cut here", c.cut_bytes)) != std::string::npos);
  // Whole lines on both sides of the note.
  size_t note = c.text.find("[... ");
  CHECK(c.text[note - 1] == '\n');
  std::string after = c.text.substr(c.text.find('\n', note) + 1);
  CHECK(std::stoi(after) > 9000);
  CHECK(c.cut_bytes + (c.text.size() - (c.text.find('\n', note) + 1 - note)) == text.size());
}

TEST_CASE("tool result says exit_code first, then stdout and stderr") {
  nsbox::Result r;
  r.status = RunStatus::kExit;
  r.exit_code = 1;
  r.stdout_data = "partial\n";
  r.stderr_data = "Traceback (most recent call last):\nNameError: name 'x' is not defined\n";
  std::string text = FormatToolResult(r, 4096);
  CHECK(text == "exit_code: 1\nstdout:\npartial\nstderr:\nTraceback (most recent call last):\n"
                "NameError: name 'x' is not defined\n");
}

TEST_CASE("tool result of a time-out carries a status line and the shell's exit code 124") {
  nsbox::Result r;
  r.status = RunStatus::kTimeout;
  r.reason = "wall-clock limit of 1000 ms reached";
  std::string text = FormatToolResult(r, 4096);
  CHECK(text ==
        "exit_code: 124\nstatus: timeout (wall-clock limit of 1000 ms reached)\nstdout: (empty)\nstderr: (empty)\n");
}

TEST_CASE("tool result budget favours a short stderr so a traceback survives a stdout flood") {
  nsbox::Result r;
  r.status = RunStatus::kExit;
  r.exit_code = 1;
  r.stdout_data = std::string(100000, 'x');
  r.stderr_data = "ValueError: the real problem\n";
  std::string text = FormatToolResult(r, 2000);
  CHECK(text.find("ValueError: the real problem") != std::string::npos);
  CHECK(text.size() < 2000 + 300);
  CHECK(text.find("bytes of stdout cut here") != std::string::npos);
}

TEST_CASE("tool result notes output the sandbox itself dropped, and is always valid UTF-8") {
  nsbox::Result r;
  r.status = RunStatus::kOk;
  r.exit_code = 0;
  r.stdout_data = "caf\xc3";  // cut inside a character
  r.stdout_truncated = true;
  r.stdout_bytes = 5000000;
  std::string text = FormatToolResult(r, 4096);
  CHECK(text.find("caf\xEF\xBF\xBD") != std::string::npos);
  CHECK(text.find("the sandbox kept 4 of the 5000000 bytes the program wrote to stdout") != std::string::npos);
  CHECK_NOTHROW(json(text).dump());
}

TEST_CASE("the sandbox's kept byte count is the program's bytes, not nsbox's cut marker") {
  for (auto [limit, written] : {std::pair<uint64_t, uint64_t>{0, 3}, {1024, 1288890}}) {
    OutputBuffer buf(limit);
    buf.Append(std::string(written, 'z'));
    nsbox::Result r;
    r.status = RunStatus::kExit;
    r.exit_code = 0;
    r.stdout_data = buf.Contents();
    r.stdout_bytes = written;
    r.stdout_truncated = true;
    std::string text = FormatToolResult(r, 1 << 20);
    INFO(text);
    CHECK(text.find(fmt::format("[the sandbox kept {} of the {} bytes the program wrote to stdout]", limit, written)) !=
          std::string::npos);
  }
}

TEST_CASE("retry-after is read as seconds, milliseconds or an HTTP date") {
  CHECK(RetryAfterMs({{"retry-after", "2"}}) == 2000);
  CHECK(RetryAfterMs({{"retry-after", "0.5"}}) == 500);
  CHECK(RetryAfterMs({{"retry-after-ms", "250"}, {"retry-after", "9"}}) == 250);
  CHECK(RetryAfterMs({}) == -1);
  // Clamped to a day: added to the clock, 9e15 ms overflowed it and the retry came at once.
  CHECK(RetryAfterMs({{"retry-after-ms", "9e15"}}) == 86'400'000);
  CHECK(RetryAfterMs({{"retry-after", "inf"}}) == 86'400'000);
  CHECK(RetryAfterMs({{"retry-after", "Fri, 01 Jan 9999 00:00:00 GMT"}}) == 86'400'000);
  // A date in the past, or one not understood, leaves the wait to the normal backoff.
  CHECK(RetryAfterMs({{"retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"}}) == -1);
  CHECK(RetryAfterMs({{"retry-after", "Wed, 32 Foo 2015 07:28:00 GMT"}}) == -1);
  CHECK(RetryAfterMs({{"retry-after", "soon"}}) == -1);
  CHECK(RetryAfterMs({{"retry-after", "Wed, 21 Oct 2015 07:28:00 GMT and more"}}) == -1);
  // A date two minutes ahead, in the preferred form and in both obsolete ones (RFC 9110 5.6.7). Each is made just
  // before it is read; the lower bound leaves a stalled machine ten seconds.
  for (const char* format : {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"}) {
    time_t ahead = std::time(nullptr) + 120;
    struct tm parts;
    gmtime_r(&ahead, &parts);
    char date[64];
    strftime(date, sizeof date, format, &parts);
    INFO(date);
    int64_t ms = RetryAfterMs({{"retry-after", date}});
    CHECK(ms >= 110000);
    CHECK(ms <= 120000);
  }
}

TEST_CASE("the nsbox-http frames carry any bytes and reject what does not add up") {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  WireRequest request{"https://api.example/v1", {"A: b", "X-Odd: caf\xff"}, bytes, 1500};
  auto decoded = DecodeRequest(EncodeRequest(request));
  REQUIRE(decoded.ok());
  CHECK(decoded->url == request.url);
  CHECK(decoded->headers == std::vector<std::string>{"A: b", "X-Odd: caf\xEF\xBF\xBD"});
  CHECK(decoded->body == bytes);
  CHECK(decoded->timeout_ms == 1500);

  WireResponse response;
  response.status = 200;
  response.headers = {{"content-type", "application/json"}};
  response.body = bytes + "\n{\"tail\": 1}\n";
  auto back = DecodeResponse(EncodeResponse(response));
  REQUIRE(back.ok());
  CHECK(back->error == "none");
  CHECK(back->status == 200);
  CHECK(back->headers == response.headers);
  CHECK(back->body == response.body);

  CHECK(DecodeResponse("").status().message() == "nsbox-http's answer: no header line");
  CHECK(DecodeResponse("[1]\n").status().message() == "nsbox-http's answer: the header line is not a JSON object");
  std::string cut = EncodeResponse(response);
  cut.pop_back();
  CHECK(
      DecodeResponse(cut).status().message() ==
      fmt::format("nsbox-http's answer: body_bytes does not match the {} bytes that follow", response.body.size() - 1));
  response.error = "weird";
  CHECK(DecodeResponse(EncodeResponse(response)).status().message() ==
        "nsbox-http's answer: unknown error kind 'weird'");
  CHECK(!DecodeRequest("{\"url\": 5, \"headers\": [], \"body_bytes\": 0}\n").ok());
}

TEST_CASE("execute_code offers the language table's languages, compiled ones included, without aliases") {
  const ToolSpec execute_code = CodeTools().at(0);
  REQUIRE(execute_code.name == kExecuteCodeTool);
  const auto languages = execute_code.input_schema["properties"]["language"]["enum"].get<std::vector<std::string>>();
  for (const char* name : {"python", "bash", "sh", "node", "c", "cpp", "go", "rust", "java", "typescript"}) {
    INFO(name);
    CHECK(std::find(languages.begin(), languages.end(), name) != languages.end());
    CHECK(execute_code.description.find(name) != std::string::npos);
  }
  CHECK(std::find(languages.begin(), languages.end(), "python3") == languages.end());
  CHECK(execute_code.description.find("compile_error") != std::string::npos);
}

TEST_CASE("the system prompt says to run code first and never to make up output") {
  std::string prompt = SystemPrompt();
  CHECK(prompt.find("Never make up") != std::string::npos);
  CHECK(prompt.find("run it with a tool first") != std::string::npos);
  for (const auto& tool : CodeTools()) CHECK(tool.description.size() > 100);
}
