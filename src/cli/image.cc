// `nsbox image build|ls|rm`: builds images from templates with tools/mkrootfs, smoke-tests them inside nsbox, publishes
// them atomically.
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/defer.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/status.h"
#include "sandbox/base/unique_fd.h"
#include "src/cli/commands.h"
#include "src/cli/file_tree.h"
#include "src/cli/image_store.h"
#include "src/cli/image_template.h"

extern char** environ;

namespace nsbox::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// --- Interruption -------------------------------------------------------------------------------
// The one child a build waits for at a time, and the signal that ends it when the build is interrupted.
// The handler only records the signal and passes it on (kill(2) is async-signal-safe); the build loop
// sees the interrupted read(2), waits for the child and removes the half-built directory itself.
volatile sig_atomic_t g_image_interrupted = 0;
volatile pid_t g_child = -1;
volatile int g_child_stop_signal = SIGKILL;

extern "C" void OnInterrupt(int sig) {
  g_image_interrupted = sig;
  pid_t child = g_child;
  if (child > 0) ::kill(child, g_child_stop_signal);
}

// Installs OnInterrupt for SIGINT, SIGTERM and SIGHUP (without SA_RESTART, so blocking reads return EINTR)
// and puts the previous handlers back when the build ends.
class InterruptHandlers {
 public:
  InterruptHandlers() {
    struct sigaction sa {};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &sa, &previous_[i]);
  }
  ~InterruptHandlers() {
    for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
  InterruptHandlers(const InterruptHandlers&) = delete;
  InterruptHandlers& operator=(const InterruptHandlers&) = delete;

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction previous_[std::size(kSignals)] {};
};

Status InterruptedStatus() {
  return Status::Error(fmt::format("interrupted by {}; nothing was published and the partial build was removed",
                                   sigabbrev_np(g_image_interrupted)
                                       ? fmt::format("SIG{}", sigabbrev_np(g_image_interrupted))
                                       : std::to_string(g_image_interrupted)));
}

// --- Children -----------------------------------------------------------------------------------

struct ChildOutcome {
  int wait_status = 0;
  std::string output;          // everything the child wrote (stdout and stderr together), capped
  std::string last_error_line;  // the last line starting with error_prefix
};

// Reads the child's output line by line, echoing each with an indent, until EOF or an interruption,
// then reaps the child. A child still running when a signal arrives has already been sent its stop signal.
StatusOr<ChildOutcome> Supervise(pid_t pid, UniqueFd output, const std::string& echo_prefix,
                                 const std::string& error_prefix) {
  g_child = pid;
  if (g_image_interrupted) ::kill(pid, g_child_stop_signal);  // a signal that came between fork and here
  ChildOutcome outcome;
  std::string pending;
  char buf[4096];
  auto flush_line = [&](const std::string& line) {
    fmt::print(stderr, "{}{}\n", echo_prefix, line);
    if (!error_prefix.empty() && line.rfind(error_prefix, 0) == 0) outcome.last_error_line = line;
    if (outcome.output.size() < (64 << 10)) outcome.output += line + "\n";
  };
  for (;;) {
    ssize_t n = ::read(output.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      if (g_image_interrupted) break;
      continue;
    }
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t eol; (eol = pending.find('\n')) != std::string::npos;) {
      flush_line(pending.substr(0, eol));
      pending.erase(0, eol + 1);
    }
  }
  if (!pending.empty()) flush_line(pending);
  std::fflush(stderr);
  // Reap. For a pid-namespace child, waitpid returns only once every process of that namespace is gone.
  for (;;) {
    pid_t r = ::waitpid(pid, &outcome.wait_status, 0);
    if (r == pid) break;
    if (r < 0 && errno == EINTR) continue;
    g_child = -1;
    return Status::Errno(fmt::format("waitpid({})", pid));
  }
  g_child = -1;
  return outcome;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exit {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "unknown status";
}

std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

// Runs tools/mkrootfs as pid 1 of a new pid namespace with a private mount namespace: every process
// the bootstrap starts (mmdebstrap, apt, dpkg, maintainer scripts) dies with it, and the /proc, /sys
// and /dev mounts mmdebstrap makes inside the new root are never visible to us, so cleanup is an
// ordinary recursive delete. PR_SET_PDEATHSIG takes the whole namespace down if nsbox is SIGKILLed.
StatusOr<ChildOutcome> RunMkrootfs(const std::string& mkrootfs, const std::string& template_path,
                                   const std::string& rootfs_dir) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Errno("pipe2(O_CLOEXEC)");
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::vector<std::string> args = {"/bin/bash", mkrootfs, template_path, rootfs_dir};
  std::vector<char*> argv = Argv(args);
  // Tells mkrootfs that it already runs isolated (as pid 1 here), so it does not wrap itself in unshare(1) again.
  std::vector<std::string> env = {"NSBOX_MKROOTFS_ISOLATED=1"};
  for (char** e = environ; *e; ++e)
    if (std::string_view(*e).rfind("NSBOX_MKROOTFS_ISOLATED=", 0) != 0) env.emplace_back(*e);
  std::vector<char*> envp = Argv(env);
  std::fflush(stdout);
  std::fflush(stderr);
  g_child_stop_signal = SIGKILL;
  // clone(2) without a stack argument forks; glibc's clone() wrapper insists on a stack, hence the raw call.
  long pid = ::syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, nullptr, nullptr, nullptr, 0);
  if (pid < 0) return Status::Errno("clone(CLONE_NEWPID|CLONE_NEWNS)");
  if (pid == 0) {
    // Child: async-signal-safe calls only. getppid() is 0 here (the parent is outside our pid namespace),
    // so a parent that died before prctl cannot be detected; that window is a few instructions long.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(121);
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) _exit(122);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(fds[1], 1) < 0 || ::dup2(fds[1], 2) < 0) _exit(123);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  write_end.reset();
  return Supervise(static_cast<pid_t>(pid), std::move(read_end), "  ", "mkrootfs: error:");
}

// Runs the template's smoke test the way users will run the image: `nsbox run --rootfs DIR -- ARGV`.
StatusOr<ChildOutcome> RunSmokeTest(const std::string& rootfs_dir, const std::vector<std::string>& smoke_test) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Errno("pipe2(O_CLOEXEC)");
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::vector<std::string> args = {"nsbox", "run", "--rootfs", rootfs_dir, "--timeout", "120s", "--"};
  args.insert(args.end(), smoke_test.begin(), smoke_test.end());
  std::vector<char*> argv = Argv(args);
  std::fflush(stdout);
  std::fflush(stderr);
  // nsbox run passes SIGTERM on to its sandbox and cleans up after it; SIGKILL would leave it no chance.
  g_child_stop_signal = SIGTERM;
  pid_t pid = ::fork();
  if (pid < 0) return Status::Errno("fork");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(fds[1], 1) < 0 || ::dup2(fds[1], 2) < 0) _exit(123);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  write_end.reset();
  return Supervise(pid, std::move(read_end), "  | ", "");
}

// $NSBOX_MKROOTFS, else the copy beside the templates (DataDir()/tools/mkrootfs: installed, or the source tree's own
// for a build-tree binary). It runs as root, so it must be a file only root or the running user can change.
StatusOr<std::string> FindMkrootfs() {
  const char* env = std::getenv("NSBOX_MKROOTFS");
  std::string mkrootfs = env && *env ? env : DataDir() + "/tools/mkrootfs";
  if (!PathExists(mkrootfs)) return Status::Error(fmt::format("{} is missing (set NSBOX_MKROOTFS)", mkrootfs));
  auto checked = CheckTrustedPath(mkrootfs, ::geteuid());
  if (!checked.ok()) return checked.status().Wrap(fmt::format("refusing the image builder {}", mkrootfs));
  return checked;
}

std::string NowRfc3339() {
  std::time_t now = std::time(nullptr);
  struct tm utc;
  ::gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string ShellQuoteForDisplay(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    bool plain = !a.empty() && a.find_first_not_of(
                                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-=:,") ==
                                   std::string::npos;
    if (!out.empty()) out += ' ';
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out.size() > 100 ? out.substr(0, 94) + " [...]" : out;
}

Status RequireRoot(const std::string& store) {
  if (::geteuid() != 0)
    return Status::Error(fmt::format("must be run as root (the image store {} is root-only)", store));
  return OkStatus();
}

// --- build --------------------------------------------------------------------------------------

struct BuildOptions {
  std::string template_name;
  std::optional<std::string> name;  // --name, when given
};

Status BuildImage(const BuildOptions& options) {
  const auto start = Clock::now();
  // A bad --name is a usage error, said before anything else is looked at.
  if (options.name) NSBOX_RETURN_IF_ERROR(NewImageName(options.name, "").status());
  const std::string store = ImageStoreRoot();
  NSBOX_RETURN_IF_ERROR(RequireRoot(store));
  auto tmpl = LoadTemplate(options.template_name, TemplateDir());
  if (!tmpl.ok()) return tmpl.status();
  auto new_name = NewImageName(options.name, tmpl->name);
  if (!new_name.ok()) return new_name.status();
  const std::string name = *new_name;
  NSBOX_RETURN_IF_ERROR(EnsureStore(store));
  // A leftover nsbox cannot remove (a file made immutable in it) is the operator's to look at; it does not stop builds.
  auto swept = SweepStaleEntries(store);
  if (!swept.ok())
    fmt::print(stderr, "nsbox image build: warning: {} (the build goes on)\n", swept.status().message());
  else if (*swept > 0)
    fmt::print(stderr, "nsbox image build: removed {} leftover(s) of interrupted builds\n", *swept);
  if (PathExists(store + "/" + name))
    return Status::Error(
        fmt::format("image '{}' already exists (remove it first with: nsbox image rm {})", name, name));
  auto found_mkrootfs = FindMkrootfs();
  if (!found_mkrootfs.ok()) return found_mkrootfs.status();
  const std::string mkrootfs = *found_mkrootfs;

  // The build directory: named so a sweep can find it, locked so a sweep leaves it alone while we live.
  std::string build_dir = fmt::format("{}/.build-{}-XXXXXX", store, name);
  if (::mkdtemp(build_dir.data()) == nullptr) return Status::Errno(fmt::format("mkdtemp({})", build_dir));
  UniqueFd lock(::open(build_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!lock || ::flock(lock.get(), LOCK_EX) != 0) {
    Status status = Status::Errno(fmt::format("flock({})", build_dir));
    RemoveTree(build_dir);
    return status;
  }
  // mkdtemp made it 0700; the smoke test's sandbox (host uid nobody) must reach the root inside it. Not readable by
  // others: the directory is the image's lock (UseImage, RemoveImage), which another user must not be able to take.
  if (::fchmod(lock.get(), 0711) != 0) {
    Status status = Status::Errno(fmt::format("fchmod({}, 0711)", build_dir));
    RemoveTree(build_dir);
    return status;
  }
  bool published = false;
  Defer remove_build_dir([&] {
    if (!published) RemoveTree(build_dir);
  });
  const std::string rootfs_dir = build_dir + "/rootfs";

  g_image_interrupted = 0;
  InterruptHandlers handlers;
  fmt::print(stderr, "nsbox image build: template '{}' ({} packages, digest {}) -> image '{}' in {}\n", tmpl->name,
             tmpl->packages.size(), tmpl->digest, name, store);

  // [1/3] The root itself.
  auto stage_start = Clock::now();
  fmt::print(stderr, "nsbox image build: [1/3] bootstrap with {} ...\n", mkrootfs);
  auto bootstrap = RunMkrootfs(mkrootfs, tmpl->path, rootfs_dir);
  if (!bootstrap.ok()) return bootstrap.status().Wrap("bootstrap");
  if (g_image_interrupted) return InterruptedStatus();
  if (bootstrap->wait_status != 0) {
    // mkrootfs's own "mkrootfs: error: ..." line when it wrote one (a command it ran may have ended it first).
    std::string why = bootstrap->last_error_line;
    if (why.starts_with("mkrootfs: error:")) why.erase(0, std::string_view("mkrootfs: error:").size());
    why.erase(0, why.find_first_not_of(' '));
    if (!why.empty()) why = ": " + why;
    return Status::Error(fmt::format("bootstrap failed ({}){}", DescribeWaitStatus(bootstrap->wait_status), why));
  }
  fmt::print(stderr, "nsbox image build: [1/3] bootstrap done in {:.1f}s\n", SecondsSince(stage_start));

  // [2/3] The smoke test, inside nsbox, exactly as users will run the image.
  stage_start = Clock::now();
  fmt::print(stderr, "nsbox image build: [2/3] smoke test inside nsbox: {} ...\n",
             ShellQuoteForDisplay(tmpl->smoke_test));
  auto smoke = RunSmokeTest(rootfs_dir, tmpl->smoke_test);
  if (!smoke.ok()) return smoke.status().Wrap("smoke test");
  if (g_image_interrupted) return InterruptedStatus();
  if (smoke->wait_status != 0) {
    std::string last = smoke->output;
    while (!last.empty() && last.back() == '\n') last.pop_back();
    last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
    return Status::Error(fmt::format("smoke test failed ({}){}; the image was not published",
                                     DescribeWaitStatus(smoke->wait_status), last.empty() ? "" : ": " + last));
  }
  fmt::print(stderr, "nsbox image build: [2/3] smoke test passed in {:.1f}s\n", SecondsSince(stage_start));

  // [3/3] Publish: metadata, then one rename(2) that cannot replace an image someone else published meanwhile.
  stage_start = Clock::now();
  auto size = DiskUsage(rootfs_dir);
  if (!size.ok()) return size.status();
  json meta = {
      {"name", name},
      {"template", tmpl->name},
      {"template_digest", tmpl->digest},
      {"description", tmpl->description},
      {"packages", tmpl->packages},
      {"smoke_test", tmpl->smoke_test},
      {"smoke_test_output", smoke->output},
      {"created", NowRfc3339()},
      {"size_bytes", *size},
      {"build_seconds", SecondsSince(start)},
  };
  NSBOX_RETURN_IF_ERROR(WriteFile(build_dir + "/image.json", meta.dump(2) + "\n"));
  if (g_image_interrupted) return InterruptedStatus();
  const std::string final_dir = store + "/" + name;
  if (::renameat2(AT_FDCWD, build_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST)
      return Status::Error(fmt::format("image '{}' already exists (someone published it during this build)", name));
    return Status::Errno(fmt::format("renameat2({}, {}, RENAME_NOREPLACE)", build_dir, final_dir));
  }
  published = true;
  UniqueFd store_fd(::open(store.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (store_fd) ::fsync(store_fd.get());
  fmt::print(stderr, "nsbox image build: [3/3] publish done in {:.1f}s\n", SecondsSince(stage_start));
  fmt::print(stderr,
             "nsbox image build: built image '{}' ({}) in {:.1f}s; use it with: nsbox run --rootfs {} -- COMMAND\n",
             name, HumanSize(*size), SecondsSince(start), name);
  return OkStatus();
}

// --- ls, rm -------------------------------------------------------------------------------------

Status ListImagesCommand(bool as_json) {
  const std::string store = ImageStoreRoot();
  if (::geteuid() == 0) {
    // Tidy up after interrupted builds whenever we can; a failure to do so must not hide the list.
    (void)SweepStaleEntries(store);
  } else if (PathExists(store) && ::access(store.c_str(), R_OK | X_OK) != 0) {
    return RequireRoot(store);
  }
  auto images = ListImages(store);
  if (!images.ok()) return images.status();
  if (as_json) {
    json out = json::array();
    for (const auto& image : *images)
      out.push_back({{"name", image.name},
                     {"template", image.template_name},
                     {"template_digest", image.template_digest},
                     {"description", image.description},
                     {"size_bytes", image.size_bytes},
                     {"created", image.created},
                     {"build_seconds", image.build_seconds},
                     {"rootfs", image.rootfs_dir}});
    fmt::print("{}\n", out.dump(2));
    return OkStatus();
  }
  if (images->empty()) {
    fmt::print(stderr, "no images in {} (build one with: nsbox image build TEMPLATE)\n", store);
    return OkStatus();
  }
  fmt::print("{:<24} {:<12} {:>8}  {}\n", "NAME", "TEMPLATE", "SIZE", "CREATED");
  for (const auto& image : *images)
    fmt::print("{:<24} {:<12} {:>8}  {}\n", image.name, image.template_name, HumanSize(image.size_bytes),
               image.created.empty() ? "?" : image.created);
  return OkStatus();
}

Status RemoveImageCommand(const std::string& name) {
  const std::string store = ImageStoreRoot();
  NSBOX_RETURN_IF_ERROR(RequireRoot(store));
  (void)SweepStaleEntries(store);
  NSBOX_RETURN_IF_ERROR(RemoveImage(store, name));
  fmt::print(stderr, "nsbox image rm: removed image '{}'\n", name);
  return OkStatus();
}

}  // namespace

void RegisterImage(CLI::App& app, ExitCode& exit_code) {
  auto* image = app.add_subcommand("image", "build, list and remove root filesystem images (nsbox run --rootfs NAME)");
  image->require_subcommand(1);
  auto fail = [&exit_code](const std::string& verb, const Status& status) {
    if (status.ok()) return;
    fmt::print(stderr, "nsbox image {}: {}\n", verb, status.message());
    exit_code.value = kExitNsboxFailure;
  };

  static BuildOptions build_options;
  auto* build =
      image->add_subcommand("build", "build an image from a template (rootfs/templates/NAME.json or a .json path)");
  build->add_option("template", build_options.template_name, "template name or path to a template .json file")
      ->required();
  static std::string build_name;
  build->add_option("--name", build_name, "image name (default: the template's name)");
  build->callback([fail, build] {
    if (build->count("--name") > 0) build_options.name = build_name;
    Status status = BuildImage(build_options);
    fail("build", status);
    // An interrupted build ends with the conventional 128+signal code once its cleanup is done.
    if (!status.ok() && g_image_interrupted) std::exit(128 + g_image_interrupted);
  });

  static bool ls_json = false;
  auto* ls = image->add_subcommand("ls", "list images: name, template, size, created");
  ls->add_flag("--json", ls_json, "print a JSON array");
  ls->callback([fail] { fail("ls", ListImagesCommand(ls_json)); });

  static std::string rm_name;
  auto* rm = image->add_subcommand("rm", "remove an image");
  rm->add_option("name", rm_name, "image name")->required();
  rm->callback([fail] { fail("rm", RemoveImageCommand(rm_name)); });
}

}  // namespace nsbox::cli
