// SessionSandbox: start a persistent pid 1, run execs through setns helpers, keep one resident process.
#include "sandbox/session.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "sandbox/base/defer.h"
#include "sandbox/base/fs.h"
#include "sandbox/child.h"
#include "sandbox/launch.h"
#include "sandbox/launcher.h"
#include "sandbox/enter.h"
#include "sandbox/stdin_feeder.h"
#include "sandbox/user_ns.h"

namespace nsbox {

namespace {

using Clock = std::chrono::steady_clock;

// From /proc/PID/status: the parent's pid (PPid) and the depth in pid namespaces (how many pids NSpid lists). False
// when the process is gone or the file unreadable.
bool ParentAndDepth(const char* pid, pid_t* parent, int* depth) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/status", pid);
  auto text = ReadFile(path, 1 << 16);
  if (!text.ok()) return false;
  *parent = -1;
  *depth = 0;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("PPid:")) *parent = static_cast<pid_t>(strtol(line.c_str() + 5, nullptr, 10));
    if (line.starts_with("NSpid:")) {
      std::istringstream pids(line.substr(6));
      std::string one;
      while (pids >> one) ++*depth;
    }
  }
  return *parent >= 0 && *depth > 0;
}

// Our children that live in a pid namespace below ours, other than `except` (pid 1): processes of the session that
// became ours without an exec's knowing, as clone(CLONE_PARENT) from an exec's program makes them under a profile
// that allows it. pid 1's exit waits until each is reaped, and only we, their parent, can reap them.
std::vector<pid_t> ChildrenInsideSandbox(pid_t except) {
  std::vector<pid_t> found;
  const std::string self_pid = std::to_string(::getpid());
  pid_t ignored_parent;
  int own_depth = 0;
  if (!ParentAndDepth(self_pid.c_str(), &ignored_parent, &own_depth)) return found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
    pid_t parent;
    int depth;
    if (!ParentAndDepth(entry->d_name, &parent, &depth)) continue;
    pid_t pid = static_cast<pid_t>(strtol(entry->d_name, nullptr, 10));
    if (parent == ::getpid() && depth > own_depth && pid != except) found.push_back(pid);
  }
  ::closedir(proc);
  return found;
}

// Reads and discards what is there without blocking.
void Discard(UniqueFd& fd) {
  char buffer[65536];
  while (fd) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) fd.reset();
    return;
  }
}

// Kills the exec's process group (its descendants that did not start a session of their own go with it).
void KillExec(SessionHelper& h) {
  if (h.reaped || h.pid <= 1) return;
  ::kill(-h.pid, SIGKILL);
  ::kill(h.pid, SIGKILL);
}

// Waits for the payload (our child: the supervisor is the subreaper its helper handed it to) and records its exit
// status and resource usage.
void Reap(SessionHelper& h) {
  if (h.reaped || h.pid <= 0) return;
  int status = 0;
  struct rusage usage = {};
  pid_t got;
  while ((got = ::wait4(h.pid, &status, __WALL, &usage)) < 0 && errno == EINTR) {
  }
  // ECHILD: Terminate() reaped it while ending the session; it was killed.
  if (got < 0) status = SIGKILL;
  h.reaped = true;
  h.exit_status = status;
  h.cpu_us = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL + usage.ru_utime.tv_usec +
             usage.ru_stime.tv_usec;
  h.max_rss_kb = usage.ru_maxrss;
}

// The client sent a byte or went away.
bool CancelRequested(short revents) { return revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR); }

// Bytes are waiting on the socket, or its other end is gone.
bool HasBytesWaiting(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// Opens the session's /workspace from a child that joins pid 1's user and mount namespaces. Needs no access to
// /proc/<pid 1>/root, which an unprivileged owner lacks (pid 1 is not dumpable). Call while single-threaded.
StatusOr<UniqueFd> OpenWorkspaceInside(int pid1_pidfd, const int ns_fds[6]) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return Status::Errno("socketpair(AF_UNIX)");
  UniqueFd ours(pair[0]), theirs(pair[1]);
  pid_t child = ::fork();
  if (child < 0) return Status::Errno("fork(workspace opener)");
  if (child == 0) {
    int user_and_mount[6] = {ns_fds[0], ns_fds[1], -1, -1, -1, -1};
    if (JoinSessionNamespaces(pid1_pidfd, user_and_mount, CLONE_NEWUSER | CLONE_NEWNS) != 0) ::_exit(errno);
    int fd = ::open("/workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) ::_exit(errno);
    ::_exit(SendFd(theirs.get(), fd) == 0 ? 0 : errno);
  }
  theirs.reset();
  int fd = ReceiveFd(ours.get());
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (fd >= 0) return UniqueFd(fd);
  int err = WIFEXITED(status) ? WEXITSTATUS(status) : EINTR;
  return Status::Errno("setns(session pid 1, user|mnt) + open(/workspace)", err);
}

}  // namespace

StatusOr<std::unique_ptr<SessionSandbox>> SessionSandbox::Start(Policy policy, SandboxHooks* hooks) {
  std::unique_ptr<SessionSandbox> session(new SessionSandbox(std::move(policy)));
  const Policy& p = session->policy_;
  // Each exec's helper hands its payload over to this process and exits (enter.h): orphans of our children become
  // ours to wait for.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) return Status::Errno("prctl(PR_SET_CHILD_SUBREAPER)");
  // Resets this process's peak resident size before each payload starts (StartHelper); without it (an old kernel, a
  // restricted /proc) execs' peaks only read higher.
  session->clear_refs_fd_.reset(::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC));

  // 1. The root, planned as `nsbox run` plans it (launcher.h).
  ChildPlan plan;
  EmptyCaps no_caps;
  NSBOX_RETURN_IF_ERROR(PlanPid1(p, no_caps, &plan));
  session->new_network_ = plan.new_network;
  plan.persistent = true;
  plan.argv.push_back(nullptr);
  plan.envp.push_back(nullptr);
  auto control = MakePipe(), sync = MakePipe();
  if (!control.ok()) return control.status();
  if (!sync.ok()) return sync.status();
  plan.control_fd = control->write.get();
  plan.sync_fd = sync->read.get();

  // 2. The session's cgroup, made before pid 1 exists: its limits hold for the whole session.
  if (const auto& limits = p.cgroup_limits()) {
    auto made = CreateSandboxCgroup(*limits);
    if (!made.ok()) return made.status().Wrap("setting up the session's cgroup limits");
    session->cgroup_ = std::move(*made);
    if (session->cgroup_->clone_into_fd() < 0) plan.cgroup_join = session->cgroup_->self_join();
  }

  // 3. pid 1, in fresh namespaces. It stays until Terminate() or until this thread ends (PR_SET_PDEATHSIG).
  int raw_pidfd = -1;
  SharedChildMemory unused;  // a session's pid 1 is always forked (plan.shares_memory is false)
  auto child = StartPid1(plan, session->cgroup_ ? session->cgroup_->clone_into_fd() : -1, &raw_pidfd, &unused);
  if (!child.ok()) return child.status();
  session->pid1_ = *child;
  session->pid1_pidfd_.reset(raw_pidfd);
  control->write.reset();
  sync->read.reset();
  Defer kill_on_error([&] {
    if (session) session->Terminate();
  });

  // 4. Into the cgroup (v1 has no CLONE_INTO_CGROUP), id maps, then release pid 1.
  if (session->cgroup_ && session->cgroup_->clone_into_fd() < 0 && plan.cgroup_join.count == 0) {
    if (Status s = session->cgroup_->AddProcess(*child); !s.ok()) return s.Wrap("joining the session's cgroup");
  }
  NSBOX_RETURN_IF_ERROR(ReleasePid1(*child, p, hooks, std::move(sync->write), [&]() -> Status {
    // While pid 1 is still dumpable (it changes credentials once released), keep its namespaces as descriptors.
    static const char* const kNamespaces[6] = {"user", "mnt", "pid", "net", "ipc", "uts"};
    for (int i = 0; i < 6; ++i) {
      std::string path = fmt::format("/proc/{}/ns/{}", *child, kNamespaces[i]);
      session->ns_fds_[i].reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!session->ns_fds_[i]) return Status::Errno(fmt::format("open({})", path));
    }
    return OkStatus();
  }));

  // 5. Wait for kReady (or the step that failed).
  InitMessage msg;
  size_t got = 0;
  while (got < sizeof msg) {
    struct pollfd fd = {control->read.get(), POLLIN, 0};
    int rc = ::poll(&fd, 1, 30'000);
    if (rc == 0) return Status::Error("the session's pid 1 did not get ready within 30 s");
    if (rc < 0 && errno != EINTR) return Status::Errno("poll(session control pipe)");
    ssize_t n = ::read(control->read.get(), reinterpret_cast<char*>(&msg) + got, sizeof msg - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error("the session's pid 1 ended during setup");
    got += static_cast<size_t>(n);
  }
  if (msg.kind == InitMessage::kSetupError)
    return Status::Error(fmt::format("sandbox setup failed at {}: {} ({})", msg.text, strerror(msg.err),
                                     ErrnoName(msg.err)));
  if (msg.kind != InitMessage::kReady) return Status::Error("the session's pid 1 sent an unexpected message");

  int ns_fds[6];
  for (int i = 0; i < 6; ++i) ns_fds[i] = session->ns_fds_[i].get();
  auto workspace = OpenWorkspaceInside(session->pid1_pidfd_.get(), ns_fds);
  if (!workspace.ok()) return workspace.status().Wrap("opening the session's /workspace");
  session->workspace_fd_ = std::move(*workspace);
  kill_on_error.Cancel();
  return session;
}

SessionSandbox::~SessionSandbox() { Terminate(); }

void SessionSandbox::Terminate(std::string_view why) {
  {
    std::lock_guard lock(end_cause_mutex_);
    if (!terminating_ && end_cause_.empty()) end_cause_ = why;
  }
  terminating_ = true;  // calls that begin from now on do nothing
  if (pid1_ > 0) {
    ::kill(pid1_, SIGKILL);  // the whole pid namespace goes with it
    // pid 1's exit waits until every process of its namespace is reaped, and the execs' payloads are ours to reap.
    std::set<pid_t> payloads;
    {
      std::lock_guard lock(payloads_mutex_);
      payloads = payloads_;
    }
    for (pid_t payload : payloads) {
      ::kill(payload, SIGKILL);
      // ECHILD: the exec's own thread reaped it first.
      while (::waitpid(payload, nullptr, __WALL) < 0 && errno == EINTR) {
      }
    }
    // pid 1 exits once every process of its namespace is reaped, so a child of ours in there that no exec knows of
    // (clone(CLONE_PARENT) under a profile that allows it) would make it, and us, wait for ever. The kill above
    // ends each of them; reap them while pid 1 has not exited (its pidfd turns readable when it has).
    for (;;) {
      struct pollfd fd = {pid1_pidfd_.get(), POLLIN, 0};
      int rc = pid1_pidfd_ ? ::poll(&fd, 1, 50) : 0;
      if (rc > 0 || (rc < 0 && errno != EINTR)) break;
      bool reaped_none = true;
      for (pid_t stray : ChildrenInsideSandbox(pid1_)) {
        if (::waitpid(stray, nullptr, __WALL | WNOHANG) > 0) reaped_none = false;
      }
      // Without a pidfd, nothing tells us pid 1 is done: stop once no stray is left to reap, and wait for it below.
      if (!pid1_pidfd_ && reaped_none) break;
    }
    while (::waitpid(pid1_, nullptr, __WALL) < 0 && errno == EINTR) {
    }
    pid1_ = -1;
  }
  // Every process is dead, so the calls still running end: wait for them (they read the cgroup in their reports).
  std::unique_lock calls(calls_mutex_);
  // The cgroup's destructor kills whatever is still in it (helpers too) and removes it, with the execs' groups.
  {
    std::lock_guard lock(exec_groups_mutex_);
    kept_exec_groups_.clear();
    spare_exec_group_.reset();
  }
  cgroup_.reset();
}

std::string SessionSandbox::SessionEndedReason(std::string_view what) {
  std::lock_guard lock(end_cause_mutex_);
  return fmt::format("the session ended while the {} ran{}", what, end_cause_.empty() ? "" : " (" + end_cause_ + ")");
}

StatusOr<std::unique_ptr<CgroupChild>> SessionSandbox::StartExecGroup() {
  if (!cgroup_) return std::unique_ptr<CgroupChild>();
  uint64_t n;
  {
    std::lock_guard lock(exec_groups_mutex_);
    if (spare_exec_group_) return std::move(spare_exec_group_);
    std::erase_if(kept_exec_groups_, [](const auto& group) { return group->TryRemove(); });
    n = ++exec_group_counter_;
  }
  return cgroup_->CreateChild(fmt::format("exec-{}", n));
}

void SessionSandbox::KeepExecGroup(std::unique_ptr<CgroupChild> group) {
  if (!group) return;
  std::lock_guard lock(exec_groups_mutex_);
  kept_exec_groups_.push_back(std::move(group));
}

void SessionSandbox::PrepareNextExec() {
  std::shared_lock call(calls_mutex_);  // Terminate removes the groups and the cgroup under the exclusive lock
  if (terminating_) return;
  if (cgroup_) {
    std::lock_guard lock(exec_groups_mutex_);
    std::erase_if(kept_exec_groups_, [](const auto& group) { return group->TryRemove(); });
    if (!spare_exec_group_) {
      auto made = cgroup_->CreateChild(fmt::format("exec-{}", ++exec_group_counter_));
      if (made.ok()) spare_exec_group_ = std::move(*made);  // a failure shows at the next exec, which makes its own
    }
  }
}

bool SessionSandbox::Alive() const {
  if (pid1_ <= 0) return false;
  struct pollfd fd = {pid1_pidfd_.get(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 0;
}

StatusOr<UniqueFd> SessionSandbox::OpenWorkspace() const {
  // A new open file description of the same directory: its users may seek and read it independently.
  int fd = ::openat(workspace_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Errno("openat(session /workspace, .)");
  if (!Alive()) {
    ::close(fd);
    return Status::Error("the session has ended");
  }
  return UniqueFd(fd);
}

uint64_t SessionSandbox::MemoryInUseBytes() const {
  uint64_t total = 0;
  // Resident memory of every process in the session's pid namespace.
  char link[64];
  const pid_t pid1 = pid1_;
  std::string ns_path = fmt::format("/proc/{}/ns/pid", pid1);
  ssize_t len = ::readlink(ns_path.c_str(), link, sizeof link - 1);
  if (len > 0) {
    std::string session_ns(link, static_cast<size_t>(len));
    if (DIR* proc = ::opendir("/proc")) {
      while (struct dirent* entry = ::readdir(proc)) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        std::string base = fmt::format("/proc/{}/", entry->d_name);
        ssize_t n = ::readlink((base + "ns/pid").c_str(), link, sizeof link - 1);
        if (n <= 0 || std::string(link, static_cast<size_t>(n)) != session_ns) continue;
        auto statm = ReadFile(base + "statm", 4096);
        if (!statm.ok()) continue;
        unsigned long long size = 0, resident = 0;
        if (sscanf(statm->c_str(), "%llu %llu", &size, &resident) == 2)
          total += resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
      }
      ::closedir(proc);
    }
  }
  // What the session's tmpfs mounts hold (files live in memory).
  for (const char* dir : {"workspace", "tmp", "home/sandbox", "dev/shm"}) {
    struct statfs fs;
    std::string path = fmt::format("/proc/{}/root/{}", pid1, dir);
    if (::statfs(path.c_str(), &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */)
      total += (fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
  }
  return total;
}

void SessionSandbox::Forget(pid_t payload) {
  std::lock_guard lock(payloads_mutex_);
  payloads_.erase(payload);
}

StatusOr<std::unique_ptr<SessionHelper>> SessionSandbox::StartHelper(const Executor& ex, int channel_fd,
                                                                      const CgroupSelfJoin* join,
                                                                      VforkWatchdog::Clock::time_point start_deadline) {
  if (!Alive()) return Status::Error("the session has ended");
  EnterPlan enter;
  ChildPlan& plan = enter.payload;
  EmptyCaps no_caps;
  NSBOX_RETURN_IF_ERROR(PlanPayloadCredentials(policy_, no_caps, &plan));
  plan.new_network = new_network_;
  plan.parent_death_signal = false;  // its helper exits at once; the session's pid namespace takes it down instead
  SetPlanProgram(plan, ex);

  auto out = MakePipe(), err = MakePipe(), control = MakePipe();
  for (auto* p : {&out, &err, &control})
    if (!p->ok()) return p->status().Wrap("creating pipes");
  plan.stdin_fd = ex.stdin_fd;
  plan.stdout_fd = out->write.get();
  plan.stderr_fd = err->write.get();
  plan.control_fd = control->write.get();
  plan.channel_fd = channel_fd;
  // The payload hands its seccomp listener over this socket when the profile asks for denial reports.
  UniqueFd seccomp_parent, seccomp_child;
  if (plan.seccomp && plan.seccomp->uses_notify) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      return Status::Errno("socketpair(AF_UNIX) for the seccomp listener");
    seccomp_parent.reset(pair[0]);
    seccomp_child.reset(pair[1]);
  }
  plan.seccomp_socket = seccomp_child.get();
  if (cgroup_) {
    plan.cgroup_join = join ? *join : cgroup_->self_join();
    if (plan.cgroup_join.count == 0) return Status::Error("the session's cgroup gives no way to join it");
  }
  enter.session_pidfd = pid1_pidfd_.get();
  for (int i = 0; i < 6; ++i) enter.ns_fds[i] = ns_fds_[i].get();
  pid_t payload = -1;
  enter.payload_pid = &payload;
  pid_t payload_started = 0;
  enter.payload_started = &payload_started;

  auto helper = std::make_unique<SessionHelper>();
  {
    // Registered under the lock so that Terminate() never misses an exec. The helper runs vfork-style: this thread
    // waits until the payload has called execve (or the helper failed), with every signal blocked meanwhile (the
    // helper and the payload share this thread's memory until then).
    std::lock_guard lock(payloads_mutex_);
    // Until the helper is reaped: the payload stays unreaped, its pid its own, meanwhile.
    VforkWatch watch(start_watchdog_, &payload_started, start_deadline);
    sigset_t all, old;
    sigfillset(&all);
    // The payload runs in this process's memory until its execve, which keeps the larger of that memory's high-water
    // mark and its own in the payload's peak (ru_maxrss): reset the mark to what is resident now, or every exec would
    // report the supervisor's largest size ever (a large output it held) as its peak. What stays counted is what the
    // supervisor has resident, a few MiB (it hands large buffers back to the system when it frees them: RunSupervisor).
    if (clear_refs_fd_) {
      ssize_t ignored = ::write(clear_refs_fd_.get(), "5", 1);
      (void)ignored;
    }
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t helper_pid = StartVforkChild(EnterSessionEntry, &enter);
    int start_err = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (helper_pid < 0) return Status::Errno("clone(CLONE_VM|CLONE_VFORK, exec helper)", start_err);
    // The helper has left (or is leaving): once it is reaped, the payload is our child.
    while (::waitpid(helper_pid, nullptr, __WALL) < 0 && errno == EINTR) {
    }
    helper->pid = payload;
    if (payload > 0) payloads_.insert(payload);
  }
  helper->out = std::move(out->read);
  helper->err = std::move(err->read);
  helper->control = ControlChannel(std::move(control->read));
  helper->seccomp.socket = std::move(seccomp_parent);
  SetNonBlocking(helper->out.get());
  SetNonBlocking(helper->err.get());
  if (helper->seccomp.socket) SetNonBlocking(helper->seccomp.socket.get());
  if (payload <= 0) {
    // The helper failed before the payload existed; its report is in the control pipe.
    helper->reaped = true;
    return helper;
  }
  // Our unreaped child: its pid cannot be reused before we wait for it.
  helper->pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, payload, 0)));
  if (!helper->pidfd) {
    Status s = Status::Errno(fmt::format("pidfd_open({})", payload));
    KillExec(*helper);
    Reap(*helper);
    Forget(payload);
    return s;
  }
  return helper;
}

// What the helper reported, denied calls, and the limits: the session's counters only grow, so this exec's share is
// what they grew by while it ran.
void SessionSandbox::GatherVerdict(SessionHelper& h, const CgroupStats* counters_before, VerdictInputs* in) {
  in->kind = VerdictInputs::Kind::kSessionExec;
  in->setup_failure = h.setup_failure;
  in->program_status = h.exit_status;
  if (h.exit_status && !h.setup_failure) {
    in->cpu_ms = h.cpu_us / 1000;
    in->peak_memory_bytes = static_cast<uint64_t>(h.max_rss_kb) * 1024;
  }
  h.seccomp.Report(in);
  if (!counters_before) return;
  if (!cgroup_) {
    in->limits = LimitsReport{};
    in->limits->backend = "none";
    return;
  }
  CgroupStats stats = cgroup_->ReadStats();
  stats.oom_kills -= std::min(stats.oom_kills, counters_before->oom_kills);
  stats.pids_limit_events -= std::min(stats.pids_limit_events, counters_before->pids_limit_events);
  stats.pids_limit_hit = stats.pids_limit_events > 0;
  stats.cpu_throttled_us -= std::min(stats.cpu_throttled_us, counters_before->cpu_throttled_us);
  in->limits = cgroup_->ReportFrom(*policy_.cgroup_limits(), stats);
}

Result SessionSandbox::Exec(Executor ex, int cancel_fd, const std::function<void(Result&)>& on_ran) {
  const auto started = Clock::now();
  std::shared_lock call(calls_mutex_);
  if (terminating_) return SetupError("the session is ending");
  if (ex.argv.empty()) return SetupError("nothing to run: empty command");
  if (std::string why = CheckOutputLimit(ex.output_limit_bytes); !why.empty()) return SetupError(why);
  const CgroupStats counters_before = cgroup_ ? cgroup_->ReadCounters() : CgroupStats{};
  // The program's stdin is a pipe the supervisor fills, never the descriptor the client sent (stdin_feeder.h).
  StdinFeeder stdin_feeder;
  if (ex.stdin_fd >= 0) {
    if (Status s = stdin_feeder.Start(ex.stdin_fd); !s.ok()) return SetupError(s.Wrap("creating pipes").message());
    ex.stdin_fd = stdin_feeder.child_end();
  }

  // The exec's own group: its time-out kills everything the exec started, however it detached (setsid, double fork).
  auto made = StartExecGroup();
  if (!made.ok()) return SetupError(made.status().Wrap("creating the exec's cgroup").message());
  std::unique_ptr<CgroupChild> exec_group = std::move(*made);
  CgroupSelfJoin exec_join;
  if (exec_group) exec_join = exec_group->self_join();
  auto started_helper = StartHelper(ex, -1, exec_group ? &exec_join : nullptr, started + ex.wall_timeout);
  if (!started_helper.ok()) {
    KeepExecGroup(std::move(exec_group));
    return SetupError(started_helper.status().message());
  }
  std::unique_ptr<SessionHelper> helper = std::move(*started_helper);
  stdin_feeder.ReleaseChildEnd();
  SessionHelper& h = *helper;
  Defer forget([&] {
    KillExec(h);
    Reap(h);
    Forget(h.pid);
    // What the exec started in a session of its own lives on in its group until it ends (or the session does).
    KeepExecGroup(std::move(exec_group));
  });

  VerdictInputs in;
  in.wall_timeout = ex.wall_timeout;
  auto kill_exec = [&] {
    KillExec(h);
    if (exec_group) (void)exec_group->KillAll();
  };
  Supervisor supervisor(ex.output_limit_bytes);
  supervisor.AddOutput(&h.out, &h.err);
  supervisor.AddStdin(&stdin_feeder);
  supervisor.AddSeccompListener(&h.seccomp, policy_.seccomp() ? policy_.seccomp()->notify_errno : 0);
  supervisor.AddSource([&] { return h.control.fd(); }, POLLIN, [&](short) { h.control.ReadSetupFailure(&h.setup_failure); });
  supervisor.SetDeadline(started + ex.wall_timeout, [&] {
    in.timed_out = true;
    supervisor.MarkEnding();
    kill_exec();
  });
  supervisor.AddSource([&] { return supervisor.ending() ? -1 : cancel_fd; }, POLLIN | POLLRDHUP, [&](short revents) {
    if (!revents || !CancelRequested(revents)) return;
    in.cancelled = true;
    supervisor.MarkEnding();
    kill_exec();
  });
  supervisor.AddSource([&] { return h.pidfd.get(); }, POLLIN, [&](short revents) {
    if (revents & POLLIN) Reap(h);
  });
  if (Status s = supervisor.Run([&] { return h.reaped; }); !s.ok()) return SetupError(s.message());
  // The payload has exited: what it wrote is in the pipes. Descendants that still hold them are not waited for.
  supervisor.DrainOutput();
  h.control.ReadSetupFailure(&h.setup_failure);

  supervisor.TakeOutput(&in);
  GatherVerdict(h, &counters_before, &in);
  if (terminating_) in.session_ended = SessionEndedReason("exec");
  in.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  Result result = MakeVerdict(std::move(in));
  if (on_ran) on_ran(result);
  return result;
}

void SessionSandbox::DropResident() {
  if (!resident_) return;
  KillExec(*resident_);
  if (!resident_->reaped) ::kill(resident_->pid, SIGKILL);
  Reap(*resident_);
  Forget(resident_->pid);
  resident_.reset();
  resident_channel_.reset();
  resident_lost_ = true;
}

ResidentTurn SessionSandbox::AskResident(const ResidentOptions& process, const std::string& request,
                                         const ResidentTurnOptions& options, int cancel_fd) {
  const auto started = Clock::now();
  ResidentTurn turn;
  std::shared_lock call(calls_mutex_);
  if (terminating_) {
    turn.result = SetupError("the session is ending");
    return turn;
  }
  std::lock_guard lock(resident_mutex_);
  // A process that died between requests (killed from an exec, say) is replaced, and the loss reported. So is one
  // whose channel holds bytes that no request asked for: its next answer could be anything.
  if (resident_) {
    struct pollfd fd = {resident_->pidfd.get(), POLLIN, 0};
    if (::poll(&fd, 1, 0) > 0) {
      DropResident();
    } else if (HasBytesWaiting(resident_channel_.get())) {
      DropResident();
      turn.restarted_out_of_step = true;
    }
  }
  if (!resident_) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      turn.result = SetupError(Status::Errno("socketpair(AF_UNIX, resident channel)").message());
      return turn;
    }
    UniqueFd ours(pair[0]), theirs(pair[1]);
    Executor ex;
    ex.argv = process.argv;
    ex.env = process.env;
    ex.umask = process.umask;
    auto helper = StartHelper(ex, theirs.get(), nullptr, started + options.wall_timeout);
    if (!helper.ok()) {
      turn.result = SetupError(helper.status().Wrap("starting the REPL interpreter").message());
      return turn;
    }
    resident_ = std::move(*helper);
    resident_channel_ = std::move(ours);
    turn.state_lost = resident_lost_;
    resident_lost_ = false;
  }
  turn.started = true;
  SessionHelper& h = *resident_;
  // Output of earlier requests' leftovers (background threads) is not this one's.
  Discard(h.out);
  Discard(h.err);
  h.control.ReadSetupFailure(&h.setup_failure);

  bool died = false;
  for (size_t done = 0; done < request.size();) {
    ssize_t n = ::send(resident_channel_.get(), request.data() + done, request.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      died = true;
      break;
    }
    done += static_cast<size_t>(n);
  }

  Supervisor supervisor(options.output_limit_bytes);
  supervisor.AddOutput(&h.out, &h.err);
  // A resident process outlives its requests: a thread answers its seccomp notifications between them.
  supervisor.AddSeccompListener(&h.seccomp, policy_.seccomp() ? policy_.seccomp()->notify_errno : 0, true);
  supervisor.AddSource([&] { return h.control.fd(); }, POLLIN, [&](short) { h.control.ReadSetupFailure(&h.setup_failure); });
  supervisor.SetDeadline(started + options.wall_timeout, [&] { turn.timed_out = true; });
  std::string answer;
  supervisor.AddSource([&] { return resident_channel_.get(); }, POLLIN, [&](short revents) {
    if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
    char buffer[65536];
    ssize_t n = ::recv(resident_channel_.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      answer.append(buffer, static_cast<size_t>(n));
      std::string why;
      const int framed = options.frame(answer, &why);
      if (framed > 0) turn.answered = true;
      if (framed < 0) turn.out_of_step = why.empty() ? "the channel is out of step" : why;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      died = true;
    }
  });
  supervisor.AddSource([&] { return h.pidfd.get(); }, POLLIN, [&](short revents) {
    if (revents & POLLIN) died = true;
  });
  supervisor.AddSource([&] { return cancel_fd; }, POLLIN | POLLRDHUP, [&](short revents) {
    if (revents && CancelRequested(revents)) turn.cancelled = true;
  });
  Status polled = supervisor.Run(
      [&] { return died || turn.answered || !turn.out_of_step.empty() || turn.timed_out || turn.cancelled; });
  if (!polled.ok()) {
    turn.result = SetupError(polled.message());
    return turn;
  }
  VerdictInputs in;
  if (turn.answered) {
    turn.answer = std::move(answer);
    supervisor.DrainOutput();  // what the process printed before it answered is in the pipes by now
    supervisor.TakeOutput(&in);
    turn.result = MakeVerdict(std::move(in));
  } else {
    // Timed out, cancelled, crashed or out of step: the process goes, and the next request starts a fresh one.
    KillExec(h);
    Reap(h);
    h.control.ReadSetupFailure(&h.setup_failure);
    supervisor.DrainOutput();
    supervisor.TakeOutput(&in);
    GatherVerdict(h, nullptr, &in);
    in.timed_out = turn.timed_out;
    in.cancelled = turn.cancelled;
    in.wall_timeout = options.wall_timeout;
    if (terminating_) turn.session_ended = SessionEndedReason("cell");
    turn.result = MakeVerdict(std::move(in));
    DropResident();
  }
  turn.result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  return turn;
}

}  // namespace nsbox
