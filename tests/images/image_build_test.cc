// Integration tests of `nsbox image`: real builds from Debian's archive into a temporary store, used with `nsbox run
// --rootfs NAME`. They need root (mmdebstrap's root mode, the store) and reach Debian's archive through apt's mirror.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nsbox_config.h"
#include "sandbox/base/fs.h"
#include "src/cli/file_tree.h"
#include "src/cli/image_store.h"
#include "src/cli/image_template.h"
#include "tests/support/skip.h"

extern char** environ;

namespace {

using nlohmann::json;

std::string NsboxBin() {
  if (const char* env = std::getenv("NSBOX_BIN"); env && *env) return env;
  return NSBOX_TEST_BIN;
}

// One temporary store for the whole run, removed at exit; every nsbox child finds it through NSBOX_IMAGE_STORE.
const std::string& Store() {
  struct StoreDir {
    std::string path;
    StoreDir() {
      char pattern[] = "/tmp/nsbox-image-tests-XXXXXX";
      if (::mkdtemp(pattern) == nullptr) std::abort();
      ::chmod(pattern, 0755);  // the sandbox's unprivileged uid must pass through to the images
      path = std::string(pattern) + "/images";
      ::setenv("NSBOX_IMAGE_STORE", path.c_str(), 1);
    }
    ~StoreDir() { (void)nsbox::cli::RemoveTree(path.substr(0, path.rfind('/'))); }
  };
  static StoreDir store;
  return store.path;
}

std::string Slurp(const std::string& path) {
  auto text = nsbox::ReadFile(path);
  return text.ok() ? *text : "";
}

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

// Starts nsbox with stdout and stderr going to files, and returns its pid.
pid_t Start(const std::vector<std::string>& args, const std::string& out_path, const std::string& err_path) {
  std::vector<std::string> full = {NsboxBin()};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Outcome Nsbox(const std::vector<std::string>& args) {
  const std::string out_path = Store() + ".out", err_path = Store() + ".err";
  Outcome o;
  o.exit_code = Wait(Start(args, out_path, err_path));
  o.out = Slurp(out_path);
  o.err = Slurp(err_path);
  return o;
}

// A template file beside the store, named NAME.json so that the template is called NAME.
std::string TemplateFile(const std::string& name, const std::string& json_text) {
  std::string path = Store().substr(0, Store().rfind('/')) + "/" + name + ".json";
  REQUIRE(nsbox::WriteFile(path, json_text).ok());
  return path;
}

bool RequireRootOrSkip(const char* test) {
  if (::geteuid() == 0) return true;
  nsbox::testing::RecordSkip("image_tests", test, "image builds need root");
  return false;
}

// Builds each template once per test run (into the temporary store) and returns the build's outcome.
const Outcome& Built(const std::string& template_name) {
  static std::map<std::string, Outcome> builds;
  auto it = builds.find(template_name);
  if (it == builds.end()) {
    auto start = std::chrono::steady_clock::now();
    Outcome o = Nsbox({"image", "build", template_name});
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WARN("building " << template_name << " took " << seconds << "s");
    it = builds.emplace(template_name, std::move(o)).first;
  }
  INFO(it->second.err);
  REQUIRE(it->second.exit_code == 0);
  return it->second;
}

// Entries of the store other than published images: what an interrupted or failed build would leave.
// When this suite started: temporary files of builds it ran are newer.
const time_t kSuiteStarted = ::time(nullptr);

// Scratch left by a build: hidden entries in the store, and temporary directories of mmdebstrap's in /tmp (its gpg
// home) made since the suite started.
std::vector<std::string> Leftovers() {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(Store().c_str())) {
    while (struct dirent* e = ::readdir(dir))
      if (e->d_name[0] == '.' && std::string(e->d_name) != "." && std::string(e->d_name) != "..")
        names.push_back(e->d_name);
    ::closedir(dir);
  }
  if (DIR* dir = ::opendir("/tmp")) {
    while (struct dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      struct stat st;
      if (name.starts_with("mmdebstrap.") && ::lstat(("/tmp/" + name).c_str(), &st) == 0 &&
          st.st_mtime >= kSuiteStarted)
        names.push_back("/tmp/" + name);
    }
    ::closedir(dir);
  }
  return names;
}

bool StorePathMounted() {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mountinfo, line))
    if (line.find(Store()) != std::string::npos) return true;
  return false;
}

// Processes whose command line mentions the store: mkrootfs, mmdebstrap, apt, dpkg of a build.
int ProcessesUsingStore() {
  int count = 0;
  DIR* proc = ::opendir("/proc");
  while (struct dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || std::atoi(e->d_name) == ::getpid()) continue;
    std::string cmdline = Slurp(std::string("/proc/") + e->d_name + "/cmdline");
    for (auto& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(Store()) != std::string::npos) ++count;
  }
  ::closedir(proc);
  return count;
}

// Starts a build and waits until mmdebstrap is busy (downloading or unpacking), so that an interruption lands
// mid-bootstrap.
pid_t StartBuildAndWaitForBootstrap(const std::string& name, const std::string& err_path) {
  pid_t pid = Start({"image", "build", "minimal", "--name", name}, Store() + ".bg.out", err_path);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string err = Slurp(err_path);
    if (err.find("downloading packages") != std::string::npos || err.find("extracting archives") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  return pid;
}

const char kRunScript[] =
    "echo image=$(cat /etc/nsbox-image) uid=$(id -u);"
    "touch /usr/x 2>&1 | grep -q 'Read-only file system' && echo root-read-only;"
    "touch /etc/x 2>&1 | grep -q 'Read-only file system' && echo etc-read-only;"
    "echo data > /tmp/f && cat /tmp/f";

}  // namespace

TEST_CASE("minimal builds with per-stage progress, passes its smoke test inside nsbox and is listed", "[build]") {
  if (!RequireRootOrSkip("minimal build")) return;
  const Outcome& build = Built("minimal");
  CHECK_THAT(build.err, Catch::Contains("[1/3] bootstrap done in"));
  CHECK_THAT(build.err, Catch::Contains("[2/3] smoke test inside nsbox"));
  CHECK_THAT(build.err, Catch::Contains("  | shell ok"));  // the smoke test's own output: it ran
  CHECK_THAT(build.err, Catch::Contains("[2/3] smoke test passed"));
  CHECK_THAT(build.err, Catch::Contains("built image 'minimal'"));
  CHECK(Leftovers().empty());

  Outcome ls = Nsbox({"image", "ls", "--json"});
  REQUIRE(ls.exit_code == 0);
  json images = json::parse(ls.out);
  REQUIRE(images.size() >= 1);
  json minimal;
  for (const auto& image : images)
    if (image["name"] == "minimal") minimal = image;
  CHECK(minimal["template"] == "minimal");
  CHECK(minimal["size_bytes"].get<uint64_t>() > (20u << 20));
  CHECK(minimal["size_bytes"].get<uint64_t>() < (200u << 20));
  CHECK(minimal["created"].get<std::string>().size() == 20);
  Outcome table = Nsbox({"image", "ls"});
  CHECK_THAT(table.out, Catch::Contains("NAME") && Catch::Contains("minimal"));

  struct stat st;
  REQUIRE(::stat(Store().c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0711);
  CHECK(st.st_uid == 0);
  // The image's directory is its lock: others may pass through it to the root, not open it to take the lock.
  REQUIRE(::stat((Store() + "/minimal").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0711);

  // Every host user can read the image: it holds no device node (mmdebstrap's /dev/console is 0666), FIFO or
  // socket, no setuid or setgid program (su), nothing a host uid of 1000 owns.
  std::vector<std::string> privileged;
  const std::string root = Store() + "/minimal/rootfs";
  for (auto it = std::filesystem::recursive_directory_iterator(root); it != std::filesystem::end(it); ++it) {
    struct stat entry;
    if (::lstat(it->path().c_str(), &entry) != 0 || S_ISCHR(entry.st_mode) || S_ISBLK(entry.st_mode) ||
        S_ISFIFO(entry.st_mode) || S_ISSOCK(entry.st_mode) ||
        (S_ISREG(entry.st_mode) && (entry.st_mode & (S_ISUID | S_ISGID)) != 0) || entry.st_uid == 1000)
      privileged.push_back(it->path().string());
  }
  CHECK(privileged.empty());
  CHECK_THAT(build.err, Catch::Contains("removed") && Catch::Contains("setuid"));
}

TEST_CASE("a script runs in the minimal image by name, as the sandbox user, with the image read-only", "[build]") {
  if (!RequireRootOrSkip("minimal run")) return;
  Built("minimal");
  Outcome run = Nsbox({"run", "--rootfs", "minimal", "--", "/bin/sh", "-c", kRunScript});
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("image=minimal uid=1000"));
  CHECK_THAT(run.out, Catch::Contains("root-read-only"));
  CHECK_THAT(run.out, Catch::Contains("etc-read-only"));
  CHECK_THAT(run.out, Catch::Contains("data"));
  // The image on disk is untouched by what ran in it.
  CHECK_FALSE(nsbox::PathExists(Store() + "/minimal/rootfs/tmp/f"));
}

TEST_CASE("python builds and runs Python scripts, with venv usable in /tmp", "[build]") {
  if (!RequireRootOrSkip("python build")) return;
  const Outcome& build = Built("python");
  CHECK_THAT(build.err, Catch::Contains("  | python 3.11"));
  Outcome run =
      Nsbox({"run", "--rootfs", "python", "--lang", "python", "--code",
             "import sys, json, statistics\n"
             "print(json.dumps({'mean': statistics.mean([1, 2, 3, 6]), 'exe': sys.executable}))\n"
             "try:\n    open('/usr/lib/python3/x', 'w')\nexcept OSError as e:\n    print('errno', e.errno)\n"});
  INFO(run.err);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains(R"({"mean": 3, "exe": "/usr/bin/python3"})"));
  CHECK_THAT(run.out, Catch::Contains("errno 30"));  // EROFS
  Outcome venv =
      Nsbox({"run", "--rootfs", "python", "--timeout", "60s", "--", "/bin/sh", "-c",
             "python3 -m venv --without-pip /tmp/v && /tmp/v/bin/python -c 'import sys; print(sys.prefix)'"});
  INFO(venv.err);
  CHECK(venv.exit_code == 0);
  CHECK_THAT(venv.out, Catch::Contains("/tmp/v"));
}

TEST_CASE("building over an existing image name fails at once with a clear error", "[build]") {
  if (!RequireRootOrSkip("existing name")) return;
  Built("minimal");
  Outcome again = Nsbox({"image", "build", "minimal"});
  CHECK(again.exit_code == 125);
  CHECK_THAT(again.err,
             Catch::Contains("image 'minimal' already exists (remove it first with: nsbox image rm minimal)"));
  CHECK(Leftovers().empty());
}

TEST_CASE("unknown and invalid templates fail with one clear line and leave nothing", "[build]") {
  if (!RequireRootOrSkip("invalid template")) return;
  Outcome unknown = Nsbox({"image", "build", "pyhton"});
  CHECK(unknown.exit_code == 125);
  CHECK(unknown.err ==
        "nsbox image build: unknown template 'pyhton' (known templates: datasci, gcc, go, java, minimal, node, "
        "polyglot, python, rust; or give a path to a .json file)\n");
  const std::string bad = TemplateFile("bad", R"({"packages": ["busybox"], "smoke_test": "true"})");
  Outcome invalid = Nsbox({"image", "build", bad, "--name", "bad"});
  CHECK(invalid.exit_code == 125);
  CHECK_THAT(invalid.err, Catch::Contains("template 'bad' is broken: 'smoke_test' must be a non-empty argv list"));
  CHECK(Leftovers().empty());
  CHECK_FALSE(nsbox::PathExists(Store() + "/bad"));
}

TEST_CASE("an image builder others could change is refused before any build, naming it", "[build]") {
  if (!RequireRootOrSkip("untrusted image builder")) return;
  // $NSBOX_MKROOTFS runs as root: a world-writable one is someone else's code.
  char dir_pattern[] = "/tmp/nsbox-untrusted-builder-XXXXXX";
  REQUIRE(::mkdtemp(dir_pattern) != nullptr);
  const std::string dir = dir_pattern, builder = dir + "/mkrootfs", marker = dir + "/it-ran";
  REQUIRE(nsbox::WriteFile(builder, "#!/bin/sh\ntouch " + marker + "\nexit 1\n").ok());
  ::chmod(builder.c_str(), 0777);
  ::setenv("NSBOX_MKROOTFS", builder.c_str(), 1);
  Outcome o = Nsbox({"image", "build", "minimal", "--name", "untrusted-builder"});
  ::unsetenv("NSBOX_MKROOTFS");
  CHECK(o.exit_code == 125);
  CHECK_THAT(o.err, Catch::Contains("refusing the image builder " + builder + ": " + builder +
                                    " is writable by others (mode 0777)"));
  CHECK_FALSE(nsbox::PathExists(marker));
  CHECK_FALSE(nsbox::PathExists(Store() + "/untrusted-builder"));
  CHECK(Leftovers().empty());
  (void)nsbox::cli::RemoveTree(dir);
}

TEST_CASE("an image cannot be named host or nothing; the refusal comes before any build", "[cli]") {
  // Other cases of this suite may have built the template's own image (minimal) already: it must stay as it was.
  const bool had_minimal = nsbox::PathExists(Store() + "/minimal");
  Outcome host = Nsbox({"image", "build", "minimal", "--name", "host"});
  CHECK(host.exit_code == 125);
  CHECK(host.err ==
        "nsbox image build: 'host' cannot name an image: --rootfs host always means the host view (give another "
        "--name)\n");
  Outcome empty = Nsbox({"image", "build", "minimal", "--name", ""});
  CHECK(empty.exit_code == 125);
  CHECK(empty.err ==
        "nsbox image build: --name is empty: give the image a name, or leave --name out for the template's\n");
  CHECK_FALSE(nsbox::PathExists(Store() + "/host"));
  CHECK(nsbox::PathExists(Store() + "/minimal") == had_minimal);
  CHECK(Leftovers().empty());
}

TEST_CASE("a verb with sub-verbs names them when given an unknown one or none, as the top level does", "[cli]") {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"image", "bogus"}, "nsbox image: unknown command 'bogus' (commands: build, ls, rm; see nsbox image --help)\n"},
      {{"image"}, "nsbox image: a command is required (commands: build, ls, rm; see nsbox image --help)\n"},
      {{"profile", "list"}, "nsbox profile: unknown command 'list' (commands: check; see nsbox profile --help)\n"},
      {{"session", "bogus", "--all"},
       "nsbox session: unknown command 'bogus' (commands: create, ls, rm; see nsbox session --help)\n"},
      {{"bogus"},
       "nsbox: unknown command 'bogus' (commands: run, session, exec, cp, agent, mcp, image, profile, doctor, "
       "batch, serve; see nsbox --help)\n"},
  };
  for (const auto& [args, said] : cases) {
    INFO(args.front());
    Outcome o = Nsbox(args);
    CHECK(o.exit_code == 125);
    CHECK(o.err == said);
  }
  // Known sub-verbs and help still get through.
  CHECK(Nsbox({"image", "--help"}).exit_code == 0);
  CHECK(Nsbox({"profile", "check", "default"}).exit_code == 0);
}

TEST_CASE("a template naming a package Debian lacks fails with apt's reason and leaves nothing", "[build]") {
  if (!RequireRootOrSkip("missing package")) return;
  const std::string t =
      TemplateFile("nopkg", R"({"packages": ["nsbox-no-such-package"], "smoke_test": ["/bin/true"]})");
  Outcome o = Nsbox({"image", "build", t, "--name", "nopkg"});
  CHECK(o.exit_code == 125);
  CHECK_THAT(o.err, Catch::EndsWith("nsbox image build: bootstrap failed (exit 1): mmdebstrap failed (exit 25): Unable "
                                    "to locate package nsbox-no-such-package\n"));
  CHECK(Leftovers().empty());
  CHECK_FALSE(nsbox::PathExists(Store() + "/nopkg"));
}

TEST_CASE("an image whose smoke test fails is never published", "[build]") {
  if (!RequireRootOrSkip("failing smoke test")) return;
  const std::string t = TemplateFile(
      "smokefail",
      R"({"packages": [], "smoke_test": ["/bin/sh", "-c", "echo checking; echo broken-on-purpose >&2; exit 3"]})");
  Outcome o = Nsbox({"image", "build", t, "--name", "smokefail"});
  CHECK(o.exit_code == 125);
  CHECK_THAT(o.err, Catch::Contains("  | checking"));
  CHECK_THAT(o.err,
             Catch::EndsWith(
                 "nsbox image build: smoke test failed (exit 3): broken-on-purpose; the image was not published\n"));
  CHECK(Leftovers().empty());
  CHECK_FALSE(nsbox::PathExists(Store() + "/smokefail"));
  Outcome run = Nsbox({"run", "--rootfs", "smokefail", "--", "/bin/true"});
  CHECK(run.exit_code == 125);
  CHECK_THAT(run.err, Catch::Contains("no image 'smokefail'"));
}

TEST_CASE(
    "a build's clean-up stays inside the image when customize made its directories symlinks; rm takes a deep "
    "tree",
    "[build]") {
  if (!RequireRootOrSkip("symlinked image directories")) return;
  // `ln -s /tmp /var/tmp` is a common way to save space. The clean-up after mmdebstrap empties /var/log, /var/tmp and
  // /tmp and sets their modes: from the host side it followed such links and emptied the build host's directories.
  const std::string host_dir = Store().substr(0, Store().rfind('/')) + "/host-side";
  REQUIRE(::mkdir(host_dir.c_str(), 0700) == 0);
  REQUIRE(nsbox::WriteFile(host_dir + "/keep", "host data\n").ok());
  const std::string t = TemplateFile("linked", fmt::format(R"({{"packages": [], "customize": [
      "rm -rf /var/log && ln -s {0} /var/log", "rm -rf /var/tmp && ln -s {0} /var/tmp",
      "mkdir -p /opt/t && cd /opt/t && i=0 && while [ $i -lt 1100 ]; do mkdir dddd && cd -P dddd; i=$((i+1)); done"],
      "smoke_test": ["/bin/sh", "-c", "test -d /opt/t/dddd && echo linked ok"]}})",
                                                           host_dir));
  Outcome o = Nsbox({"image", "build", t, "--name", "linked"});
  INFO(o.err);
  CHECK(o.exit_code == 0);
  CHECK(Slurp(host_dir + "/keep") == "host data\n");
  struct stat st;
  REQUIRE(::stat(host_dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);
  // 1100 levels: deeper than PATH_MAX lets a path name. rm removed the image from the list but left its files, and
  // every later build failed on the leftover.
  Outcome rm = Nsbox({"image", "rm", "linked"});
  INFO(rm.err);
  CHECK(rm.exit_code == 0);
  CHECK(Leftovers().empty());
  CHECK_FALSE(nsbox::PathExists(Store() + "/linked"));
  CHECK(Slurp(host_dir + "/keep") == "host data\n");
}

TEST_CASE("a build interrupted by SIGTERM or SIGINT removes its half image and leaves no process or mount",
          "[build][interrupt]") {
  if (!RequireRootOrSkip("interrupted build")) return;
  for (int sig : {SIGTERM, SIGINT}) {
    INFO("signal " << sig);
    const std::string err_path = Store() + ".interrupt.err";
    pid_t pid = StartBuildAndWaitForBootstrap("interrupted", err_path);
    REQUIRE(::kill(pid, sig) == 0);
    int code = Wait(pid);
    std::string err = Slurp(err_path);
    INFO(err);
    CHECK(code == 128 + sig);
    CHECK_THAT(err, Catch::Contains("nothing was published and the partial build was removed"));
    CHECK(Leftovers().empty());
    CHECK_FALSE(nsbox::PathExists(Store() + "/interrupted"));
    CHECK(ProcessesUsingStore() == 0);
    CHECK_FALSE(StorePathMounted());
  }
}

TEST_CASE("a build killed with SIGKILL takes its processes along, and the next nsbox image call sweeps its files",
          "[build][interrupt]") {
  if (!RequireRootOrSkip("killed build")) return;
  pid_t pid = StartBuildAndWaitForBootstrap("killed", Store() + ".kill.err");
  REQUIRE(::kill(pid, SIGKILL) == 0);
  CHECK(Wait(pid) == 128 + SIGKILL);
  // The parent-death signal ends mkrootfs's pid namespace; its teardown takes a moment.
  for (int i = 0; i < 300 && ProcessesUsingStore() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(ProcessesUsingStore() == 0);
  CHECK_FALSE(StorePathMounted());
  CHECK(Leftovers().size() == 1);  // the .build-killed-* directory: SIGKILL cannot be handled
  Outcome ls = Nsbox({"image", "ls"});
  CHECK(ls.exit_code == 0);
  CHECK(Leftovers().empty());
  CHECK_FALSE(nsbox::PathExists(Store() + "/killed"));
}

TEST_CASE("rm removes an image so that it can no longer be run; unknown names are errors", "[build]") {
  if (!RequireRootOrSkip("rm")) return;
  Built("minimal");
  {
    // While a session runs on it, the image stays: its root's entries are bound into the session.
    std::string state = Store() + "-sessions";
    ::setenv("NSBOX_STATE_DIR", state.c_str(), 1);
    Outcome made = Nsbox({"session", "create", "--rootfs", "minimal", "--json"});
    REQUIRE(made.exit_code == 0);
    const std::string id = nlohmann::json::parse(made.out)["id"];
    Outcome busy = Nsbox({"image", "rm", "minimal"});
    CHECK(busy.exit_code == 125);
    CHECK_THAT(busy.err, Catch::StartsWith("nsbox image rm: image 'minimal' is in use by a running sandbox or "
                                           "session (mounted in the mount namespace of pid ") &&
                             Catch::EndsWith("); end it first (nsbox session ls lists sessions)\n"));
    // The same store named through a symlink, or with a trailing '/': mountinfo has the resolved path.
    const std::string link = Store() + "-link";
    REQUIRE(::symlink(Store().c_str(), link.c_str()) == 0);
    const std::string plain = Store();
    for (const std::string& other : {link, plain + "/"}) {
      ::setenv("NSBOX_IMAGE_STORE", other.c_str(), 1);
      Outcome refused = Nsbox({"image", "rm", "minimal"});
      CHECK(refused.exit_code == 125);
      CHECK_THAT(refused.err, Catch::Contains("is in use by a running sandbox"));
    }
    ::setenv("NSBOX_IMAGE_STORE", plain.c_str(), 1);
    ::unlink(link.c_str());
    CHECK(Nsbox({"exec", id, "--", "/bin/true"}).exit_code == 0);
    CHECK(Nsbox({"session", "rm", id}).exit_code == 0);
    ::unsetenv("NSBOX_STATE_DIR");
    ::rmdir(state.c_str());
  }
  Outcome rm = Nsbox({"image", "rm", "minimal"});
  INFO(rm.err);
  CHECK(rm.exit_code == 0);
  CHECK_FALSE(nsbox::PathExists(Store() + "/minimal"));
  CHECK(Leftovers().empty());
  Outcome run = Nsbox({"run", "--rootfs", "minimal", "--", "/bin/true"});
  CHECK(run.exit_code == 125);
  CHECK_THAT(run.err, Catch::Contains("--rootfs: no image 'minimal'"));
  Outcome again = Nsbox({"image", "rm", "minimal"});
  CHECK(again.exit_code == 125);
  CHECK_THAT(again.err, Catch::Contains("nsbox image rm: no image 'minimal'"));
}

// Images too slow to build on every run (datasci: minutes) or used by several cases are kept between test runs in a
// cache store, keyed by the template's digest: /var/cache/nsbox/test-images/TEMPLATE-DIGEST (override with
// NSBOX_IMAGE_TEST_CACHE). A changed template builds anew and replaces its older cached images. While a CachedImage
// lives, nsbox children use the cache store.
class CachedImage {
 public:
  // Builds the template into the cache unless it is there; `expect` is a line its smoke test prints.
  CachedImage(const std::string& template_name, const std::string& expect) : saved_store_(Store()) {
    const char* cache_env = std::getenv("NSBOX_IMAGE_TEST_CACHE");
    const std::string cache = cache_env && *cache_env ? cache_env : "/var/cache/nsbox/test-images";
    auto tmpl = nsbox::cli::LoadTemplate(template_name, std::string(NSBOX_SOURCE_DIR) + "/rootfs/templates");
    REQUIRE(tmpl.ok());
    name_ = template_name + "-" + tmpl->digest;
    ::setenv("NSBOX_IMAGE_STORE", cache.c_str(), 1);
    if (nsbox::PathExists(cache + "/" + name_ + "/rootfs")) return;
    if (auto cached = nsbox::cli::ListImages(cache); cached.ok())
      for (const auto& old : *cached)
        if (old.template_name == template_name && old.name.rfind(template_name + "-", 0) == 0)
          Nsbox({"image", "rm", old.name});
    auto start = std::chrono::steady_clock::now();
    Outcome build = Nsbox({"image", "build", template_name, "--name", name_});
    WARN("building " << template_name << " took "
                     << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << "s");
    INFO(build.err);
    REQUIRE(build.exit_code == 0);
    CHECK_THAT(build.err, Catch::Contains("  | " + expect));
  }
  ~CachedImage() { ::setenv("NSBOX_IMAGE_STORE", saved_store_.c_str(), 1); }
  CachedImage(const CachedImage&) = delete;
  CachedImage& operator=(const CachedImage&) = delete;
  const std::string& name() const { return name_; }

 private:
  std::string saved_store_, name_;
};

TEST_CASE("datasci imports pandas and plots a PNG within the default 512M memory limit", "[build][datasci]") {
  if (!RequireRootOrSkip("datasci")) return;
  CachedImage image("datasci", "datasci ok");
  const std::string& name = image.name();
  Outcome run =
      Nsbox({"run", "--rootfs", name, "--memory", "512M", "--timeout", "120s", "--json", "--lang", "python", "--code",
             "import numpy as np, pandas as pd, matplotlib\n"
             "import matplotlib.pyplot as plt\n"
             "df = pd.DataFrame({'x': np.linspace(0, 10, 200)}); df['y'] = np.sin(df.x)\n"
             "df.plot(x='x', y='y'); plt.savefig('/tmp/plot.png')\n"
             "png = open('/tmp/plot.png', 'rb').read()\n"
             "print(len(png) > 1000, png[:8] == b'\\x89PNG\\r\\n\\x1a\\n', df.y.max().round(2))\n"});
  INFO(run.err);
  INFO(run.out);
  REQUIRE(run.exit_code == 0);
  json result = json::parse(run.out);
  CHECK(result["status"] == "ok");
  CHECK_THAT(result["stdout"].get<std::string>(), Catch::Contains("True True 1.0"));
}

namespace {

// A --json run of CODE in --lang LANG on IMAGE, parsed; the run's exit code beside it.
std::pair<int, json> RunLang(const std::string& image, const std::string& lang, const std::string& code) {
  Outcome run = Nsbox({"run", "--rootfs", image, "--json", "--timeout", "20s", "--lang", lang, "--code", code});
  INFO(lang << ": " << run.err);
  INFO(run.out);
  json result = json::parse(run.out, nullptr, false);
  REQUIRE_FALSE(result.is_discarded());
  return {run.exit_code, result};
}

void CheckHelloWorld(const std::string& image, const std::string& lang, const std::string& code,
                     const std::string& expect) {
  auto [code_rc, result] = RunLang(image, lang, code);
  INFO(lang << ": " << result.dump());
  CHECK(code_rc == 0);
  CHECK(result["status"] == "ok");
  CHECK(result["stdout"] == expect);
  CHECK(result["compile"]["status"] == "ok");
  CHECK(result["denied_syscalls"].empty());  // the default seccomp profile suffices for the toolchain
}

}  // namespace

// The gcc image (about 35 s to build from the local mirror, 300 MiB) is cached like datasci.
TEST_CASE("the gcc image compiles and runs C and C++, reports compile errors, and names the template for go",
          "[build][toolchains]") {
  if (!RequireRootOrSkip("gcc toolchain")) return;
  CachedImage image("gcc", "c++ ok");
  CheckHelloWorld(image.name(), "c",
                  "#include <stdio.h>\n#include <math.h>\nint main(void) { printf(\"c %.0f\\n\", sqrt(1764.0)); }\n",
                  "c 42\n");
  CheckHelloWorld(image.name(), "cpp",
                  "#include <iostream>\n#include <thread>\n#include <vector>\n"
                  "int main() { std::vector<int> v{1, 2, 3}; int n = 0;\n"
                  "  std::thread t([&] { n = v.size(); }); t.join(); std::cout << \"cpp \" << n << std::endl; }\n",
                  "cpp 3\n");

  auto [failed_rc, failed] = RunLang(image.name(), "c", "int main(void) { return undeclared_x; }\n");
  CHECK(failed_rc == 123);
  CHECK(failed["status"] == "compile_error");
  CHECK(failed["exit_code"] == -1);  // the program never ran
  CHECK_THAT(failed["stderr"].get<std::string>(),
             Catch::Contains("'undeclared_x' undeclared") ||
                 Catch::Contains("\xe2\x80\x98undeclared_x\xe2\x80\x99 undeclared"));

  auto [exit_rc, exited] = RunLang(image.name(), "cpp", "int main() { return 7; }\n");
  CHECK(exit_rc == 7);
  CHECK(exited["status"] == "exit");
  CHECK(exited["exit_code"] == 7);

  // The gcc image has no Go: one line naming the compiler and the template that has it, before any sandbox.
  Outcome go = Nsbox({"run", "--rootfs", image.name(), "--lang", "go", "--code", "package main\nfunc main() {}\n"});
  CHECK(go.exit_code == 125);
  CHECK(go.err == "nsbox run: language 'go': compiler /usr/bin/go is not in the root filesystem (" +
                      std::string(std::getenv("NSBOX_IMAGE_STORE")) + "/" + image.name() +
                      "/rootfs); the image template 'go' has it (nsbox image build go, then --rootfs go)\n");
}

// Debian's toolchains are reached through absolute symlinks (/usr/bin/javac -> /etc/alternatives/javac ->
// /usr/lib/jvm/...): the check that a language's compiler is in the root must follow them inside the root, not on
// the host. Two fake roots without /bin/sh tell which way a link was followed.
TEST_CASE("a compiler behind an absolute symlink is looked up inside the root, not on the host", "[cli]") {
  char pattern[] = "/tmp/nsbox-symlink-root-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  const std::string base = pattern;
  const std::string in_root = base + "/in-root", host_only = base + "/host-only";
  for (const auto& root : {in_root, host_only}) {
    REQUIRE(::mkdir(root.c_str(), 0755) == 0);
    REQUIRE(::mkdir((root + "/usr").c_str(), 0755) == 0);
    REQUIRE(::mkdir((root + "/usr/bin").c_str(), 0755) == 0);
  }
  // in-root: the link's target exists only inside the root.
  REQUIRE(::mkdir((in_root + "/opt").c_str(), 0755) == 0);
  REQUIRE(nsbox::WriteFile(in_root + "/opt/gcc-in-root", "#!/bin/sh\n").ok());
  REQUIRE(::chmod((in_root + "/opt/gcc-in-root").c_str(), 0755) == 0);
  REQUIRE(::symlink("/opt/gcc-in-root", (in_root + "/usr/bin/gcc").c_str()) == 0);
  // host-only: the link's target exists on the host (/bin/sh) but not inside the root.
  REQUIRE(::symlink("/bin/sh", (host_only + "/usr/bin/gcc").c_str()) == 0);

  Outcome found = Nsbox({"run", "--rootfs", in_root, "--lang", "c", "--code", "int main(void) {}"});
  CHECK(found.exit_code == 125);
  CHECK_THAT(found.err, Catch::Contains("language 'c': shell (for the compile step) /bin/sh is not in the root"));
  Outcome missing = Nsbox({"run", "--rootfs", host_only, "--lang", "c", "--code", "int main(void) {}"});
  CHECK(missing.exit_code == 125);
  CHECK_THAT(missing.err, Catch::Contains("language 'c': compiler /usr/bin/gcc is not in the root filesystem (" +
                                          host_only + "); the image template 'gcc' has it"));
  (void)nsbox::cli::RemoveTree(base);
}

// The polyglot image takes about 2 minutes and 1.6 GiB to build, too much for every CI machine: the case is hidden
// ([.polyglot], run it with '[polyglot]'), and cached by digest like gcc so that a rerun costs only the runs.
TEST_CASE("the polyglot image runs TypeScript, Python, Node.js and C under the default profile", "[.polyglot][build]") {
  if (!RequireRootOrSkip("polyglot toolchains")) return;
  CachedImage image("polyglot", "polyglot ok");
  CheckHelloWorld(image.name(), "typescript",
                  "const xs: number[] = [1, 2, 3];\nconsole.log(`ts ${xs.reduce((a, b) => a + b, 0)}`);\n", "ts 6\n");
  CheckHelloWorld(image.name(), "c", "#include <stdio.h>\nint main(void) { puts(\"c ok\"); }\n", "c ok\n");
  for (const auto& [lang, code, expect] : {std::tuple<std::string, std::string, std::string>{
                                               "python", "import sys; print('py', sys.version_info[0])", "py 3\n"},
                                           {"node", "console.log('node', typeof process.version)", "node string\n"}}) {
    auto [rc, result] = RunLang(image.name(), lang, code);
    INFO(lang << ": " << result.dump());
    CHECK(rc == 0);
    CHECK(result["stdout"] == expect);
    CHECK(result["denied_syscalls"].empty());
  }
  auto [ts_rc, ts_failed] = RunLang(image.name(), "typescript", "const x: number = 'not a number';\n");
  CHECK(ts_rc == 123);
  CHECK(ts_failed["status"] == "compile_error");
  CHECK_THAT(ts_failed["stdout"].get<std::string>(), Catch::Contains("error TS2322"));  // tsc reports on stdout
}
