// Sessions without a sandbox: workspace path rules, session names, and the changed-file diff over a temp directory.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/result_json.h"
#include "sandbox/workspace_snapshot.h"
#include "src/session/repl.h"
#include "src/session/state.h"
#include "src/session/workspace_copy.h"
#include "tests/support/as_user.h"

using nsbox::Status;
using nsbox::UniqueFd;

TEST_CASE("cp paths are taken relative to /workspace and may not leave it", "[session]") {
  using nsbox::session::WorkspaceRelativePath;
  CHECK(*WorkspaceRelativePath("out.txt") == "out.txt");
  CHECK(*WorkspaceRelativePath("/workspace/a/b.txt") == "a/b.txt");
  CHECK(*WorkspaceRelativePath("/workspace") == "");
  CHECK(*WorkspaceRelativePath(".") == "");  // `cp f S:.`, as `cp f S:` and `cp f S:/workspace`
  CHECK(*WorkspaceRelativePath("/workspace/") == "");
  CHECK(*WorkspaceRelativePath("a//b") == "a/b");
  CHECK(*WorkspaceRelativePath("dir/") == "dir/");
  CHECK(!WorkspaceRelativePath("/etc/shadow").ok());
  CHECK(!WorkspaceRelativePath("/workspacefoo/x").ok());
  CHECK(!WorkspaceRelativePath("../etc/passwd").ok());
  CHECK(!WorkspaceRelativePath("a/../../b").ok());
  CHECK(!WorkspaceRelativePath("./a").ok());
  CHECK(!WorkspaceRelativePath("a/.").ok());
}

TEST_CASE("paths split into their non-empty components; '.' and '..' are refused, not resolved", "[session]") {
  std::vector<std::string_view> parts{"stale"};
  CHECK(nsbox::SplitPathComponents("//a///b/", &parts));
  CHECK(parts == std::vector<std::string_view>{"a", "b"});
  CHECK(nsbox::SplitPathComponents("", &parts));
  CHECK(parts.empty());
  CHECK(nsbox::SplitPathComponents("a/..b/c.", &parts));
  CHECK(parts == std::vector<std::string_view>{"a", "..b", "c."});
  CHECK(!nsbox::SplitPathComponents("a/../b", &parts));
  CHECK(!nsbox::SplitPathComponents("/x/.", &parts));
}

TEST_CASE("session names are short and plain", "[session]") {
  using nsbox::session::ValidSessionName;
  CHECK(ValidSessionName("agent-1.work_2"));
  CHECK(!ValidSessionName(""));
  CHECK(!ValidSessionName("-x"));
  CHECK(!ValidSessionName(".hidden"));
  CHECK(!ValidSessionName("a/b"));
  CHECK(!ValidSessionName("a:b"));
  CHECK(!ValidSessionName(std::string(65, 'a')));
  std::string id = nsbox::session::NewSessionId();
  CHECK(id.size() == 13);
  CHECK(id[0] == 's');
  CHECK(ValidSessionName(id));
}

TEST_CASE("the changed-file list has new and modified regular files, not links, and not nsbox's code files",
          "[session]") {
  char tmpl[] = "/tmp/nsbox-snapshot-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::filesystem::path root = tmpl;
  std::ofstream(root / "same.txt") << "same";
  std::ofstream(root / "edit.txt") << "old";
  UniqueFd dir(::open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(dir);
  auto before = nsbox::SnapshotWorkspace(dir.get());
  REQUIRE(before.ok());
  std::filesystem::create_directories(root / "sub" / "deep");
  std::ofstream(root / "sub" / "deep" / "new.bin") << "12345";
  std::ofstream(root / "edit.txt", std::ios::app) << "er";
  std::ofstream(root / ".nsbox-exec-1-2.py") << "print(1)";
  std::filesystem::create_symlink("/etc/passwd", root / "link");
  auto after = nsbox::SnapshotWorkspace(dir.get());
  REQUIRE(after.ok());
  auto changed = nsbox::ChangedFiles(*before, *after);
  REQUIRE(changed.size() == 2);
  CHECK(changed[0].path == "edit.txt");
  CHECK(changed[0].size == 5);
  CHECK(changed[1].path == "sub/deep/new.bin");
  CHECK(changed[1].size == 5);
  auto capped = nsbox::SnapshotWorkspace(dir.get(), 2);
  REQUIRE(capped.ok());
  CHECK(capped->truncated);
  // Names left out still count: a tree of hidden names is not a way round the cap.
  for (int i = 0; i < 5; ++i) std::ofstream(root / fmt::format(".nsbox-hidden-{}", i));
  std::filesystem::remove_all(root / "sub");
  capped = nsbox::SnapshotWorkspace(dir.get(), 5);
  REQUIRE(capped.ok());
  CHECK(capped->truncated);
  std::filesystem::remove_all(root);
}

TEST_CASE("the workspace walk stops at 64 levels and at 16 MiB of paths: the sandbox builds the tree, the supervisor "
          "walks it outside its limits",
          "[session]") {
  char tmpl[] = "/tmp/nsbox-snapshot-bounds-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::filesystem::path root = tmpl;
  std::filesystem::path deep = root;
  for (int level = 0; level < 70; ++level) deep /= "d";
  std::filesystem::create_directories(deep);
  std::ofstream(deep / "bottom.txt") << "x";
  std::ofstream(root / "top.txt") << "x";
  UniqueFd dir(::open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto walked = nsbox::SnapshotWorkspace(dir.get());
  REQUIRE(walked.ok());
  CHECK(walked->truncated);
  CHECK(walked->files.count("top.txt") == 1);
  for (const auto& [path, stamp] : walked->files) CHECK(std::count(path.begin(), path.end(), '/') <= 64);
  std::filesystem::remove_all(root / "d");
  // 9000 files whose paths are 2 KB each (8 levels of 255-byte names): 18 MB of paths, past the bound.
  std::filesystem::path long_dir = root;
  for (int level = 0; level < 8; ++level) long_dir /= std::string(255, 'a' + level);
  std::filesystem::create_directories(long_dir);
  for (int i = 0; i < 9000; ++i) std::ofstream(long_dir / ("f" + std::to_string(i)));
  walked = nsbox::SnapshotWorkspace(dir.get());
  REQUIRE(walked.ok());
  CHECK(walked->truncated);
  size_t bytes = 0;
  for (const auto& [path, stamp] : walked->files) bytes += path.size();
  CHECK(bytes <= (16u << 20));
  std::filesystem::remove_all(root);
}

TEST_CASE(
    "the snapshots of calls running at once hold no more than their process's budget, and a call short of it "
    "reports a truncated list, never a file it did not change",
    "[session]") {
  char tmpl[] = "/tmp/nsbox-snapshot-budget-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::filesystem::path root = tmpl;
  // 400 files of 100-byte names: about 78 KB of snapshot each walk.
  for (int i = 0; i < 400; ++i) std::ofstream(root / fmt::format("{:0>100}", i)) << "x";
  auto open_root = [&] { return UniqueFd(::open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC)); };
  auto changed = [](const nsbox::session::ChangedFilesReport& report) {
    nsbox::Result result;
    report.AddTo(result);
    return nsbox::ResultToJson(result);
  };
  nsbox::session::SnapshotBudget budget(180 << 10);
  {
    auto first = std::make_unique<nsbox::session::ChangedFilesReport>(open_root(), budget);
    const size_t one_walk = budget.held();  // what a whole walk of the tree holds
    CHECK(one_walk > 70 << 10);
    CHECK(one_walk < 90 << 10);
    auto second = std::make_unique<nsbox::session::ChangedFilesReport>(open_root(), budget);
    CHECK(budget.held() == 2 * one_walk);
    auto third = std::make_unique<nsbox::session::ChangedFilesReport>(open_root(), budget);  // gets what is left
    CHECK(budget.held() <= 180 << 10);
    std::ofstream(root / "made-by-the-call") << "new";
    auto third_json = changed(*third);
    CHECK(third_json["changed_files_truncated"] == true);
    for (const auto& file : third_json["changed_files"]) CHECK(file["path"] == "/workspace/made-by-the-call");
    third.reset();
    second.reset();
    CHECK(budget.held() == one_walk);
    // Alone again, the first call has room for its walk after: a whole list.
    auto first_json = changed(*first);
    CHECK(first_json["changed_files"] ==
          nlohmann::json::parse(R"([{"path": "/workspace/made-by-the-call", "size": 3}])"));
    CHECK_FALSE(first_json.contains("changed_files_truncated"));
  }
  CHECK(budget.held() == 0);
  // Out of budget altogether: nothing walked, nothing listed, the list said to be truncated.
  CHECK(budget.Reserve(180 << 10) == 180 << 10);
  {
    nsbox::session::ChangedFilesReport starved(open_root(), budget);
    std::ofstream(root / "another") << "new";
    auto json = changed(starved);
    CHECK(json["changed_files"].empty());
    CHECK(json["changed_files_truncated"] == true);
  }
  budget.Release(180 << 10);
  CHECK(budget.held() == 0);
  std::filesystem::remove_all(root);
}

// A session is found by its id (its own directory, read alone) or by its name (every record listed); a record whose
// supervisor is not alive is no session, and its directory goes.
TEST_CASE("sessions are found by id or by name; only live ones", "[session]") {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/nsbox-session-state-test-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const uint64_t my_start = nsbox::session::ProcessStartTime(::getpid());
  REQUIRE(my_start != 0);
  auto write_record = [&](const std::string& id, const std::string& name, uint64_t start) {
    fs::create_directories(root + "/" + id);
    nlohmann::json record = {{"id", id}, {"name", name}, {"supervisor_pid", ::getpid()},
                             {"supervisor_start_time", start}};
    std::ofstream(root + "/" + id + "/session.json") << record.dump();
  };
  write_record("s0123456789ab", "plain", my_start);
  write_record("s00000000000a", "sabcdefabcdef", my_start);  // a name shaped like an id
  write_record("s00000000000d", "dead", my_start + 1);        // not this process's start: a dead supervisor

  auto by_id = nsbox::session::FindSession(root, "s0123456789ab");
  REQUIRE(by_id.ok());
  CHECK(by_id->name() == "plain");
  CHECK(by_id->dir == root + "/s0123456789ab");
  auto by_name = nsbox::session::FindSession(root, "plain");
  REQUIRE(by_name.ok());
  CHECK(by_name->id() == "s0123456789ab");
  auto id_shaped_name = nsbox::session::FindSession(root, "sabcdefabcdef");
  REQUIRE(id_shaped_name.ok());
  CHECK(id_shaped_name->id() == "s00000000000a");
  auto dead = nsbox::session::FindSession(root, "s00000000000d");
  CHECK(!dead.ok());
  CHECK(!fs::exists(root + "/s00000000000d"));
  CHECK(!nsbox::session::FindSession(root, "s0123456789ac").ok());
  CHECK(!nsbox::session::FindSession(root, "../s0123456789ab").ok());
  // A record that is not JSON: kept while it could be a create in progress, removed once a minute old.
  for (const char* id : {"s00000000000e", "s00000000000f"}) {
    fs::create_directories(root + "/" + id);
    std::ofstream(root + "/" + id + "/session.json") << "{\"supervisor_pid\": 1,";
  }
  const struct timespec old_times[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (root + "/s00000000000f").c_str(), old_times, 0) == 0);
  CHECK(nsbox::session::ListSessions(root).size() == 2);  // the two live ones
  CHECK(fs::exists(root + "/s00000000000e"));
  CHECK(!fs::exists(root + "/s00000000000f"));
  fs::remove_all(root);
}

// A process out of descriptors cannot read a record or /proc: that says nothing of the session, which a busy server
// (hundreds of execs in flight) once took for ended, removing a live session's directory and leaving it running.
TEST_CASE("a session that cannot be read for want of descriptors is neither found nor taken for ended", "[session]") {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/nsbox-session-state-test-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const std::string dir = root + "/s0123456789ab";
  fs::create_directories(dir);
  nlohmann::json record = {{"id", "s0123456789ab"},
                           {"name", "busy"},
                           {"supervisor_pid", ::getpid()},
                           {"supervisor_start_time", nsbox::session::ProcessStartTime(::getpid())}};
  std::ofstream(dir + "/session.json") << record.dump();
  const struct timespec old_times[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
  REQUIRE(::utimensat(AT_FDCWD, dir.c_str(), old_times, 0) == 0);  // past the minute a record may take to appear

  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Every descriptor from here on fails with EMFILE: the limit is the lowest free one.
    int lowest = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct rlimit nofile = {static_cast<rlim_t>(lowest), static_cast<rlim_t>(lowest)};
    if (lowest < 0 || ::close(lowest) != 0 || ::setrlimit(RLIMIT_NOFILE, &nofile) != 0) ::_exit(3);
    auto found = nsbox::session::FindSession(root, "s0123456789ab");
    if (found.ok()) ::_exit(4);
    if (found.status().kind() == nsbox::ErrorKind::kNotFound) ::_exit(5);  // taken for ended
    if (found.status().message().find("EMFILE") == std::string::npos) ::_exit(6);
    ::_exit(nsbox::session::ListSessions(root).empty() ? 0 : 7);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // Left as it was, and found again once descriptors are there.
  CHECK(fs::exists(dir + "/session.json"));
  auto found = nsbox::session::FindSession(root, "s0123456789ab");
  REQUIRE(found.ok());
  CHECK(found->name() == "busy");
  fs::remove_all(root);
}

namespace {

// A fresh directory under /tmp (root-owned, sticky), removed with what it holds at the end of the test.
struct TempTree {
  std::string path;
  TempTree() {
    char templ[] = "/tmp/nsbox-state-test-XXXXXX";
    path = ::mkdtemp(templ);
  }
  ~TempTree() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("a state directory is refused when another user could replace a directory on its way", "[session]") {
  using nsbox::session::CheckStateRoot;
  TempTree tree;
  const uid_t me = ::geteuid();
  const std::string root = tree.path + "/nsbox-1000/sessions";
  std::filesystem::create_directories(root);
  ::chmod((tree.path + "/nsbox-1000").c_str(), 0700);
  ::chmod(root.c_str(), 0700);
  REQUIRE(CheckStateRoot(root, me).ok());

  SECTION("a 0700 root of the user's own is accepted, also through a link to it") {
    std::filesystem::create_directory_symlink(root, tree.path + "/link");
    CHECK(CheckStateRoot(tree.path + "/link", me).ok());
  }
  SECTION("a directory on the way that others may write (not root's sticky /tmp) is refused") {
    ::chmod((tree.path + "/nsbox-1000").c_str(), 0777);
    auto s = CheckStateRoot(root, me);
    REQUIRE(!s.ok());
    CHECK_THAT(s.message(), Catch::Contains("writable by other users"));
  }
  SECTION("the root itself must be 0700") {
    ::chmod(root.c_str(), 0755);
    CHECK(!CheckStateRoot(root, me).ok());
  }
  if (me == 0) {
    SECTION("a directory on the way that belongs to another user is refused (a pre-made /tmp/nsbox-UID)") {
      REQUIRE(::chown((tree.path + "/nsbox-1000").c_str(), 12345, 12345) == 0);
      auto s = CheckStateRoot(root, me);
      REQUIRE(!s.ok());
      CHECK_THAT(s.message(), Catch::Contains("belongs to uid 12345"));
    }
    SECTION("a root owned by another user is refused for this one") {
      CHECK(!CheckStateRoot(root, 12345).ok());
    }
  }
}

// Another user made the user's /tmp/nsbox-UID (0711, theirs) before the user's first session: the create failed with
// a bare EACCES from mkdir, and `session ls` printed an empty table.
TEST_CASE("a state directory not made yet, under a directory of another user's, is refused naming it", "[session]") {
  if (::geteuid() != 0) return;  // making a directory another uid's needs root
  TempTree tree;
  const std::string squatted = tree.path + "/nsbox-1004";
  REQUIRE(::mkdir(squatted.c_str(), 0711) == 0);
  REQUIRE(::chown(squatted.c_str(), 12345, 12345) == 0);
  const std::string root = squatted + "/sessions";
  for (const auto& s : {nsbox::session::EnsureStateRoot(root), nsbox::session::CheckStateRootIfPresent(root)}) {
    REQUIRE(!s.ok());
    CHECK_THAT(s.message(), Catch::Contains(squatted + " belongs to uid 12345"));
    CHECK_THAT(s.message(), Catch::Contains("NSBOX_STATE_DIR"));
  }
  CHECK_FALSE(std::filesystem::exists(root));
  // Where nothing on the way is another's, a state directory that does not exist yet is fine to look at.
  CHECK(nsbox::session::CheckStateRootIfPresent(tree.path + "/mine/sessions").ok());
}

// Another user's link at /tmp/nsbox-UID was taken, its target being the user's own: they could later point it at a
// directory of theirs, and the user's nsbox would list (and kill) what records there named.
TEST_CASE("a state directory reached through another user's symbolic link is refused naming it", "[session]") {
  if (::geteuid() != 0) return;  // a link of another uid's needs root
  TempTree tree;
  const std::string mine = tree.path + "/mine";
  REQUIRE(::mkdir(mine.c_str(), 0700) == 0);
  const std::string link = tree.path + "/nsbox-1004";
  REQUIRE(::symlink(mine.c_str(), link.c_str()) == 0);
  REQUIRE(::lchown(link.c_str(), 12345, 12345) == 0);
  for (const auto& s : {nsbox::session::EnsureStateRoot(link + "/sessions"),
                        nsbox::session::CheckStateRootIfPresent(link + "/sessions")}) {
    REQUIRE(!s.ok());
    CHECK_THAT(s.message(), Catch::Contains(link + " is a symbolic link made by uid 12345"));
  }
  CHECK_FALSE(std::filesystem::exists(mine + "/sessions"));
}

// Below another user's 0700 /tmp/nsbox-UID nothing can be looked at: the user got a bare EACCES from realpath.
TEST_CASE("a state directory under another user's unreadable directory names that directory", "[session]") {
  if (::geteuid() != 0) return;  // acting as two other uids needs root
  TempTree tree;
  ::chmod(tree.path.c_str(), 0755);
  const std::string squatted = tree.path + "/nsbox-12346";
  REQUIRE(::mkdir(squatted.c_str(), 0700) == 0);
  REQUIRE(::chown(squatted.c_str(), 12345, 12345) == 0);
  auto message = nsbox::testing::AsUser(
      12346, 12346, [&] { return nsbox::session::CheckStateRootIfPresent(squatted + "/sessions").message(); });
  REQUIRE(message);
  CHECK_THAT(*message, Catch::Contains(squatted + " belongs to uid 12345, not to uid 12346 or root"));
}

// A record in a directory the user did not make names processes of someone else's choosing: listing the sessions
// killed the "pid 1" of a forged record whose supervisor was dead, any process of the user's.
TEST_CASE("a session record the user did not write is neither listed nor acted on", "[session]") {
  if (::geteuid() != 0) return;  // files of another uid's need root
  TempTree tree;
  const std::string root = tree.path + "/sessions";
  REQUIRE(::mkdir(root.c_str(), 0700) == 0);
  pid_t victim = ::fork();
  if (victim == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string forged = root + "/saaaaaaaaaaaa";
  REQUIRE(::mkdir(forged.c_str(), 0700) == 0);
  REQUIRE(nsbox::WriteFile(forged + "/session.json",
                           fmt::format(R"({{"id": "saaaaaaaaaaaa", "supervisor_pid": 999999, "supervisor_start_time": 1,
                                          "pid1": {}, "pid1_start_time": {}}})",
                                       victim, nsbox::session::ProcessStartTime(victim)))
              .ok());
  for (const std::string& path : {forged + "/session.json", forged}) REQUIRE(::chown(path.c_str(), 12345, 12345) == 0);
  CHECK(nsbox::session::ListSessions(root).empty());
  CHECK_FALSE(nsbox::session::FindSession(root, "saaaaaaaaaaaa").ok());
  int status = 0;
  CHECK(::waitpid(victim, &status, WNOHANG) == 0);  // still running
  CHECK(std::filesystem::exists(forged + "/session.json"));
  ::kill(victim, SIGKILL);
  ::waitpid(victim, &status, 0);
}

TEST_CASE("a session socket served by another uid is refused before anything is sent", "[session]") {
  if (::geteuid() != 0) {
    WARN("SKIP: needs root to serve a socket as another uid");
    return;
  }
  TempTree tree;
  const std::string dir = tree.path + "/sabcdefabcdef";
  std::filesystem::create_directory(dir);
  ::chmod(tree.path.c_str(), 0755);
  ::chmod(dir.c_str(), 0777);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t server = ::fork();
  REQUIRE(server >= 0);
  if (server == 0) {  // another user's "supervisor": listens, and would read whatever it is sent
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(1);
    int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::string path = dir + "/socket";
    memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::bind(sock, reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0 || ::listen(sock, 1) != 0)
      ::_exit(2);
    (void)!::write(ready[1], "x", 1);
    int client = ::accept(sock, nullptr, nullptr);
    char buf[64];
    ssize_t n = client >= 0 ? ::read(client, buf, sizeof buf) : -1;
    ::_exit(n > 0 ? 3 : 0);  // 3: the client sent something to a stranger
  }
  ::close(ready[1]);
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  nsbox::session::SessionRecord record{nlohmann::json{{"id", "sabcdefabcdef"}}, dir};
  auto answer = nsbox::session::Request(record, {{"op", "exec"}, {"code", "secret"}});
  REQUIRE(!answer.ok());
  CHECK_THAT(answer.status().message(), Catch::Contains("is served by uid 65534"));
  int status = 0;
  REQUIRE(::waitpid(server, &status, 0) == server);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {

// A listening unix socket at DIR/socket, in this process: the kernel completes connections into its backlog (and
// takes their data) whether or not anyone accepts them, as for a stopped supervisor.
UniqueFd ListenAt(const std::string& dir, int backlog) {
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::string path = dir + "/socket";
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::bind(sock.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(sock.get(), backlog) != 0)
    return UniqueFd();
  return sock;
}

nsbox::session::SessionRecord RecordAt(const std::string& dir, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json record = {{"id", "sabcdefabcdef"}, {"name", "quiet"}};
  record.update(extra);
  return {record, dir};
}

}  // namespace

TEST_CASE("a request that is taken and never answered ends at its deadline: delivered, unanswered", "[session]") {
  TempTree tree;
  const std::string dir = tree.path + "/sabcdefabcdef";
  std::filesystem::create_directory(dir);
  UniqueFd listener = ListenAt(dir, 4);
  REQUIRE(listener);
  nsbox::session::RequestOutcome outcome;
  auto answer = nsbox::session::Request(RecordAt(dir), {{"op", "exec"}},
                                        {.deadline = std::chrono::milliseconds(300), .outcome = &outcome});
  REQUIRE(!answer.ok());
  CHECK(answer.status().message() ==
        "session sabcdefabcdef (quiet): its supervisor did not answer the exec request within 300 ms");
  CHECK(outcome.delivered);
  CHECK(!outcome.answered);
  CHECK(outcome.timed_out);
}

TEST_CASE("a connect to a listener whose backlog stays full ends at its deadline, with nothing sent", "[session]") {
  TempTree tree;
  const std::string dir = tree.path + "/sabcdefabcdef";
  std::filesystem::create_directory(dir);
  UniqueFd listener = ListenAt(dir, 0);
  REQUIRE(listener);
  // Backlog 0 holds one pending connection: this one fills it.
  std::vector<UniqueFd> fillers;
  for (int i = 0; i < 4; ++i) {
    UniqueFd filler(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    struct sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::string path = dir + "/socket";
    memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(filler.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0) break;
    fillers.push_back(std::move(filler));
  }
  REQUIRE(!fillers.empty());
  nsbox::session::RequestOutcome outcome;
  auto answer = nsbox::session::Request(RecordAt(dir), {{"op", "info"}},
                                        {.deadline = std::chrono::milliseconds(300), .outcome = &outcome});
  REQUIRE(!answer.ok());
  CHECK_THAT(answer.status().message(), Catch::Contains("did not accept the connection within 300 ms"));
  CHECK(!outcome.delivered);
  CHECK(outcome.timed_out);
}

TEST_CASE("a supervisor that reads the request and goes away is a delivered request that was never answered",
          "[session]") {
  TempTree tree;
  const std::string dir = tree.path + "/sabcdefabcdef";
  std::filesystem::create_directory(dir);
  UniqueFd listener = ListenAt(dir, 4);
  REQUIRE(listener);
  std::thread server([&] {
    UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    char buffer[256];
    ssize_t n;
    while (conn && (n = ::read(conn.get(), buffer, sizeof buffer)) > 0 &&
           !memchr(buffer, '\n', static_cast<size_t>(n))) {
    }
  });
  nsbox::session::RequestOutcome outcome;
  auto answer = nsbox::session::Request(RecordAt(dir), {{"op", "exec"}},
                                        {.deadline = std::chrono::seconds(30), .outcome = &outcome});
  server.join();
  REQUIRE(!answer.ok());
  CHECK_THAT(answer.status().message(), Catch::Contains("ended before answering the exec request"));
  CHECK(outcome.delivered);
  CHECK(!outcome.answered);
  CHECK(!outcome.timed_out);
}

namespace {

// A child that waits to be killed; optionally as another uid.
pid_t SleepingChild(uid_t uid = ::geteuid()) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  pid_t child = ::fork();
  if (child == 0) {
    if (uid != ::geteuid() && (::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0)) ::_exit(1);
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c;
  bool ok = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  return ok ? child : -1;
}

bool StillRunning(pid_t child) {
  int status;
  return ::waitpid(child, &status, WNOHANG) == 0;
}

}  // namespace

TEST_CASE("rm's forced end kills the recorded supervisor, and nothing that is not verifiably it", "[session]") {
  TempTree tree;
  const std::string dir = tree.path + "/sabcdefabcdef";

  SECTION("the recorded pid with the recorded start time, as the caller's uid: killed, its state removed") {
    std::filesystem::create_directory(dir);
    pid_t child = SleepingChild();
    REQUIRE(child > 0);
    auto record = RecordAt(dir, {{"supervisor_pid", child},
                                 {"supervisor_start_time", nsbox::session::ProcessStartTime(child)}});
    Status ended = nsbox::session::EndUnresponsiveSession(record);
    INFO(ended.message());
    CHECK(ended.ok());
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    CHECK(!std::filesystem::exists(dir));
  }
  SECTION("the recorded pid with another start time (a reused pid): left alone, the dead session's state removed") {
    std::filesystem::create_directory(dir);
    pid_t child = SleepingChild();
    REQUIRE(child > 0);
    auto record = RecordAt(dir, {{"supervisor_pid", child},
                                 {"supervisor_start_time", nsbox::session::ProcessStartTime(child) + 1}});
    CHECK(nsbox::session::EndUnresponsiveSession(record).ok());
    CHECK(StillRunning(child));
    CHECK(!std::filesystem::exists(dir));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  SECTION("a process of another uid, even with the recorded pid and start time: refused, left alone") {
    if (::geteuid() != 0) {
      WARN("SKIP: needs root to run a process as another uid");
      return;
    }
    std::filesystem::create_directory(dir);
    pid_t child = SleepingChild(65534);
    REQUIRE(child > 0);
    auto record = RecordAt(dir, {{"supervisor_pid", child},
                                 {"supervisor_start_time", nsbox::session::ProcessStartTime(child)}});
    Status ended = nsbox::session::EndUnresponsiveSession(record);
    CHECK(!ended.ok());
    CHECK_THAT(ended.message(), Catch::Contains("does not run as uid 0: not killing it"));
    CHECK(StillRunning(child));
    CHECK(std::filesystem::exists(dir));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
}
