// Helpers for the agent tests: the scripted provider process, skip notes, and whether the real nsbox runtime can run
// here.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "nsbox_config.h"
#include "src/agent/http_client.h"
#include "src/runtime/nsbox_runtime.h"
#include "tests/support/skip.h"

namespace nsbox::testing {

inline std::string SourcePath(const std::string& relative) { return std::string(NSBOX_SOURCE_DIR) + "/" + relative; }

// Says why a test did not run: printed, and appended to $NSBOX_SKIP_FILE for the summary.
inline void NoteSkip(const std::string& test_name, const std::string& reason) {
  nsbox::testing::RecordSkip("agent_tests", test_name, reason);
}

// tests/agent/fake_provider.py, started on a port the OS picks, stopped when this goes away.
class FakeProviderServer {
 public:
  FakeProviderServer() {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], 1);
      std::string script = SourcePath("tests/agent/fake_provider.py");
      execl("/usr/bin/python3", "python3", script.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    std::string line;
    char c;
    pollfd p{fds[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && poll(&p, 1, 10'000) > 0 && read(fds[0], &c, 1) == 1) line += c;
    close(fds[0]);
    REQUIRE(line.rfind("PORT=", 0) == 0);
    port_ = std::stoi(line.substr(5));
  }
  ~FakeProviderServer() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  FakeProviderServer(const FakeProviderServer&) = delete;
  FakeProviderServer& operator=(const FakeProviderServer&) = delete;

  // Base URLs as users give them: Anthropic's without /v1, OpenAI's with it.
  std::string BaseUrl(const std::string& provider) const {
    return "http://127.0.0.1:" + std::to_string(port_) + (provider == "openai" ? "/v1" : "");
  }
  static std::string Key(const std::string& provider) { return "test-" + provider + "-key"; }
  // The rule violations the server saw (each got HTTP 400).
  nlohmann::json Control(const std::string& what) const {
    agent::HttpRequest request;
    request.url = "http://127.0.0.1:" + std::to_string(port_) + "/_control/" + what;
    request.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto result = agent::HttpPost(request);
    REQUIRE(result.error == agent::TransportError::kNone);
    return nlohmann::json::parse(result.response.body);
  }
  nlohmann::json Problems() const { return Control("problems"); }
  nlohmann::json Requests() const { return Control("requests"); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// Empty when the real nsbox (from $NSBOX_BIN) runs a sandboxed Python script; otherwise why not.
inline std::optional<std::string> NsboxRuntimeUnavailable() {
  static std::optional<std::optional<std::string>> cached;
  if (cached) return *cached;
  const char* bin = getenv("NSBOX_BIN");
  if (!bin || !*bin || access(bin, X_OK) != 0) {
    cached = std::optional<std::string>("NSBOX_BIN is not set to an nsbox binary");
    return *cached;
  }
  runtime::NsboxRuntimeOptions options;
  options.nsbox_bin = bin;
  runtime::NsboxRuntime probe(options);
  runtime::ExecuteOptions exec;
  exec.timeout = std::chrono::seconds(20);
  auto result = probe.execute("python", "print(6 * 7)", exec);
  if (!result.ok()) cached = std::optional<std::string>("nsbox cannot run code here: " + result.status().message());
  else if (result->stdout_data != "42\n")
    cached = std::optional<std::string>("nsbox run printed no 42: status " +
                                        std::string(RunStatusName(result->status)) + ", " + result->reason);
  else cached = std::optional<std::string>();
  return *cached;
}

}  // namespace nsbox::testing
