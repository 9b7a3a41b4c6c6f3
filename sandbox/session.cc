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

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "sandbox/base/defer.h"
#include "sandbox/base/fd_passing.h"
#include "sandbox/base/fs.h"
#include "sandbox/child.h"
#include "sandbox/enter.h"
#include "sandbox/launch.h"
#include "sandbox/launcher.h"
#include "sandbox/seccomp.h"
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
  // Each exec's helper hands its payload over to this process and exits (enter.h): orphans of our children must
  // become ours to wait for. A process-wide setting, so the embedder makes it (session.h), not the engine.
  int subreaper = 0;
  if (::prctl(PR_GET_CHILD_SUBREAPER, &subreaper, 0, 0, 0) != 0 || !subreaper)
    return Status::Error("starting a session needs a child subreaper: call prctl(PR_SET_CHILD_SUBREAPER, 1) first");
  // Every exec watches its program through pidfd_open (StartHelper): where a filter of the caller's or an old kernel
  // denies it, the session would start and then fail each exec, so it is refused now.
  if (UniqueFd probe(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0))); !probe)
    return Status::Errno("pidfd_open(self), which every exec of a session needs");
  // Resets this process's peak resident size before each payload starts (StartHelper); without it (an old kernel, a
  // restricted /proc) execs' peaks only read higher.
  session->clear_refs_fd_.reset(::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC));

  // The payloads' guard filter, compiled now rather than by the first exec: a session, a service's pooled one above
  // all, is made so that its first exec is as quick as the next.
  if (auto guard = GuardProgram(); !guard.ok()) return guard.status();

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
    // v1: pid 1 leaves the memory group again (ChildMain, step 2); the OOM killer then picks among the execs'.
    const CgroupSelfJoin leave = session->cgroup_->leave_join();
    if (plan.cgroup_join.memory_index >= 0 && leave.memory_index >= 0)
      plan.memory_leave_fd = leave.fds[leave.memory_index];
  }

  // 3. pid 1, in fresh namespaces. It stays until Terminate() or until this thread ends (PR_SET_PDEATHSIG).
  int raw_pidfd = -1;
  auto child = StartPid1(plan, session->cgroup_ ? session->cgroup_->clone_into_fd() : -1, &raw_pidfd);
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
    // Its namespaces, kept as descriptors now: pid 1 changes credentials once released, and is then no longer dumpable,
    // which a container's root without CAP_SYS_PTRACE (the owner of pid 1's namespace, user_ns.h) needs it to be.
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
  session->start_watchdog_.StartThread();  // after the last fork above
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
    resident_group_.reset();  // no call runs now (calls_mutex_), so no request holds the resident process
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

StatusOr<std::unique_ptr<CgroupChild>> SessionSandbox::StartExecGroup(uint64_t memory_max_bytes) {
  uint64_t n;
  {
    std::lock_guard lock(exec_groups_mutex_);
    std::erase_if(kept_exec_groups_, [](const auto& group) { return group->TryRemove(); });
    n = ++exec_group_counter_;
  }
  return cgroup_->CreateChild(fmt::format("exec-{}", n), memory_max_bytes);
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
  // What the memory limit counts, where the session has one: its processes, its tmpfs files and the kernel's memory
  // for them (inodes, dentries: a tree of a million hard links is seen here and nowhere else).
  if (cgroup_) {
    for (const char* file : {"/memory.current", "/memory.usage_in_bytes"}) {
      auto text = ReadFile(cgroup_->path() + file, 64);
      if (!text.ok()) continue;
      char* end = nullptr;
      errno = 0;
      unsigned long long value = std::strtoull(text->c_str(), &end, 10);
      if (errno == 0 && end != text->c_str()) return value;
    }
  }
  // Without a memory group: the processes' resident memory and what the tmpfs mounts hold.
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

}  // namespace nsbox
