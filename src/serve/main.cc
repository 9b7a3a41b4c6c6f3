// nsbox-serve: `nsbox serve`, the sandbox service. Its own program because libmicrohttpd is linked the ordinary,
// dynamic way (nsbox itself is a static PIE); `nsbox serve` execs it. Options, the listening sockets, the signals
// that end it, and the order of its ending.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/cgroup.h"
#include "sandbox/spec/units.h"
#include "src/cli/image_store.h"
#include "src/cli/parse_error.h"
#include "src/netproxy/allow_list.h"
#include "src/serve/listen.h"
#include "src/serve/service.h"
#include "src/session/state.h"

namespace {

using nsbox::Status;
using nsbox::UniqueFd;
using nsbox::serve::CheckHiddenFromSandboxes;
using nsbox::serve::DefaultRuntimeDir;
using nsbox::serve::ListenTcp;
using nsbox::serve::ListenUnix;
using nsbox::serve::LockStateDir;
using nsbox::serve::MakePrivateDir;
using nsbox::serve::SocketFile;

// nsbox's one code for its own failures, a bad option included (docs/cli.md).
constexpr int kExitFailure = 125;

[[noreturn]] void Fail(int code, const std::string& message) {
  fmt::print(stderr, "nsbox serve: {}\n", nsbox::PrintableLine(message));  // control bytes escaped
  std::exit(code);
}

// `text` with control bytes and backslashes as \xNN: a client's words in the log stay on their line.
std::string Printable(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f || c == '\\') {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // Each connection holds a descriptor and each exec another (its session's connection): the soft limit's usual 1024
  // ran out under a few hundred execs, and a server out of descriptors cannot look its sandboxes up. It goes up to the
  // hard limit, as `nsbox batch` does.
  struct rlimit nofile {};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  CLI::App app(
      "nsbox serve: the sandbox service (HTTP/1.1 + JSON, docs/api.md) on a Unix socket and, with a token, TCP",
      "nsbox serve");
  std::string socket_path, socket_group, state_dir, listen, token_file, nsbox_bin, max_body = "16M", max_file = "64M";
  std::string memory_budget, max_answers = "512M";
  std::vector<std::string> pools, restricted;
  std::vector<uid_t> allow_uids;
  nsbox::serve::ServeConfig config;
  unsigned max_timeout = 600, default_timeout = 60;
  app.add_option("--socket", socket_path,
                 "the Unix socket (default /run/nsbox/api.sock as root, else "
                 "$XDG_RUNTIME_DIR/nsbox/api.sock, or /tmp/nsbox-UID/api.sock without it); mode 0660, peers "
                 "checked by uid");
  app.add_option("--state-dir", state_dir,
                 "where the sandboxes' sessions live (default /run/nsbox/serve-sessions as "
                 "root, else $XDG_RUNTIME_DIR/nsbox/serve-sessions, or "
                 "/tmp/nsbox-UID/serve-sessions without it; one server a directory); what a killed predecessor left "
                 "there is ended at start");
  app.add_option("--socket-group", socket_group,
                 "the socket's group (name or number): its members may connect, each uid also given --allow-uid");
  app.add_option("--listen", listen, "also serve TCP on HOST:PORT (numeric); needs --token-file");
  app.add_option("--token-file", token_file, "bearer tokens for TCP: NAME:TOKEN or TOKEN per line");
  app.add_option("--pool", pools, "keep N ready sandboxes of TEMPLATE (TEMPLATE=N, repeatable)");
  // Counts are whole numbers: "-1" would otherwise wrap around to no cap at all.
  app.add_option("--max-sandboxes", config.max_sandboxes, "sandboxes at most, all clients")
      ->check(nsbox::cli::DecimalIn("a number of sandboxes", 1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-per-client", config.max_per_client, "sandboxes at most per client")
      ->check(nsbox::cli::DecimalIn("a number of sandboxes", 1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-execs-per-sandbox", config.max_execs_per_sandbox,
                 "execs in flight at once in one sandbox (beyond, 429)")
      ->check(nsbox::cli::DecimalIn("a number of execs", 1, 1 << 16))
      ->capture_default_str();
  app.add_option("--max-body", max_body, "largest request body")->capture_default_str();
  app.add_option("--max-held-answers", max_answers,
                 "answers held at once until their clients read them (past it an answer waits up to 10 s, then 503); "
                 "and the room for the answers execs are building, reserved before they run")
      ->capture_default_str();
  app.add_option("--max-file-size", max_file, "largest file written or read through the files API")
      ->capture_default_str();
  app.add_option("--max-timeout", max_timeout, "seconds: the cap of every exec's timeout")
      ->check(nsbox::cli::DecimalIn("a number of seconds", 1, 1 << 30))
      ->capture_default_str();
  app.add_option("--default-timeout", default_timeout, "seconds: an exec's timeout when it gives none")
      ->check(nsbox::cli::DecimalIn("a number of seconds", 1, 1 << 30))
      ->capture_default_str();
  app.add_option("--allow-uid", allow_uids, "a uid besides the server's own that may use the socket (repeatable)")
      ->check(nsbox::cli::DecimalIn("a uid", 0, 4294967294));
  app.add_flag("--allow-network-host", config.allow_network_host,
               "let clients ask for network host (the host's network, the API's TCP port included)");
  app.add_option("--memory-budget", memory_budget, "memory the sandboxes' limits may add up to (default: the host's)");
  app.add_option("--pids-budget", config.pids_budget,
                 "processes the sandboxes' limits may add up to (default: half the host's kernel.pid_max and "
                 "kernel.threads-max, at most 32768)")
      ->check(nsbox::cli::DecimalIn("a number of processes", 1, UINT32_MAX));
  app.add_option("--restricted-hosts", restricted,
                 "the hosts of network restricted (default pypi.org "
                 "files.pythonhosted.org)");
  app.add_option("--nsbox-binary", nsbox_bin, "the nsbox program (set by nsbox serve)")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    const int rc = app.exit(e);
    // Help that could not be written (a full disk, a closed pipe) is a failure, as for every verb.
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      Fail(kExitFailure, fmt::format("writing the help: {}", std::strerror(errno != 0 ? errno : EIO)));
    return rc;
  } catch (const CLI::ParseError& e) {
    // One line, as every other verb's; an option it does not have by name (CLI11: "argument was not expected").
    if (std::string unknown = nsbox::cli::FirstUnknownOption(app, std::vector<std::string>(argv + 1, argv + argc));
        !unknown.empty())
      Fail(kExitFailure, fmt::format("unknown option '{}' (see nsbox serve --help)", Printable(unknown)));
    Fail(kExitFailure, nsbox::cli::ExplainParseError(app, "", "nsbox serve", e.what()));
  }

  // Checks first: nothing is made for a command line that is wrong.
  if (!listen.empty() && token_file.empty())
    Fail(kExitFailure, "--listen needs --token-file: TCP is served only to clients with a bearer token");
  if (listen.empty() && !token_file.empty()) Fail(kExitFailure, "--token-file is for --listen (TCP)");
  if (nsbox_bin.empty()) Fail(kExitFailure, "run as `nsbox serve` (the nsbox program is not known)");
  config.nsbox_bin = nsbox_bin;
  for (const auto& pool : pools) {
    auto eq = pool.find('=');
    int n = -1;
    if (eq != std::string::npos && eq > 0) {
      const std::string count = pool.substr(eq + 1);
      auto [end, error] = std::from_chars(count.data(), count.data() + count.size(), n);
      if (error != std::errc() || end != count.data() + count.size()) n = -1;  // "5abc" is not 5
    }
    if (n < 0 || n > 256) Fail(kExitFailure, fmt::format("--pool '{}': expected TEMPLATE=N (0 to 256)", pool));
    // A template that names no image would only fail in the background, again and again, while the server ran.
    const std::string name = pool.substr(0, eq);
    if (name != "host" && name != "python") {
      if (auto image = nsbox::cli::ResolveImage(name); !image.ok())
        Fail(kExitFailure, fmt::format("--pool '{}': {}", pool, image.status().message()));
    }
    config.pool[name] = n;
  }
  if (config.max_sandboxes == 0 || config.max_per_client == 0 || config.max_execs_per_sandbox == 0)
    Fail(kExitFailure, "--max-sandboxes, --max-per-client and --max-execs-per-sandbox must be at least 1");
  // Given and empty is a mistake, never "left out" (the default would be a different socket and state).
  for (const char* name : {"--socket", "--socket-group", "--state-dir", "--listen", "--token-file", "--nsbox-binary"})
    if (app.count(name) > 0 && app.get_option(name)->as<std::string>().empty())
      Fail(kExitFailure, fmt::format("{}: an empty value (leave the option out instead)", name));
  auto body_cap = nsbox::ParseSize(max_body);
  if (!body_cap.ok()) Fail(kExitFailure, "--max-body: " + body_cap.status().message());
  auto answers_cap = nsbox::ParseSize(max_answers);
  if (!answers_cap.ok()) Fail(kExitFailure, "--max-held-answers: " + answers_cap.status().message());
  config.exec_answer_room_bytes = *answers_cap;
  // Below these every create (a small JSON body) or every file would be refused: a server that could serve nothing.
  if (*body_cap < 4096) Fail(kExitFailure, "--max-body must be at least 4K (a create's body is JSON of its own)");
  auto file_cap = nsbox::ParseSize(max_file);
  if (!file_cap.ok()) Fail(kExitFailure, "--max-file-size: " + file_cap.status().message());
  if (*file_cap == 0) Fail(kExitFailure, "--max-file-size must be above 0");
  config.max_file_bytes = *file_cap;
  if (!memory_budget.empty()) {
    auto budget = nsbox::ParseSize(memory_budget);
    if (!budget.ok()) Fail(kExitFailure, "--memory-budget: " + budget.status().message());
    // 0 meant "the host's memory" inside; given, it is a mistake (as --pids-budget 0 is).
    if (*budget == 0) Fail(kExitFailure, "--memory-budget must be above 0 (leave it out for the host's memory)");
    config.memory_budget_bytes = *budget;
  }
  // The host's processes: every sandbox's pids come out of kernel.pid_max (and threads out of threads-max), with the
  // host's own. The default leaves the host half; a budget past them could never be held.
  uint64_t host_pids = UINT64_MAX;
  for (const char* file : {"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"}) {
    auto text = nsbox::ReadFile(file, 64);
    uint64_t value = 0;
    if (text.ok() && std::from_chars(text->data(), text->data() + text->size(), value).ec == std::errc() && value > 0)
      host_pids = std::min(host_pids, value);
  }
  if (app.count("--pids-budget") == 0) {
    config.pids_budget = std::min<uint64_t>(config.pids_budget, host_pids == UINT64_MAX ? UINT64_MAX : host_pids / 2);
  } else if (config.pids_budget > host_pids) {
    Fail(kExitFailure, fmt::format("--pids-budget {} is more than the host's processes (kernel.pid_max and "
                                   "threads-max: {})",
                                   config.pids_budget, host_pids));
  }
  if (max_timeout == 0 || default_timeout == 0) Fail(kExitFailure, "--max-timeout and --default-timeout must be > 0");
  // The default default (60 s) goes down with a lower --max-timeout; a default given over it is a mistake.
  if (app.count("--default-timeout") > 0 && default_timeout > max_timeout)
    Fail(kExitFailure, fmt::format("--default-timeout {} is over --max-timeout {}", default_timeout, max_timeout));
  config.max_timeout = std::chrono::seconds(max_timeout);
  config.default_timeout = std::chrono::seconds(std::min(default_timeout, max_timeout));
  for (const auto& host : restricted) {
    if (host.empty()) Fail(kExitFailure, "--restricted-hosts: an empty host name (leave it out for the default list)");
    if (std::string problem = nsbox::netproxy::AllowEntryProblem(host); !problem.empty())
      Fail(kExitFailure, fmt::format("--restricted-hosts '{}': {}", host, problem));  // Fail escapes it
  }
  if (!restricted.empty()) config.restricted_hosts = restricted;

  nsbox::serve::AccessConfig access;
  access.allowed_uids.insert(::geteuid());
  for (uid_t uid : allow_uids) access.allowed_uids.insert(uid);
  if (!token_file.empty()) {
    auto tokens = nsbox::serve::ReadTokenFile(token_file);
    if (!tokens.ok()) Fail(kExitFailure, tokens.status().message());
    access.tokens = std::move(*tokens);
  }
  // Several possible clients (uids on the socket, token names on TCP): each may commit only its share of the budgets,
  // as of the sandbox count, so that one client cannot take a budget whole and refuse every other's create.
  std::set<std::string> token_names;
  for (const auto& [token, name] : access.tokens) token_names.insert(name);
  if (access.allowed_uids.size() + token_names.size() > 1 && config.max_sandboxes > 0)
    config.client_budget_share =
        std::min(1.0, static_cast<double>(config.max_per_client) / static_cast<double>(config.max_sandboxes));
  // A budget whose client share cannot hold one sandbox of the default limits would refuse every create that gives
  // none, each time blaming limits the client never sent.
  {
    const nsbox::serve::SandboxSpec defaults;
    const double share = config.client_budget_share;
    const uint64_t memory_share = nsbox::serve::ClientShare(config.memory_budget_bytes, share);
    const uint64_t pids_share = nsbox::serve::ClientShare(config.pids_budget, share);
    if (config.memory_budget_bytes > 0 && memory_share < nsbox::serve::MemoryFootprint(defaults))
      Fail(kExitFailure, fmt::format("--memory-budget: a client's share of it ({} bytes) cannot hold one sandbox of "
                                     "the default limits ({} bytes of memory and tmpfs)",
                                     memory_share, nsbox::serve::MemoryFootprint(defaults)));
    if (pids_share < defaults.pids)
      Fail(kExitFailure, fmt::format("--pids-budget: a client's share of it ({}) cannot hold one sandbox of the "
                                     "default limits ({} pids)",
                                     pids_share, defaults.pids));
    // Nor may the answer room's share be too small for one exec of the default output_limit (every exec would be a
    // 400). A single client has the whole room, and one request alone always fits.
    const uint64_t one_exec = nsbox::serve::ExecAnswerRoom(nsbox::serve::ExecSpec{}, false);
    const uint64_t room_share = nsbox::serve::ClientShare(config.exec_answer_room_bytes, share);
    if (share < 1.0 && room_share < one_exec)
      Fail(kExitFailure, fmt::format("--max-held-answers: a client's share of it ({} bytes) cannot hold the answer of "
                                     "one exec of the default output_limit ({} bytes)",
                                     room_share, one_exec));
  }
  auto openapi = nsbox::ReadFile(nsbox::DataDir() + "/docs/openapi.json", 4 << 20);
  if (openapi.ok()) access.openapi_document = std::move(*openapi);

  // The directories this server makes, removed (when empty) at its end, deepest first; one that was there is left.
  std::vector<std::string> made_dirs;
  auto note_missing = [&made_dirs](const std::string& dir) {
    for (std::string part = dir; part.size() > 1 && ::access(part.c_str(), F_OK) != 0;
         part = part.substr(0, std::max<size_t>(part.rfind('/'), 1)))
      made_dirs.push_back(part);
  };
  auto remove_made_dirs = [&made_dirs] {
    std::sort(made_dirs.begin(), made_dirs.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (const auto& dir : made_dirs) ::rmdir(dir.c_str());
  };
  auto refuse_early = [&](const std::string& message) {
    remove_made_dirs();
    Fail(kExitFailure, message);
  };
  const std::string runtime_dir = DefaultRuntimeDir();
  if (socket_path.empty() || state_dir.empty()) {
    note_missing(runtime_dir);
    if (Status s = MakePrivateDir(runtime_dir, ::geteuid() == 0 ? 0755 : 0700); !s.ok()) refuse_early(s.message());
  }
  if (socket_path.empty()) socket_path = runtime_dir + "/api.sock";
  if (state_dir.empty()) state_dir = runtime_dir + "/serve-sessions";
  if (Status s = CheckHiddenFromSandboxes("--socket", socket_path); !s.ok()) refuse_early(s.message());
  if (Status s = CheckHiddenFromSandboxes("--state-dir", state_dir); !s.ok()) refuse_early(s.message());
  // Every sandbox of the service has limits: a server that could set up none (a user without a delegated cgroup)
  // refuses to start, rather than listen and answer each create with a 500: before it makes its state directory.
  if (auto backend = nsbox::DetectCgroupBackend(); !backend.ok()) {
    std::string why = backend.status().message();
    if (why.ends_with(nsbox::kRunWithoutLimitsHint)) why.resize(why.size() - std::strlen(nsbox::kRunWithoutLimitsHint));
    refuse_early("no sandbox could be set up: " + why);
  }
  note_missing(state_dir);
  if (Status s = nsbox::session::EnsureStateRoot(state_dir); !s.ok()) refuse_early("--state-dir: " + s.message());
  auto state_lock = LockStateDir(state_dir);
  if (!state_lock.ok()) refuse_early(state_lock.status().message());
  // A state directory it cannot write in would fail every create with a 500 while /v1/readyz said ready.
  {
    const std::string probe = state_dir + "/.nsbox-serve-probe";
    if (::mkdir(probe.c_str(), 0700) != 0 && errno != EEXIST)
      refuse_early(fmt::format("--state-dir {}: cannot make a session directory in it: {} ({})", state_dir,
                               std::strerror(errno), nsbox::ErrnoName(errno)));
    ::rmdir(probe.c_str());
  }
  config.state_dir = state_dir;

  // Every thread started from here on has these blocked; the main thread waits for them. SIGHUP too, as the end of
  // the terminal it runs in, unless it came ignored (nohup): then it stays ignored.
  sigset_t ending;
  sigemptyset(&ending);
  sigaddset(&ending, SIGTERM);
  sigaddset(&ending, SIGINT);
  if (struct sigaction hangup{}; ::sigaction(SIGHUP, nullptr, &hangup) != 0 || hangup.sa_handler != SIG_IGN)
    sigaddset(&ending, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &ending, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // A server that cannot listen leaves nothing: its socket, and the directories it made (empty: no session yet).
  SocketFile socket_file;
  auto refuse = [&](const std::string& message) {
    socket_file.Remove();
    remove_made_dirs();
    Fail(kExitFailure, message);
  };
  auto unix_fd = ListenUnix(socket_path, socket_group, &socket_file);
  if (!unix_fd.ok()) refuse(unix_fd.status().message());
  std::optional<UniqueFd> tcp_fd;
  if (!listen.empty()) {
    auto fd = ListenTcp(listen);
    if (!fd.ok()) refuse(fd.status().message());
    tcp_fd = std::move(*fd);
  }

  nsbox::serve::Sandboxes sandboxes(config);
  if (Status started = sandboxes.Start(); !started.ok()) refuse(started.message());
  nsbox::serve::Service service(sandboxes, access);
  nsbox::serve::HttpServerOptions http;
  http.max_body_bytes = *body_cap;
  // The cap on bodies held at once must let one body of the largest size through.
  http.max_buffered_bytes = std::max<uint64_t>(http.max_buffered_bytes, *body_cap);
  http.too_large = [](uint64_t limit) {
    fmt::print(stderr, "nsbox serve: a request body over --max-body ({} bytes) 413\n", limit);
    return nsbox::serve::Service::ErrorResponse(413, "payload_too_large",
                                                fmt::format("the request body is larger than {} bytes", limit));
  };
  http.busy = [](uint64_t limit) {
    fmt::print(stderr, "nsbox serve: the request bodies held at once would pass {} bytes 503\n", limit);
    return nsbox::serve::Service::ErrorResponse(
        503, "unavailable", fmt::format("the server holds {} bytes of request bodies already; try again", limit));
  };
  http.max_answer_bytes = *answers_cap;
  http.answers_busy = [max = http.max_answer_bytes](uint64_t size, uint64_t held) {
    fmt::print(stderr,
               "nsbox serve: a GET's answer of {} bytes found no room among the answers not yet read ({} of "
               "{} bytes held) 503\n",
               size, held, max);
    return nsbox::serve::Service::ErrorResponse(
        503, "unavailable",
        fmt::format("the server holds {} bytes of answers that their clients have not read yet (--max-held-answers "
                    "{}); try again",
                    held, max));
  };
  // One line a request: its status and time; a streamed answer's when its 200 is sent (the stream goes on). The
  // method and path are the client's: shown with control bytes escaped, so that no client writes a line of its own.
  auto log = [](const nsbox::serve::HttpRequest& request, const nsbox::serve::HttpResponse& response,
                std::chrono::steady_clock::time_point started) {
    fmt::print(
        stderr, "nsbox serve: {} {} {}{} {} ms\n", Printable(request.method), Printable(request.path), response.status,
        response.stream ? " (streaming)" : "",
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count());
  };
  http.admit = [&service, log](const nsbox::serve::HttpRequest& head) {
    std::optional<nsbox::serve::HttpResponse> refused = service.Admit(head);
    if (refused) log(head, *refused, std::chrono::steady_clock::now());
    return refused;
  };
  auto handler = [&service, log](const nsbox::serve::HttpRequest& request) {
    const auto started = std::chrono::steady_clock::now();
    nsbox::serve::HttpResponse response = service.Handle(request);
    log(request, response, started);
    return response;
  };
  auto on_unix = nsbox::serve::HttpServer::Start(unix_fd->release(), true, http, handler);
  if (!on_unix.ok()) refuse(on_unix.status().message());
  std::unique_ptr<nsbox::serve::HttpServer> on_tcp;
  if (tcp_fd) {
    auto started = nsbox::serve::HttpServer::Start(tcp_fd->release(), false, http, handler);
    if (!started.ok()) refuse(started.status().message());
    on_tcp = std::move(*started);
  }
  fmt::print(stderr, "nsbox serve: listening on unix:{}{} (state {})\n", socket_path,
             listen.empty() ? "" : " and tcp:" + listen, state_dir);

  int signal_number = 0;
  while (::sigwait(&ending, &signal_number) != 0) {
  }
  // The end: no new connection, no new sandbox; every sandbox ended (their execs answer as killed); then the threads.
  fmt::print(stderr, "nsbox serve: {}: ending every sandbox\n", strsignal(signal_number));
  service.SetShuttingDown();
  (*on_unix)->StopAccepting();
  if (on_tcp) on_tcp->StopAccepting();
  socket_file.Remove();
  sandboxes.EndAll();
  // One deadline for both listeners' answers in progress: the stop stays within the 10 s that they promise.
  const auto answers_until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  (*on_unix)->Stop(answers_until);
  if (on_tcp) on_tcp->Stop(answers_until);
  remove_made_dirs();  // when empty, as the state directory is once every session has ended
  fmt::print(stderr, "nsbox serve: stopped\n");
  return 0;
}
