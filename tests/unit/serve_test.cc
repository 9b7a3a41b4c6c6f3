// The service's pure parts: what a create or exec body may say (and the errors for what it may not), tokens, and
// the workspace file operations the files endpoints use, over a temporary directory.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "src/serve/api_error.h"
#include "src/serve/http_server.h"
#include "src/serve/sandboxes.h"
#include "src/serve/service.h"
#include "src/session/wire.h"
#include "src/session/workspace_copy.h"
#include "tests/support/skip.h"

using nlohmann::json;
using nsbox::UniqueFd;
using nsbox::serve::ApiError;
using nsbox::serve::ParseExecSpec;
using nsbox::serve::ParseSandboxSpec;
using nsbox::serve::ServeConfig;

namespace {

// The HTTP status and message an ApiError from `f` carries.
template <typename F>
std::pair<int, std::string> Refusal(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    return {e.status, e.what()};
  }
  return {0, ""};
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/nsbox-serve-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("a create body: defaults, the operator's caps, and each bad field named", "[serve]") {
  ServeConfig config;
  config.max_idle_timeout_s = 60;
  auto spec = ParseSandboxSpec(json::object(), config);
  CHECK(spec.template_name == "host");
  CHECK(spec.network == json("none"));
  CHECK(spec.memory_bytes == 512ull << 20);
  CHECK_FALSE(spec.limits_given);
  spec = ParseSandboxSpec(json::parse(R"({"limits": {"memory": "64M", "pids": 32, "cpus": 0.5},
                                          "idle_timeout": 3600, "env": {"A_1": "x"},
                                          "network": {"allow": ["pypi.org"]}})"),
                          config);
  CHECK(spec.memory_bytes == 64ull << 20);
  CHECK(spec.pids == 32);
  CHECK(spec.limits_given);
  CHECK(spec.idle_timeout_s == 60);  // capped by the server
  CHECK(spec.env.at("A_1") == "x");

  auto bad = [&](const char* body) { return Refusal([&] { ParseSandboxSpec(json::parse(body), config); }); };
  CHECK(bad(R"({"templat": "host"})") == std::pair<int, std::string>{400, "unknown field 'templat'"});
  CHECK(bad(R"({"limits": {"memory": "lots"}})").second.starts_with("'limits.memory'"));
  CHECK(bad(R"({"limits": {"disk": 1}})").second.find("limits.disk") != std::string::npos);
  CHECK(bad(R"({"network": "wifi"})").first == 400);
  CHECK(bad(R"({"network": {"allow": ["a b"]}})").first == 400);
  CHECK(bad(R"({"env": {"1X": "y"}})").second.find("not a variable name") != std::string::npos);
  CHECK(bad(R"({"idle_timeout": -1})").first == 400);
  // The host's network (and with it every port of the host, the API's too) only when the operator allows it.
  CHECK(bad(R"({"network": "host"})").first == 403);
  config.allow_network_host = true;
  CHECK(ParseSandboxSpec(json::parse(R"({"network": "host"})"), config).network == json("host"));
  // The server keeps labels and env for the sandbox's life, outside every budget: both are bounded.
  json labels = json::object();
  for (int i = 0; i < 65; ++i) labels[fmt::format("k{}", i)] = "v";
  CHECK(Refusal([&] {
          ParseSandboxSpec({{"labels", labels}}, config);
        }).second == "'labels' has 65 entries; at most 64");
  CHECK(Refusal([&] {
          ParseSandboxSpec({{"labels", {{"k", std::string(20000, 'v')}}}}, config);
        }).second == "'labels' holds more than 16384 bytes of names and values");
  CHECK(Refusal([&] { ParseSandboxSpec({{"env", {{"K", std::string(2 << 20, 'v')}}}}, config); }).first == 400);
  CHECK(ParseSandboxSpec({{"labels", {{"team", "eval"}}}}, config).labels.at("team") == "eval");
}

TEST_CASE("an exec body: exactly one program form, the timeout capped, repl only for python", "[serve]") {
  ServeConfig config;
  config.max_timeout = std::chrono::seconds(10);
  auto exec = ParseExecSpec(json::parse(R"({"cmd": "echo hi", "timeout": 99})"), config);
  CHECK(exec.argv == std::vector<std::string>{"/bin/sh", "-c", "echo hi"});
  CHECK(exec.timeout == std::chrono::seconds(10));
  exec = ParseExecSpec(json::parse(R"({"language": "python", "code": "x=1", "repl": true})"), config);
  CHECK(exec.repl);
  CHECK(exec.timeout == std::chrono::seconds(10));  // the default (60) is capped too
  exec = ParseExecSpec(json::parse(R"({"argv": ["python3", "-c", "1"], "stdin": "in", "cwd": "/tmp"})"), config);
  CHECK(exec.has_stdin);
  CHECK(exec.cwd == "/tmp");

  auto bad = [&](const char* body) { return Refusal([&] { ParseExecSpec(json::parse(body), config); }); };
  CHECK(bad(R"({})").second == "give exactly one of 'argv', 'cmd', or 'language' with 'code'");
  CHECK(bad(R"({"cmd": "a", "argv": ["b"]})").first == 400);
  CHECK(bad(R"j({"code": "print(1)"})j").second == "give exactly one of 'argv', 'cmd', or 'language' with 'code'");
  CHECK(bad(R"({"argv": []})").first == 400);
  CHECK(bad(R"({"argv": ["a", 1]})").first == 400);
  CHECK(bad(R"({"cmd": "x", "repl": true})").second.find("'repl' needs") != std::string::npos);
  CHECK(bad(R"({"cmd": "x", "cwd": "rel"})").first == 400);
  CHECK(bad(R"({"cmd": "x", "output_limit": 1000000000})").second.starts_with("'output_limit'"));
  CHECK(bad(R"({"cmd": "x", "timeot": 1})").second == "unknown field 'timeot'");
  // A NUL byte is named in the field the client gave (a cmd is run as /bin/sh's argv).
  CHECK(bad(R"({"cmd": "a\u0000b"})").second == "'cmd' holds a NUL byte");
  CHECK(bad(R"({"argv": ["a\u0000b"]})").second == "'argv' holds a NUL byte");
}

TEST_CASE("an exec body's compile limits: parsed, capped as the timeout is, refused without a language", "[serve]") {
  ServeConfig config;
  config.max_timeout = std::chrono::seconds(10);
  auto exec = ParseExecSpec(json::parse(R"({"language": "c", "code": "int main(){}"})"), config);
  CHECK_FALSE(exec.compile_timeout.has_value());  // the language table's
  CHECK_FALSE(exec.compile_memory.has_value());
  exec = ParseExecSpec(
      json::parse(R"({"language": "c", "code": "int main(){}", "compile_timeout": 2.5, "compile_memory": "64M"})"),
      config);
  CHECK(exec.compile_timeout == std::chrono::milliseconds(2500));
  CHECK(exec.compile_memory == 64ull << 20);
  exec = ParseExecSpec(
      json::parse(R"({"language": "c", "code": "x", "compile_timeout": 99, "compile_memory": 8388608})"), config);
  CHECK(exec.compile_timeout == std::chrono::seconds(10));  // the operator's --max-timeout
  CHECK(exec.compile_memory == 8ull << 20);

  auto bad = [&](const char* body) { return Refusal([&] { ParseExecSpec(json::parse(body), config); }); };
  CHECK(bad(R"({"cmd": "x", "compile_timeout": 5})").second ==
        "'compile_timeout' needs 'language' with a compiled language");
  CHECK(bad(R"({"argv": ["x"], "compile_memory": "1G"})").second ==
        "'compile_memory' needs 'language' with a compiled language");
  CHECK(bad(R"({"language": "c", "code": "x", "compile_timeout": 0})").second ==
        "'compile_timeout' must be a positive number of seconds");
  CHECK(bad(R"({"language": "c", "code": "x", "compile_timeout": "5s"})").first == 400);
  CHECK(bad(R"({"language": "c", "code": "x", "compile_memory": 0})").second == "'compile_memory' must be at least 4M");
  CHECK(bad(R"({"language": "c", "code": "x", "compile_memory": "64K"})").second ==
        "'compile_memory' must be at least 4M");
  CHECK(bad(R"({"language": "c", "code": "x", "compile_memory": "lots"})").second.starts_with("'compile_memory': "));
}

TEST_CASE("a pool refill yields to clients' execs while the pool is at least half full, never past its delay",
          "[serve]") {
  using nsbox::serve::kRefillMaxDelay;
  using nsbox::serve::kRefillQuiet;
  using nsbox::serve::RefillState;
  using nsbox::serve::RefillWaitUntil;
  using std::chrono::milliseconds;
  const auto due = std::chrono::steady_clock::time_point(std::chrono::seconds(1000));
  // A pool of 8 with 7 ready: one was just taken.
  auto state = [&](milliseconds since_due, int execs, milliseconds work_since_due, int ready = 7) {
    return RefillState{.now = due + since_due,
                       .wanted_since = due,
                       .last_client_work = due + work_since_due,
                       .client_execs = execs,
                       .ready = ready,
                       .filling = 0,
                       .target = 8};
  };
  // A quiet server refills at once.
  CHECK_FALSE(RefillWaitUntil(state(milliseconds(0), 0, milliseconds(-60'000))).has_value());
  // Just after a take (the client's first exec is on its way): wait for the quiet period after it.
  CHECK(RefillWaitUntil(state(milliseconds(5), 0, milliseconds(0))) == due + kRefillQuiet);
  CHECK_FALSE(RefillWaitUntil(state(kRefillQuiet, 0, milliseconds(0))).has_value());
  // While an exec runs: look again a quiet period later, but never past the maximum delay, when the refill starts.
  CHECK(RefillWaitUntil(state(milliseconds(100), 1, milliseconds(50))) == due + milliseconds(100) + kRefillQuiet);
  CHECK(RefillWaitUntil(state(kRefillMaxDelay - milliseconds(1), 1, milliseconds(0))) == due + kRefillMaxDelay);
  CHECK_FALSE(RefillWaitUntil(state(kRefillMaxDelay, 3, kRefillMaxDelay)).has_value());
  // Work that never pauses for the quiet period still lets the refill start at the maximum delay.
  CHECK(RefillWaitUntil(state(kRefillMaxDelay - milliseconds(1), 0, kRefillMaxDelay - milliseconds(2))) ==
        due + kRefillMaxDelay);
  // A pool below half its target refills at once, whatever runs: a steady stream of creates must not drain it.
  CHECK(RefillWaitUntil(state(milliseconds(1), 2, milliseconds(1), 4)).has_value());
  CHECK_FALSE(RefillWaitUntil(state(milliseconds(1), 2, milliseconds(1), 3)).has_value());
  // A pool of one always yields (half of one is none).
  CHECK(RefillWaitUntil({.now = due,
                         .wanted_since = due,
                         .last_client_work = due,
                         .client_execs = 1,
                         .ready = 0,
                         .filling = 0,
                         .target = 1})
            .has_value());
}

TEST_CASE("the files API's paths stay in /workspace", "[serve]") {
  using nsbox::serve::WorkspacePath;
  CHECK(WorkspacePath("a/b.txt") == "a/b.txt");
  CHECK(WorkspacePath("/workspace/a") == "a");
  CHECK(Refusal([] { WorkspacePath("../etc/passwd"); }).first == 400);
  CHECK(Refusal([] { WorkspacePath("/etc/passwd"); }).first == 400);
  CHECK(Refusal([] { WorkspacePath(""); }).first == 400);
}

TEST_CASE("a token file: NAME:TOKEN or a bare token, short tokens refused with their line", "[serve]") {
  TempDir dir;
  std::string path = dir.path + "/tokens";
  std::ofstream(path) << "# clients\nalice:0123456789abcdef0123\n\nfedcba9876543210fedc\n";
  auto tokens = nsbox::serve::ReadTokenFile(path);
  REQUIRE(tokens.ok());
  CHECK(tokens->at("0123456789abcdef0123") == "alice");
  CHECK(tokens->at("fedcba9876543210fedc") == "default");
  std::ofstream(path) << "bob:short\n";
  auto refused = nsbox::serve::ReadTokenFile(path);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("line 1") != std::string::npos);
  std::ofstream(path) << "# nothing\n";
  CHECK_FALSE(nsbox::serve::ReadTokenFile(path).ok());
  // One token for two names would make them one client (the later name silently winning); a line naming "default"
  // would share the bare tokens' sandboxes.
  std::ofstream(path) << "alice:0123456789abcdef0123\nmallory:0123456789abcdef0123\n";
  auto twice = nsbox::serve::ReadTokenFile(path);
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().message().find("line 2: this token is on line 1 already") != std::string::npos);
  std::ofstream(path) << "fedcba9876543210fedc\ndefault:0123456789abcdef0123\n";
  auto named_default = nsbox::serve::ReadTokenFile(path);
  REQUIRE_FALSE(named_default.ok());
  CHECK(named_default.status().message().find("line 2: the name 'default'") != std::string::npos);
}

TEST_CASE("workspace files: parents made, links never followed, directories removed whole", "[serve]") {
  TempDir dir;
  TempDir outside;
  std::ofstream(outside.path + "/secret") << "host";
  UniqueFd ws(::open(dir.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  using namespace nsbox::session;

  auto written = WriteWorkspaceFile(ws.get(), "a/b/c.bin", std::string("\0\xff\x01", 3), uid, gid);
  REQUIRE(written.ok());
  CHECK(*written == 3);
  auto read = ReadWorkspaceFile(ws.get(), "a/b/c.bin", 1 << 20);
  REQUIRE(read.ok());
  CHECK(*read == std::string("\0\xff\x01", 3));
  // Each refusal carries its kind, which the service maps to an HTTP status without reading the message.
  CHECK(ReadWorkspaceFile(ws.get(), "a/b/c.bin", 2).status().kind() == nsbox::ErrorKind::kTooLarge);  // over the cap
  // The caller learns the size before the bytes are read (the service makes room for them); a file that grows past
  // it meanwhile is not read on.
  uint64_t announced = 0;
  CHECK(ReadWorkspaceFile(ws.get(), "a/b/c.bin", 1 << 20, [&](uint64_t size) { announced = size; }).ok());
  CHECK(announced == 3);
  auto grown = ReadWorkspaceFile(ws.get(), "a/b/c.bin", 1 << 20, [&](uint64_t) {
    std::ofstream(dir.path + "/a/b/c.bin", std::ios::app) << "more";
  });
  CHECK(grown.status().kind() == nsbox::ErrorKind::kConflict);
  CHECK(grown.status().message() == "refusing /workspace/a/b/c.bin: it grew while being read");
  // A directory is not replaced by a file.
  CHECK(WriteWorkspaceFile(ws.get(), "a/b", "x", uid, gid).status().kind() == nsbox::ErrorKind::kRefused);
  CHECK(ReadWorkspaceFile(ws.get(), "a/none", 1 << 20).status().kind() == nsbox::ErrorKind::kNotFound);
  CHECK(ReadWorkspaceFile(ws.get(), "../x", 1 << 20).status().kind() == nsbox::ErrorKind::kRefused);

  // A link the sandbox made, to a directory outside: neither written through, read through nor listed through.
  REQUIRE(::symlink(outside.path.c_str(), (dir.path + "/out").c_str()) == 0);
  CHECK(WriteWorkspaceFile(ws.get(), "out/secret", "pwned", uid, gid).status().kind() == nsbox::ErrorKind::kRefused);
  CHECK(ReadWorkspaceFile(ws.get(), "out/secret", 1 << 20).status().kind() == nsbox::ErrorKind::kRefused);
  CHECK_FALSE(ListWorkspaceDir(ws.get(), "out").ok());
  auto listed = ListWorkspaceDir(ws.get(), "");
  REQUIRE(listed.ok());
  REQUIRE(listed->entries.size() == 2);
  CHECK_FALSE(listed->truncated);
  CHECK(listed->entries[0].name == "a");
  CHECK(listed->entries[0].type == "dir");
  CHECK(listed->entries[1].type == "symlink");
  // A directory with more entries than the caller reads (the service: 20000) is listed in part, and says so.
  auto part = ListWorkspaceDir(ws.get(), "", 1);
  REQUIRE(part.ok());
  CHECK(part->entries.size() == 1);
  CHECK(part->truncated);

  // Removing the link removes the link; removing a directory removes what it holds.
  CHECK(RemoveWorkspacePath(ws.get(), "out").ok());
  CHECK(nsbox::PathExists(outside.path + "/secret"));
  CHECK(RemoveWorkspacePath(ws.get(), "a").ok());
  CHECK_FALSE(nsbox::PathExists(dir.path + "/a"));
  CHECK_FALSE(RemoveWorkspacePath(ws.get(), "").ok());
  CHECK(RemoveWorkspacePath(ws.get(), "missing").kind() == nsbox::ErrorKind::kNotFound);
  // A directory of more names than one batch (the server reads them a batch at a time), with subdirectories among them.
  for (int i = 0; i < 700; ++i) {
    const std::string sub = dir.path + fmt::format("/many/d{}", i % 3);
    std::filesystem::create_directories(sub);
    std::ofstream(sub + fmt::format("/f{}", i)) << "x";
    std::ofstream(dir.path + fmt::format("/many/g{}", i)) << "x";
  }
  CHECK(RemoveWorkspacePath(ws.get(), "many").ok());
  CHECK_FALSE(nsbox::PathExists(dir.path + "/many"));
}

TEST_CASE("removing a workspace directory leaves a mount below it alone", "[serve]") {
  if (::geteuid() != 0) {
    nsbox::testing::RecordSkip("unit", "removing a workspace directory leaves a mount below it alone",
                               "mounting a tmpfs needs root");
    return;
  }
  TempDir dir;
  REQUIRE(::mkdir((dir.path + "/d").c_str(), 0755) == 0);
  REQUIRE(::mkdir((dir.path + "/d/m").c_str(), 0755) == 0);
  // In a child with a mount namespace of its own: the tmpfs ends with it, whatever the test does.
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", (dir.path + "/d/m").c_str(), "tmpfs", 0, nullptr) != 0)
      ::_exit(2);
    std::ofstream(dir.path + "/d/m/kept") << "x";
    UniqueFd ws(::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto refused = [&](const std::string& kept) {
      nsbox::Status removed = nsbox::session::RemoveWorkspacePath(ws.get(), "d");
      return removed.kind() == nsbox::ErrorKind::kRefused &&
             removed.message().find("a mount point is in it") != std::string::npos && nsbox::PathExists(kept);
    };
    if (!refused(dir.path + "/d/m/kept")) ::_exit(1);
    // A bind of a directory of the same file system (the same device) is a mount point too.
    const std::string point = dir.path + "/d/m", source = dir.path + "/src";
    if (::umount(point.c_str()) != 0 || ::mkdir(source.c_str(), 0755) != 0 ||
        ::mount(source.c_str(), point.c_str(), nullptr, MS_BIND, nullptr) != 0)
      ::_exit(2);
    std::ofstream(dir.path + "/src/kept") << "x";
    ::_exit(refused(dir.path + "/src/kept") ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a Status's kind comes from errno and survives Wrap", "[serve]") {
  CHECK(nsbox::Status::Errno("open(x)", ENOENT).Wrap("reading").kind() == nsbox::ErrorKind::kNotFound);
  CHECK(nsbox::Status::Errno("write(x)", ENOSPC).kind() == nsbox::ErrorKind::kTooLarge);
  CHECK(nsbox::Status::Errno("open(x)", ELOOP).kind() == nsbox::ErrorKind::kRefused);
  CHECK(nsbox::Status::Errno("mount", EPERM).kind() == nsbox::ErrorKind::kOther);
  // A directory the sandbox's code made unreadable, and one it filled while a remove ran: the client's to see.
  CHECK(nsbox::Status::Errno("openat(x)", EACCES).kind() == nsbox::ErrorKind::kRefused);
  CHECK(nsbox::Status::Errno("remove(x)", ENOTEMPTY).kind() == nsbox::ErrorKind::kConflict);
  CHECK(nsbox::Status::Error("plain").kind() == nsbox::ErrorKind::kOther);
  CHECK(nsbox::OkStatus().kind() == nsbox::ErrorKind::kOther);
}

namespace {

// A connection to 127.0.0.1:port that sends `head` and returns the first bytes of the answer, waiting at most wait_ms
// (the socket stays open meanwhile: a body declared and not yet sent keeps its reservation).
struct RawClient {
  UniqueFd fd;
  explicit RawClient(int port) : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  void Send(const std::string& data) { REQUIRE(::write(fd.get(), data.data(), data.size()) == ssize_t(data.size())); }
  std::string Answer(int wait_ms) {
    pollfd p = {fd.get(), POLLIN, 0};
    if (::poll(&p, 1, wait_ms) <= 0) return "";
    char buf[4096];
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
};

// A listening socket on 127.0.0.1 at a port of the kernel's choosing, into `listener`; returns the port.
int ListenOnLoopback(UniqueFd& listener) {
  listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener.get(), 16) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  return ntohs(addr.sin_port);
}

}  // namespace

TEST_CASE("request bodies held at once are capped as their bytes come: past the cap a request is answered 503",
          "[serve]") {
  UniqueFd listener;
  const int port = ListenOnLoopback(listener);
  nsbox::serve::HttpServerOptions options;
  options.max_body_bytes = 100'000;
  options.max_buffered_bytes = 150'000;
  std::atomic<bool> release{false}, taken{false};
  auto server = nsbox::serve::HttpServer::Start(listener.release(), false, options, [&](const auto& request) {
    nsbox::serve::HttpResponse r;
    r.body = std::to_string(request.body.size());
    if (request.path == "/taken") {  // a handler that has its body's worth and then runs long (an exec)
      request.body_taken();
      taken = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return r;
  });
  REQUIRE(server.ok());
  const std::string head = "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 80000\r\n\r\n";
  // A declared length holds nothing until its bytes come: a client that sends none keeps no one else out.
  RawClient silent(port);
  silent.Send(head);
  CHECK(silent.Answer(300).empty());
  RawClient first(port);
  first.Send(head + std::string(79'999, 'x'));
  // Its bytes are held (the server has read them); the last one is waited for.
  auto held = [&](uint64_t bytes) {
    for (int i = 0; i < 1000 && (*server)->HeldBodyBytes() < bytes; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return (*server)->HeldBodyBytes() >= bytes;
  };
  CHECK(held(79'999));
  CHECK(first.Answer(300).empty());
  RawClient second(port);
  second.Send(head + std::string(80'000, 'x'));
  CHECK_THAT(second.Answer(20000), Catch::StartsWith("HTTP/1.1 503"));  // both would pass the cap
  first.Send("x");
  CHECK_THAT(first.Answer(20000), Catch::StartsWith("HTTP/1.1 200") && Catch::EndsWith("80000"));
  RawClient third(port);  // the first's reservation is given back with its answer
  third.Send(head + std::string(80'000, 'y'));
  CHECK_THAT(third.Answer(20000), Catch::StartsWith("HTTP/1.1 200"));
  // A handler that says it has taken its body no longer holds it against the others while it runs.
  RawClient running(port);
  running.Send("POST /taken HTTP/1.1\r\nHost: x\r\nContent-Length: 80000\r\n\r\n" + std::string(80'000, 'z'));
  for (int i = 0; i < 1000 && !taken; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(taken);
  CHECK(running.Answer(300).empty());
  RawClient beside(port);
  beside.Send(head + std::string(80'000, 'w'));
  CHECK_THAT(beside.Answer(20000), Catch::StartsWith("HTTP/1.1 200"));
  release = true;
  CHECK_THAT(running.Answer(20000), Catch::StartsWith("HTTP/1.1 200"));
  (*server)->Stop();
}

// A streamed answer (an exec's output as it comes) was cut off by the idle time-out when its program printed nothing
// for that long: the clients, whose runtimes always stream, lost the result of a quiet program.
TEST_CASE("a streamed answer may be silent longer than the idle time-out; an idle connection still is not",
          "[serve]") {
  UniqueFd listener;
  const int port = ListenOnLoopback(listener);
  nsbox::serve::HttpServerOptions options;
  options.idle_timeout_seconds = 1;
  auto server = nsbox::serve::HttpServer::Start(listener.release(), false, options, [](const auto& request) {
    nsbox::serve::HttpResponse r;
    if (request.path == "/big") {  // a whole answer, far more than the socket buffers hold
      r.body = std::string(32 << 20, 'x');
      return r;
    }
    r.content_type = "application/x-ndjson";
    r.stream = [](nsbox::serve::StreamSink& sink) {
      sink.Write("{\"type\": \"stdout\"}\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      sink.Write("{\"result\": 1}\n");
    };
    return r;
  });
  REQUIRE(server.ok());
  RawClient client(port);
  client.Send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string answer;
  for (int i = 0; i < 20 && answer.find("{\"result\": 1}") == std::string::npos; ++i) answer += client.Answer(500);
  INFO(answer);
  CHECK_THAT(answer, Catch::StartsWith("HTTP/1.1 200") && Catch::Contains("{\"result\": 1}"));
  // The answer done, the same connection left idle is closed after the idle time-out again.
  std::string rest;
  for (int i = 0; i < 10 && rest.find("0\r\n\r\n") == std::string::npos; ++i) rest += client.Answer(200);
  pollfd p = {client.fd.get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 4000) == 1);
  char byte;
  CHECK(::read(client.fd.get(), &byte, 1) == 0);  // end of file: the server closed it
  // A client that asks for a whole answer and reads nothing is dropped after the idle time-out too: it does not hold
  // a thread and the answer's memory for ever. (Read afterwards, the answer stops short.)
  RawClient stalled(port);
  stalled.Send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  size_t got = 0;
  char buf[65536];
  for (;;) {
    pollfd q = {stalled.fd.get(), POLLIN, 0};
    if (::poll(&q, 1, 2000) <= 0) break;
    ssize_t n = ::read(stalled.fd.get(), buf, sizeof buf);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  INFO("read " << got << " bytes");
  CHECK(got < (32u << 20));
  (*server)->Stop();
}

TEST_CASE("the session wire reader: a long line in small pieces, lines sharing a read, and a stop", "[serve]") {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  UniqueFd ours(pair[0]), theirs(pair[1]);
  const std::string big = json{{"data", std::string(5 << 20, 'x')}}.dump() + "\n";
  std::thread writer([&] {
    for (size_t at = 0; at < big.size(); at += 1000) {
      const std::string piece = big.substr(at, 1000);
      if (::write(theirs.get(), piece.data(), piece.size()) != ssize_t(piece.size())) return;
    }
    const std::string two = "{\"n\": 1}\n{\"n\": 2}\n{\"half\": ";
    (void)!::write(theirs.get(), two.data(), two.size());
  });
  nsbox::session::MessageReader reader(ours.get(), 64 << 20);
  auto first = reader.Next();
  REQUIRE(first.ok());
  CHECK((*first)["data"].get<std::string>().size() == (5u << 20));
  CHECK((*reader.Next())["n"] == 1);
  CHECK((*reader.Next())["n"] == 2);
  writer.join();
  // The third line never ends: a stop that says so gives up on it instead of waiting on.
  int asked = 0;
  reader.SetStop([&] { return ++asked > 0; });
  auto cut = reader.Next();
  CHECK_FALSE(cut.ok());
  CHECK(cut.status().message() == "stopped waiting for the session's answer");
}
