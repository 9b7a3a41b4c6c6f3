// Test support: spawning nsbox and other programs with captured output, JSON parsing, and host-side observations.
#include "tests/support/run_nsbox.h"

#include "nsbox_config.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace nsbox::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> BuildEnv(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (auto& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// fork + exec with the given stdio; the child never returns.
pid_t Spawn(const std::vector<std::string>& argv, const SpawnOptions& options, int in, int out, int err) {
  std::vector<std::string> args = argv, env = BuildEnv(options.extra_env);
  auto argp = Pointers(args), envp = Pointers(env);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    if (in >= 0) ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) _exit(126);
    // As from an interactive shell: the terminal is the session's controlling terminal.
    if (options.stdin_is_controlling_tty && (::setsid() < 0 || ::ioctl(0, TIOCSCTTY, 0) != 0)) _exit(126);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(argp[0], argp.data(), envp.data());
    _exit(127);
  }
  return pid;
}

void DecodeStatus(int status, ProcessResult& r) {
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    r.term_signal = WTERMSIG(status);
    r.exit_code = 128 + r.term_signal;
  }
}

}  // namespace

std::string NsboxBinary() {
  if (const char* env = std::getenv("NSBOX_BIN"); env && *env) return env;
  return NSBOX_TEST_BIN;
}

std::string ProbePath(const std::string& name) { return std::string(NSBOX_TEST_PROBES_DIR) + "/" + name; }

ProcessResult RunProcess(const std::vector<std::string>& argv, const SpawnOptions& options) {
  int out[2], err[2], in[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
  int stdin_fd = options.stdin_fd;
  if (stdin_fd < 0) {
    if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    stdin_fd = in[0];
  }
  const auto started = Clock::now();
  pid_t pid = Spawn(argv, options, stdin_fd, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  if (in[0] >= 0) {
    ::close(in[0]);
    // Small inputs only (tests); a big one would need polling alongside the reads.
    size_t done = 0;
    signal(SIGPIPE, SIG_IGN);
    while (done < options.stdin_data.size()) {
      ssize_t n = ::write(in[1], options.stdin_data.data() + done, options.stdin_data.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(in[1]);
  }
  ProcessResult r;
  int fds[2] = {out[0], err[0]};
  std::string* sinks[2] = {&r.out, &r.err};
  char buf[65536];
  const auto deadline = started + options.timeout;
  while (fds[0] >= 0 || fds[1] >= 0) {
    struct pollfd p[2];
    int map[2], n = 0;
    for (int i = 0; i < 2; ++i)
      if (fds[i] >= 0) {
        p[n] = {fds[i], POLLIN, 0};
        map[n++] = i;
      }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.guard_fired = true;
      ::kill(pid, SIGKILL);
      break;
    }
    ::poll(p, static_cast<nfds_t>(n), static_cast<int>(left));
    for (int k = 0; k < n; ++k) {
      if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = ::read(fds[map[k]], buf, sizeof buf);
      if (got > 0) {
        sinks[map[k]]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[map[k]]);
        fds[map[k]] = -1;
      }
    }
  }
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  int status = 0;
  struct rusage usage = {};
  ::wait4(pid, &status, 0, &usage);
  r.max_rss_kb = usage.ru_maxrss;
  r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  DecodeStatus(status, r);
  return r;
}

int BackgroundProcess::Wait() {
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  pid = -1;
  return status;
}

std::string BackgroundProcess::Out() const { return ReadWhole(out_path); }

BackgroundProcess StartProcess(const std::vector<std::string>& argv, const SpawnOptions& options) {
  static std::atomic<int> counter{0};
  BackgroundProcess bg;
  std::string base = std::filesystem::temp_directory_path() /
                     ("nsbox-test-bg-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  bg.out_path = base + ".out";
  bg.err_path = base + ".err";
  int out = ::open(bg.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int err = ::open(bg.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int in = options.stdin_fd >= 0 ? options.stdin_fd : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  bg.pid = Spawn(argv, options, in, out, err);
  ::close(out);
  ::close(err);
  if (options.stdin_fd < 0) ::close(in);
  // The files are only read through their paths; unlinking them after the read is the caller's business, so keep
  // them out of the way: they are removed at exit.
  static std::vector<std::string> to_remove;
  static bool registered = false;
  to_remove.push_back(bg.out_path);
  to_remove.push_back(bg.err_path);
  if (!registered) {
    registered = true;
    std::atexit([] {
      for (const auto& p : to_remove) ::unlink(p.c_str());
    });
  }
  return bg;
}

std::string NsboxResult::Describe() const {
  std::ostringstream s;
  s << "nsbox exit " << process.exit_code << (process.guard_fired ? " (test guard fired)" : "") << "\nstdout: "
    << process.out.substr(0, 4000) << "\nstderr: " << process.err.substr(0, 4000);
  return s.str();
}

NsboxResult RunNsboxJson(const std::vector<std::string>& args, const SpawnOptions& options) {
  std::vector<std::string> argv = {NsboxBinary(), "run", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  NsboxResult r;
  r.process = RunProcess(argv, options);
  r.json = nlohmann::json::parse(r.process.out, nullptr, /*allow_exceptions=*/false);
  if (r.json.is_discarded() || !r.json.is_object()) r.json = nlohmann::json();
  return r;
}

NsboxResult RunPython(const std::string& code, const std::vector<std::string>& options, const SpawnOptions& spawn) {
  std::vector<std::string> args = options;
  args.insert(args.end(), {"--lang", "python", "--code", std::string(kPythonPrelude) + code});
  return RunNsboxJson(args, spawn);
}

NsboxResult RunShell(const std::string& code, const std::vector<std::string>& options, const SpawnOptions& spawn) {
  std::vector<std::string> args = options;
  args.insert(args.end(), {"--lang", "sh", "--code", code});
  return RunNsboxJson(args, spawn);
}

ProcessResult RunNsboxRaw(const std::vector<std::string>& args, const SpawnOptions& options) {
  std::vector<std::string> argv = {NsboxBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, options);
}

const char* const kPythonPrelude = R"PY(
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def err(fn, *args):
    try:
        fn(*args)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def _arg(a):
    if isinstance(a, int): return ctypes.c_long(a)
    return a
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    if r == -1:
        e = ctypes.get_errno()
        return errno.errorcode.get(e, str(e))
    return "ok"
)PY";

const char* const kPid1SchedulingLevers = R"PY(
import struct
IDLE_IO = 3 << 13  # IOPRIO_CLASS_IDLE
libc.syscall.argtypes = None
def ioprio_get(who):
    return libc.syscall(ctypes.c_long(252), ctypes.c_long(1), ctypes.c_long(who))
before = (os.getpriority(os.PRIO_PROCESS, 1), os.sched_getscheduler(1), os.sched_getaffinity(1), ioprio_get(1))
one_cpu = {min(os.sched_getaffinity(0))}
# struct sched_attr: size, policy, flags, nice, priority, runtime, deadline, period (SCHED_IDLE, nice 19).
attr = ctypes.create_string_buffer(struct.pack("IIQiIQQQ", 48, os.SCHED_IDLE, 0, 19, 0, 0, 0, 0))
print(err(os.setpriority, os.PRIO_PROCESS, 1, 19), err(os.setpriority, os.PRIO_PGRP, 1, 19),
      err(os.setpriority, os.PRIO_USER, 0, 19), err(os.setpriority, os.PRIO_USER, os.getuid(), 19),
      err(os.sched_setscheduler, 1, os.SCHED_IDLE, os.sched_param(0)), err(os.sched_setparam, 1, os.sched_param(0)),
      sc(314, 1, attr, 0), err(os.sched_setaffinity, 1, one_cpu),
      sc(251, 1, 1, IDLE_IO), sc(251, 2, 1, IDLE_IO), sc(251, 3, 0, IDLE_IO))
after = (os.getpriority(os.PRIO_PROCESS, 1), os.sched_getscheduler(1), os.sched_getaffinity(1), ioprio_get(1))
print("pid 1 unchanged" if after == before else f"pid 1 changed: {before} -> {after}")
me = os.getpid()
print(err(os.setpriority, os.PRIO_PROCESS, 0, 15), err(os.setpriority, os.PRIO_PROCESS, me, 16),
      err(os.sched_setscheduler, 0, os.SCHED_BATCH, os.sched_param(0)), sc(314, me, attr, 0),
      err(os.sched_setaffinity, 0, one_cpu), sc(251, 1, 0, IDLE_IO), sc(251, 1, me, IDLE_IO),
      os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0) == os.SCHED_IDLE)
)PY";

const char* const kPid1HighBitLevers = R"PY(
import struct
HI = 1 << 32  # the kernel reads these arguments as 32-bit ints: 1 | HI is pid 1 to it
IDLE_IO = 3 << 13
libc.syscall.argtypes = None
def ioprio_get(who):
    return libc.syscall(ctypes.c_long(252), ctypes.c_long(1), ctypes.c_long(who))
before = (os.getpriority(os.PRIO_PROCESS, 1), os.sched_getscheduler(1), os.sched_getaffinity(1), ioprio_get(1),
          __import__("resource").prlimit(1, __import__("resource").RLIMIT_CPU))
rl = ctypes.create_string_buffer(struct.pack("QQ", 1, 1))
param = ctypes.create_string_buffer(struct.pack("i", 0))
attr = ctypes.create_string_buffer(struct.pack("IIQiIQQQ", 48, os.SCHED_IDLE, 0, 19, 0, 0, 0, 0))
mask = ctypes.create_string_buffer(struct.pack("Q", 1 << min(os.sched_getaffinity(0))))
print(sc(302, 1 | HI, 0, rl, 0), sc(141, 0 | HI, 1 | HI, 19), sc(141, 1 | HI, 1, 19), sc(141, 2 | HI, 0, 19),
      sc(144, 1 | HI, 5, param), sc(142, 1 | HI, param), sc(314, 1 | HI, attr, 0), sc(203, 1 | HI, 8, mask),
      sc(251, 1 | HI, 1 | HI, IDLE_IO), sc(251, 2 | HI, 1, IDLE_IO), sc(251, 3 | HI, 0, IDLE_IO))
after = (os.getpriority(os.PRIO_PROCESS, 1), os.sched_getscheduler(1), os.sched_getaffinity(1), ioprio_get(1),
         __import__("resource").prlimit(1, __import__("resource").RLIMIT_CPU))
print("pid 1 unchanged" if after == before else f"pid 1 changed: {before} -> {after}")
)PY";

std::vector<pid_t> PidsWithMarker(const std::string& marker) {
  std::vector<pid_t> pids;
  DIR* d = ::opendir("/proc");
  if (!d) return pids;
  const pid_t self = ::getpid();
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (!end || *end || pid <= 0 || pid == self) continue;
    for (const char* file : {"cmdline", "environ"}) {
      std::string text = ReadWhole("/proc/" + std::string(e->d_name) + "/" + file);
      if (text.find(marker) != std::string::npos) {
        // A zombie awaiting its parent is no longer running code; it still counts as left behind.
        pids.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
  }
  ::closedir(d);
  return pids;
}

bool WaitForNoPidsWithMarker(const std::string& marker, std::chrono::milliseconds within) {
  const auto until = Clock::now() + within;
  while (!PidsWithMarker(marker).empty()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool WaitForPidWithMarker(const std::string& marker, std::chrono::milliseconds within) {
  return WaitForPidsWithMarker(marker, 1, within);
}

bool WaitForPidsWithMarker(const std::string& marker, size_t count, std::chrono::milliseconds within) {
  const auto until = Clock::now() + within;
  while (PidsWithMarker(marker).size() < count) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::vector<pid_t> ProgramsWithMarker(const std::string& marker) {
  std::vector<pid_t> programs;
  for (pid_t pid : PidsWithMarker(marker)) {
    std::string comm = ReadWhole("/proc/" + std::to_string(pid) + "/comm");
    if (comm != "nsbox\n" && !comm.empty()) programs.push_back(pid);
  }
  return programs;
}

bool ProgramWithMarkerNamed(const std::string& marker, const std::string& comm) {
  for (pid_t pid : ProgramsWithMarker(marker))
    if (ReadWhole("/proc/" + std::to_string(pid) + "/comm") == comm + "\n") return true;
  return false;
}

bool WaitForProgramsWithMarker(const std::string& marker, size_t count, std::chrono::milliseconds within) {
  const auto until = Clock::now() + within;
  while (ProgramsWithMarker(marker).size() < count) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::vector<std::string> MountLinesContaining(const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(ReadWhole("/proc/self/mounts"));
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  return lines;
}

std::string UniqueMarker(const std::string& what) {
  static std::atomic<int> counter{0};
  static std::mt19937_64 rng{std::random_device{}()};
  return "nsbox-test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(rng() % 1000000);
}

TempDir::TempDir() {
  std::string tmpl = std::filesystem::temp_directory_path() / "nsbox-test-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& contents, int mode) const {
  std::string path = path_ + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << contents;
  }
  ::chmod(path.c_str(), static_cast<mode_t>(mode));
  return path;
}

namespace {

// `dir` as "<label>" and each directory below it as "<label>/<child>".
void AddGroup(const std::filesystem::path& dir, const std::string& label, std::set<std::string>* names) {
  names->insert(label);
  std::error_code ec;
  for (const auto& child : std::filesystem::directory_iterator(dir, ec))
    if (child.is_directory(ec)) names->insert(label + "/" + child.path().filename().string());
}

}  // namespace

// v1 groups are nsbox-<id> in each hierarchy's root, v2 groups <id> under <root>/nsbox.
size_t NsboxZombiesOfInit(bool session_leaders) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    if (stat.substr(open + 1, close - open - 1).find("nsbox") == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));  // "state ppid pgrp session ..."
    std::string state;
    long ppid = 0, pgrp = 0, sid = 0;
    fields >> state >> ppid >> pgrp >> sid;
    if (state == "Z" && ppid == 1 && (!session_leaders || sid == std::stol(name))) ++n;
  }
  return n;
}

std::set<std::string> NsboxGroups() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& hierarchy : std::filesystem::directory_iterator("/sys/fs/cgroup", ec)) {
    std::error_code inner;
    if (!hierarchy.is_directory(inner) || hierarchy.is_symlink(inner)) continue;
    const std::string h = hierarchy.path().filename().string();
    for (const auto& e : std::filesystem::directory_iterator(hierarchy.path(), inner))
      if (e.path().filename().string().starts_with("nsbox-"))
        AddGroup(e.path(), h + "/" + e.path().filename().string(), &names);
    for (const auto& e : std::filesystem::directory_iterator(hierarchy.path() / "nsbox", inner))
      AddGroup(e.path(), h + "/nsbox/" + e.path().filename().string(), &names);
  }
  for (const auto& e : std::filesystem::directory_iterator("/sys/fs/cgroup/nsbox", ec))
    AddGroup(e.path(), "nsbox/" + e.path().filename().string(), &names);
  return names;
}

bool WaitForGroups(const std::set<std::string>& expected) {
  for (int i = 0; i < 1500 && NsboxGroups() != expected; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return NsboxGroups() == expected;
}

std::string MemoryWatcherScript() {
  std::ifstream in(std::string(NSBOX_SOURCE_DIR) + "/tests/probes/memory_watcher.py");
  std::string script((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (script.empty()) throw std::runtime_error("tests/probes/memory_watcher.py is missing or empty");
  return script;
}

MemoryWatcherVerdict ParseMemoryWatcherVerdict(const std::string& lines) {
  MemoryWatcherVerdict verdict;
  std::istringstream in(lines);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string pid, comm, mem, exe;
    fields >> pid >> comm >> mem;
    if (comm == "became") {
      ++verdict.caught_before_execve;
      continue;
    }
    if (!(fields >> exe)) continue;
    // Its exe is nsbox, or not readable at all (not dumpable): the process still runs in nsbox's memory.
    const bool nsbox_memory = exe == "?" || std::filesystem::path(exe).filename().string().starts_with("nsbox");
    if (nsbox_memory && mem == "open") verdict.opened_in_nsbox_memory.push_back(line);
  }
  return verdict;
}

}  // namespace nsbox::testing
