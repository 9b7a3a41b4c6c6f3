// SessionSandbox: start a persistent pid 1, run execs through setns helpers, keep a REPL, report changed files.
#include "sandbox/session.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "sandbox/base/defer.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/clone.h"
#include "sandbox/base/fd_passing.h"
#include "sandbox/child.h"
#include "sandbox/launch.h"
#include "sandbox/enter.h"
#include "sandbox/output_buffer.h"
#include "sandbox/stdin_feeder.h"
#include "sandbox/user_ns.h"
#include "sandbox/workspace_snapshot.h"

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

// Reads what is there without blocking; false once the stream ended.
void Drain(UniqueFd& fd, OutputBuffer* sink) {
  char buffer[65536];
  while (fd) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n > 0) {
      if (sink) sink->Append(std::string_view(buffer, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) fd.reset();
    return;
  }
}

void ReadControl(SessionHelper& h) {
  char buffer[4096];
  while (h.control) {
    ssize_t n = ::read(h.control.get(), buffer, sizeof buffer);
    if (n > 0) {
      h.control_bytes.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) h.control.reset();
    break;
  }
  while (h.control_bytes.size() >= sizeof(InitMessage)) {
    InitMessage msg;
    memcpy(&msg, h.control_bytes.data(), sizeof msg);
    h.control_bytes.erase(0, sizeof msg);
    // The exit itself is learned from wait4 (Reap): the payload is our child.
    if (msg.kind == InitMessage::kSetupError && !h.have_setup_error) {
      h.setup_error = msg;
      h.have_setup_error = true;
    }
  }
}

// Takes the payload's seccomp listener when it arrives. An exec's loop answers its notifications itself (threaded
// false); a REPL interpreter outlives its cells, so a thread answers for it between them.
void ReceiveListener(SessionHelper& h, const Policy& policy, bool threaded) {
  if (!h.seccomp_socket) return;
  int fd = ReceiveFd(h.seccomp_socket.get());
  if (fd < 0 && errno == EAGAIN) return;
  if (fd >= 0) {
    h.notifier = std::make_unique<SeccompNotifier>(UniqueFd(fd), policy.seccomp()->notify_errno);
    if (threaded) h.notifier->Start();
  }
  h.seccomp_socket.reset();  // one listener per payload; end-of-file means it never got that far
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
  h.exit_message.kind = InitMessage::kExited;
  h.exit_message.value = status;
  h.exit_message.cpu_us = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL + usage.ru_utime.tv_usec +
                          usage.ru_stime.tv_usec;
  h.exit_message.max_rss_kb = usage.ru_maxrss;
  h.have_exit = true;
}

// The verdict on one exec, from the helper's reports.
void FillVerdict(const SessionHelper& h, bool timed_out, bool cancelled, std::chrono::milliseconds timeout,
                 Result* result) {
  if (h.have_setup_error) {
    result->status = RunStatus::kSetupError;
    result->reason = fmt::format("sandbox setup failed at {}: {} ({})", h.setup_error.text, strerror(h.setup_error.err),
                                 ErrnoName(h.setup_error.err));
    return;
  }
  if (h.have_exit) {
    result->cpu_ms = h.exit_message.cpu_us / 1000;
    result->peak_memory_bytes = static_cast<uint64_t>(h.exit_message.max_rss_kb) * 1024;
  }
  if (timed_out || cancelled) {
    result->status = RunStatus::kTimeout;
    result->signal = SIGKILL;
    result->reason = cancelled ? "cancelled" :
        fmt::format("wall-clock time limit of {} ms exceeded; the exec and its process group were killed "
                    "(the session lives on)", timeout.count());
    return;
  }
  if (!h.have_exit) {
    result->status = RunStatus::kSetupError;
    result->reason = "the exec helper ended without reporting (the session is ending?)";
    return;
  }
  int ws = h.exit_message.value;
  if (WIFEXITED(ws)) {
    result->exit_code = WEXITSTATUS(ws);
    result->status = result->exit_code == 0 ? RunStatus::kOk : RunStatus::kExit;
  } else if (WIFSIGNALED(ws)) {
    result->signal = WTERMSIG(ws);
    result->status = result->signal == SIGSYS ? RunStatus::kViolation : RunStatus::kSignal;
  }
  result->reason = result->status == RunStatus::kViolation ? "killed by the seccomp policy (SIGSYS)" : ExitReason(ws);
}

nlohmann::json ChangedFilesJson(const StatusOr<WorkspaceSnapshot>& before, int workspace_fd) {
  nlohmann::json list = nlohmann::json::array();
  if (!before.ok() || workspace_fd < 0) return list;
  auto after = SnapshotWorkspace(workspace_fd);
  if (!after.ok()) return list;
  for (const auto& file : ChangedFiles(*before, *after))
    list.push_back({{"path", "/workspace/" + file.path}, {"size", file.size}});
  return list;
}

StatusOr<WorkspaceSnapshot> Snapshot(int workspace_fd) {
  if (workspace_fd < 0) return Status::Error("no workspace");
  return SnapshotWorkspace(workspace_fd);
}

int PollMs(Clock::time_point deadline, bool killing) {
  if (killing) return 50;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left) + 1;
}

bool CancelRequested(const struct pollfd& fd) { return fd.revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR); }

// The most one answer of the REPL driver takes on its channel: the driver cuts a value and an exception to 64 Ki
// characters and a traceback to 256 Ki, at most 12 bytes each once JSON-escaped. More is a cell writing to the
// channel itself, and is not buffered.
constexpr size_t kMaxReplyBytes = 8 << 20;

// Whether `line` is the driver's answer to cell `id`: one JSON object with that id, and parts of the driver's types.
bool ParseReply(std::string_view line, uint64_t id, nlohmann::json* reply) {
  *reply = nlohmann::json::parse(line, nullptr, false);
  if (!reply->is_object()) return false;  // a parse error (discarded) too
  auto got = reply->find("id");
  if (got == reply->end() || !got->is_number_unsigned() || got->get<uint64_t>() != id) return false;
  for (const char* key : {"value", "exception", "traceback"}) {
    auto part = reply->find(key);
    if (part != reply->end() && !part->is_null() && !part->is_string()) return false;
  }
  auto exit_code = reply->find("exit_code");
  return exit_code == reply->end() || exit_code->is_null() || exit_code->is_number_integer();
}

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
  // Each exec's helper hands its payload over to this process and exits (enter.h): orphans of our children must
  // become ours to wait for. A process-wide setting, so the embedder makes it (session.h), not the engine.
  int subreaper = 0;
  if (::prctl(PR_GET_CHILD_SUBREAPER, &subreaper, 0, 0, 0) != 0 || !subreaper)
    return Status::Error("starting a session needs a child subreaper: call prctl(PR_SET_CHILD_SUBREAPER, 1) first");
  // Resets this process's peak resident size before each payload starts (StartHelper); without it (an old kernel, a
  // restricted /proc) execs' peaks only read higher.
  session->clear_refs_fd_.reset(::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC));
  // The next exec may be prepared up to its seccomp filter where what follows the filter is allowed (ParkedExec).
  session->parking_ = !p.seccomp() || p.seccomp()->allows_parking;

  // 1. The root, planned as `nsbox run` plans it.
  auto mounts = PlanChildRoot(p);
  if (!mounts.ok()) return mounts.status();
  ChildPlan plan;
  plan.mounts = std::move(*mounts);
  plan.hostname = p.hostname();
  plan.new_network = p.network() == NetworkMode::kNone;
  session->new_network_ = plan.new_network;
  plan.uid = p.sandbox_uid();
  plan.gid = p.sandbox_gid();
  const bool privileged = ::geteuid() == 0;
  plan.may_setgroups = privileged;
  plan.persistent = true;
  plan.argv.push_back(nullptr);
  plan.envp.push_back(nullptr);
  cap_t no_caps = cap_init();
  if (!no_caps) return Status::Errno("cap_init");
  Defer free_caps([&] { cap_free(no_caps); });
  plan.no_caps = no_caps;

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
  uint64_t flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
  if (plan.new_network) flags |= CLONE_NEWNET;
  int raw_pidfd = -1;
  pid_t child = CloneWithPidfd(flags, &raw_pidfd, session->cgroup_ ? session->cgroup_->clone_into_fd() : -1);
  if (child < 0) return Status::Errno("clone3(CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS|...)");
  if (child == 0) ChildMain(plan);  // never returns
  session->pid1_ = child;
  session->pid1_pidfd_.reset(raw_pidfd);
  control->write.reset();
  sync->read.reset();
  Defer kill_on_error([&] {
    if (session) session->Terminate();
  });

  // 4. Into the cgroup (v1 has no CLONE_INTO_CGROUP), id maps, then release pid 1.
  if (session->cgroup_ && session->cgroup_->clone_into_fd() < 0 && plan.cgroup_join.count == 0) {
    if (Status s = session->cgroup_->AddProcess(child); !s.ok()) return s.Wrap("joining the session's cgroup");
  }
  if (Status s = WriteIdMaps(child, p, privileged); !s.ok()) return s.Wrap("writing the user namespace id maps");
  if (hooks) {
    if (Status s = hooks->OnChildCreated(child); !s.ok()) return s;
  }
  // While pid 1 is still dumpable (it changes credentials once released), keep its namespaces as descriptors.
  static const char* const kNamespaces[6] = {"user", "mnt", "pid", "net", "ipc", "uts"};
  for (int i = 0; i < 6; ++i) {
    std::string path = fmt::format("/proc/{}/ns/{}", child, kNamespaces[i]);
    session->ns_fds_[i].reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!session->ns_fds_[i]) return Status::Errno(fmt::format("open({})", path));
  }
  const char go = 'G';
  if (::write(sync->write.get(), &go, 1) != 1) return Status::Errno("write(sync pipe)");
  sync->write.reset();

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
    if (parked_ && parked_->helper) parked_->helper->reaped = true;  // with the other payloads, above
    parked_.reset();
    kept_exec_groups_.clear();
    spare_exec_group_.reset();
  }
  cgroup_.reset();
}

ParkedExec::~ParkedExec() {
  if (mapping) ::munmap(mapping, ParkedRequest::kMappingBytes);
}

void SessionSandbox::DropParked(std::unique_ptr<ParkedExec> parked) {
  if (parked->helper && !parked->helper->reaped && parked->helper->pid > 0) {
    // Through its pidfd (our child, not yet waited for): it may still be preparing, and nothing waits for it.
    ::syscall(SYS_pidfd_send_signal, parked->helper->pidfd.get(), SIGKILL, nullptr, 0);
    Reap(*parked->helper);
    Forget(parked->helper->pid);
  }
  KeepExecGroup(std::move(parked->group));
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
  Park();
}

void SessionSandbox::Park() {
  if (!parking_) return;
  {
    std::lock_guard lock(exec_groups_mutex_);
    if (parked_) return;
  }
  // Any failure here leaves the next exec to start its own payload, and to report what failed.
  auto group = StartExecGroup();
  if (!group.ok()) return;
  auto parked = std::make_unique<ParkedExec>();
  parked->group = std::move(*group);
  void* mapping = ::mmap(nullptr, ParkedRequest::kMappingBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto park = MakePipe();
  if (mapping != MAP_FAILED) parked->mapping = mapping;
  if (!parked->mapping || !park.ok()) return DropParked(std::move(parked));
  CgroupSelfJoin exec_join;
  if (parked->group) exec_join = parked->group->self_join();
  Executor program;  // its own comes with the request
  auto helper = StartHelper(program, -1, parked->group ? &exec_join : nullptr, park->read.get(),
                            static_cast<const ParkedRequest*>(mapping));
  if (!helper.ok() || (*helper)->pid <= 0) return DropParked(std::move(parked));
  parked->helper = std::move(*helper);
  parked->park = std::move(park->write);
  {
    std::lock_guard lock(exec_groups_mutex_);
    if (!parked_ && !terminating_) {
      parked_ = std::move(parked);
      return;
    }
  }
  DropParked(std::move(parked));  // another call parked one meanwhile, or the session ends
}

std::unique_ptr<ParkedExec> SessionSandbox::TakeParked() {
  std::unique_ptr<ParkedExec> parked;
  {
    std::lock_guard lock(exec_groups_mutex_);
    parked = std::move(parked_);
  }
  if (!parked) return nullptr;
  // Still waiting: not exited (a program of the session may have killed it: same user), nothing reported.
  struct pollfd fds[2] = {{parked->helper->pidfd.get(), POLLIN, 0}, {parked->helper->control.get(), POLLIN, 0}};
  if (::poll(fds, 2, 0) != 0) {
    DropParked(std::move(parked));
    return nullptr;
  }
  return parked;
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
  // Not the parked payload's: a copy of the supervisor's pages, nothing of the session's programs yet.
  std::string parked;
  {
    std::lock_guard lock(exec_groups_mutex_);
    if (parked_ && parked_->helper) parked = std::to_string(parked_->helper->pid);
  }
  ssize_t len = ::readlink(ns_path.c_str(), link, sizeof link - 1);
  if (len > 0) {
    std::string session_ns(link, static_cast<size_t>(len));
    if (DIR* proc = ::opendir("/proc")) {
      while (struct dirent* entry = ::readdir(proc)) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9' || entry->d_name == parked) continue;
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
                                                                      const CgroupSelfJoin* join, int park_fd,
                                                                      const ParkedRequest* request,
                                                                      VforkWatchdog::Clock::time_point start_deadline) {
  if (!Alive()) return Status::Error("the session has ended");
  EnterPlan enter;
  ChildPlan& plan = enter.payload;
  plan.new_network = new_network_;
  plan.uid = policy_.sandbox_uid();
  plan.gid = policy_.sandbox_gid();
  plan.may_setgroups = ::geteuid() == 0;
  plan.seccomp = policy_.seccomp().get();
  auto guard = Pid1GuardProgram();
  if (!guard.ok()) return guard.status();
  plan.pid1_guard = *guard;
  plan.parent_death_signal = false;  // its helper exits at once; the session's pid namespace takes it down instead
  SetPlanProgram(plan, ex);
  cap_t no_caps = cap_init();
  if (!no_caps) return Status::Errno("cap_init");
  Defer free_caps([&] { cap_free(no_caps); });
  plan.no_caps = no_caps;

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
  plan.park_fd = park_fd;
  enter.request = request;
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
    // A parked payload is a fork instead: its mark starts at what it copied, and the supervisor's own stays.
    if (clear_refs_fd_ && park_fd < 0) {
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
  helper->control = std::move(control->read);
  helper->seccomp_socket = std::move(seccomp_parent);
  SetNonBlocking(helper->out.get());
  SetNonBlocking(helper->err.get());
  SetNonBlocking(helper->control.get());
  if (helper->seccomp_socket) SetNonBlocking(helper->seccomp_socket.get());
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

// Denied calls, limits, and the OOM verdict (the session's cgroup counted an OOM kill during this exec).
void SessionSandbox::FinishReport(SessionHelper& h, const CgroupStats& counters_before, Result* result) {
  if (h.notifier) {
    h.notifier->Stop();
    result->denied_syscalls = h.notifier->Denied();
    result->denied_syscalls_capped = h.notifier->Capped();
  }
  if (!cgroup_) {
    LimitsReport none;
    none.backend = "none";
    result->limits = none;
    return;
  }
  // The session's counters only grow: this exec's share is what they grew by while it ran.
  CgroupStats stats = cgroup_->ReadStats();
  stats.oom_kills -= std::min(stats.oom_kills, counters_before.oom_kills);
  stats.pids_limit_events -= std::min(stats.pids_limit_events, counters_before.pids_limit_events);
  stats.pids_limit_hit = stats.pids_limit_events > 0;
  stats.cpu_throttled_us -= std::min(stats.cpu_throttled_us, counters_before.cpu_throttled_us);
  result->limits = cgroup_->ReportFrom(*policy_.cgroup_limits(), stats);
  result->measurement_errors = stats.read_errors;
  if (result->status == RunStatus::kSignal && result->signal == SIGKILL && stats.oom_kills > 0) {
    result->status = RunStatus::kOom;
    result->reason = fmt::format("killed by the OOM killer: the session's memory limit of {} bytes was reached",
                                 policy_.cgroup_limits()->memory_max_bytes);
  }
  NoteLimitsHit(result);
}

Result SessionSandbox::Exec(Executor ex, int cancel_fd) {
  const auto started = Clock::now();
  std::shared_lock call(calls_mutex_);
  if (terminating_) return SetupError("the session is ending");
  if (ex.argv.empty()) return SetupError("nothing to run: empty command");
  if (std::string why = CheckOutputLimit(ex.output_limit_bytes); !why.empty()) return SetupError(why);
  auto before = Snapshot(workspace_fd_.get());
  const CgroupStats counters_before = cgroup_ ? cgroup_->ReadCounters() : CgroupStats{};
  // The program's stdin is a pipe the supervisor fills, never the descriptor the client sent (stdin_feeder.h).
  StdinFeeder stdin_feeder;
  if (ex.stdin_fd >= 0) {
    if (Status s = stdin_feeder.Start(ex.stdin_fd); !s.ok()) return SetupError(s.Wrap("creating pipes").message());
    ex.stdin_fd = stdin_feeder.child_end();
  }

  // The exec's own group: its time-out kills everything the exec started, however it detached (setsid, double fork).
  // A parked payload (no stdin of the exec's own) sits in its group already, past its seccomp filter: its program is
  // written into the memory it shares with us, and one byte starts it.
  std::unique_ptr<CgroupChild> exec_group;
  std::unique_ptr<SessionHelper> helper;
  if (std::unique_ptr<ParkedExec> parked = ex.stdin_fd < 0 ? TakeParked() : nullptr) {
    const char go = 'G';
    // Continued first: the session's programs run as the same user, and one may have stopped it (SIGSTOP).
    ::syscall(SYS_pidfd_send_signal, parked->helper->pidfd.get(), SIGCONT, nullptr, 0);
    if (WriteParkedRequest(ex, parked->mapping) && ::write(parked->park.get(), &go, 1) == 1) {
      helper = std::move(parked->helper);
      exec_group = std::move(parked->group);
    } else {
      DropParked(std::move(parked));  // a request too large for the mapping: a payload of its own
    }
  }
  if (!helper) {
    auto made = StartExecGroup();
    if (!made.ok()) return SetupError(made.status().Wrap("creating the exec's cgroup").message());
    exec_group = std::move(*made);
    CgroupSelfJoin exec_join;
    if (exec_group) exec_join = exec_group->self_join();
    auto started_helper = StartHelper(ex, -1, exec_group ? &exec_join : nullptr, -1, nullptr, started + ex.wall_timeout);
    if (!started_helper.ok()) {
      KeepExecGroup(std::move(exec_group));
      return SetupError(started_helper.status().message());
    }
    helper = std::move(*started_helper);
  }
  auto kill_exec = [&](SessionHelper& h) {
    KillExec(h);
    if (exec_group) (void)exec_group->KillAll();
  };
  stdin_feeder.ReleaseChildEnd();
  SessionHelper& h = *helper;
  Defer forget([&] {
    KillExec(h);
    Reap(h);
    Forget(h.pid);
    // What the exec started in a session of its own lives on in its group until it ends (or the session does).
    KeepExecGroup(std::move(exec_group));
  });

  OutputBuffer stdout_buf(ex.output_limit_bytes), stderr_buf(ex.output_limit_bytes);
  const auto deadline = started + ex.wall_timeout;
  bool timed_out = false, cancelled = false;
  while (!h.reaped) {
    if (!timed_out && !cancelled && Clock::now() >= deadline) {
      timed_out = true;
      kill_exec(h);
    }
    struct pollfd fds[9];
    int nfds = 0, cancel_index = -1, listener_index = -1;
    fds[nfds++] = {h.pidfd.get(), POLLIN, 0};
    if (h.seccomp_socket) fds[nfds++] = {h.seccomp_socket.get(), POLLIN, 0};
    if (h.notifier && h.notifier->listener_fd() >= 0) {
      listener_index = nfds;
      fds[nfds++] = {h.notifier->listener_fd(), POLLIN, 0};
    }
    if (h.out) fds[nfds++] = {h.out.get(), POLLIN, 0};
    if (h.err) fds[nfds++] = {h.err.get(), POLLIN, 0};
    if (h.control) fds[nfds++] = {h.control.get(), POLLIN, 0};
    if (cancel_fd >= 0 && !cancelled && !timed_out) {
      cancel_index = nfds;
      fds[nfds++] = {cancel_fd, POLLIN | POLLRDHUP, 0};
    }
    const int feeder_index = nfds;
    nfds += stdin_feeder.AddPollFds(fds + nfds);
    int rc = ::poll(fds, static_cast<nfds_t>(nfds), PollMs(deadline, timed_out || cancelled));
    if (rc < 0 && errno != EINTR) return SetupError(Status::Errno("poll").message());
    if (rc > 0) stdin_feeder.OnPoll(fds + feeder_index);
    Drain(h.out, &stdout_buf);
    Drain(h.err, &stderr_buf);
    ReadControl(h);
    if (listener_index >= 0 && rc > 0) h.notifier->OnReady(fds[listener_index].revents);
    ReceiveListener(h, policy_, /*threaded=*/false);
    if (cancel_index >= 0 && CancelRequested(fds[cancel_index])) {
      cancelled = true;
      kill_exec(h);
    }
    if (fds[0].revents & POLLIN) Reap(h);
  }
  // The payload has exited: what it wrote is in the pipes. Descendants that still hold them are not waited for.
  Drain(h.out, &stdout_buf);
  Drain(h.err, &stderr_buf);
  ReadControl(h);

  Result result;
  result.stdout_data = stdout_buf.Contents();
  result.stderr_data = stderr_buf.Contents();
  result.stdout_bytes = stdout_buf.total_bytes();
  result.stderr_bytes = stderr_buf.total_bytes();
  result.stdout_truncated = stdout_buf.truncated();
  result.stderr_truncated = stderr_buf.truncated();
  FillVerdict(h, timed_out, cancelled, ex.wall_timeout, &result);
  FinishReport(h, counters_before, &result);
  // Killed because the session ended (rm, its lifetime): say that, not only which signal.
  if (terminating_ && result.status == RunStatus::kSignal && result.signal == SIGKILL)
    result.reason = SessionEndedReason("exec") + "; the exec was killed";
  result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  SetExtra(result, "changed_files", ChangedFilesJson(before, workspace_fd_.get()));
  return result;
}

Result SessionSandbox::RunCell(const std::string& code, const ReplOptions& options, int cancel_fd) {
  const auto started = Clock::now();
  std::shared_lock call(calls_mutex_);
  if (terminating_) return SetupError("the session is ending");
  std::lock_guard lock(repl_mutex_);
  nlohmann::json repl = {{"value", nullptr}, {"exception", nullptr}, {"traceback", nullptr},
                         {"state_lost", false}, {"interpreter_killed", false}};
  auto drop_interpreter = [&] {
    if (!repl_) return;
    KillExec(*repl_);
    if (!repl_->reaped) ::kill(repl_->pid, SIGKILL);
    Reap(*repl_);
    Forget(repl_->pid);
    repl_.reset();
    repl_channel_.reset();
    repl_state_lost_ = true;
  };
  // An interpreter that died between cells (killed from another exec, say) is replaced, and the loss reported. So is
  // one whose channel holds bytes that no request asked for (an earlier cell's thread wrote to fd 3): its next answer
  // could be anything.
  std::string restarted_because;
  if (repl_) {
    struct pollfd fd = {repl_->pidfd.get(), POLLIN, 0};
    if (::poll(&fd, 1, 0) > 0) {
      drop_interpreter();
    } else if (HasBytesWaiting(repl_channel_.get())) {
      drop_interpreter();
      restarted_because = "an earlier cell wrote to the REPL's channel (fd 3), which put it out of step: the "
                          "interpreter was restarted before this cell and its state is lost";
    }
  }
  if (!repl_) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      return SetupError(Status::Errno("socketpair(AF_UNIX, REPL channel)").message());
    UniqueFd ours(pair[0]), theirs(pair[1]);
    Executor ex;
    ex.argv = options.driver_argv;
    ex.env = options.env;
    ex.umask = options.umask;
    auto helper = StartHelper(ex, theirs.get(), nullptr, -1, nullptr, started + options.wall_timeout);
    if (!helper.ok()) return SetupError(helper.status().Wrap("starting the REPL interpreter").message());
    repl_ = std::move(*helper);
    repl_channel_ = std::move(ours);
    repl["state_lost"] = repl_state_lost_;
    repl_state_lost_ = false;
  }
  SessionHelper& h = *repl_;
  auto before = Snapshot(workspace_fd_.get());
  // Output of earlier cells' leftovers (background threads) is not this cell's.
  Drain(h.out, nullptr);
  Drain(h.err, nullptr);
  ReadControl(h);

  const uint64_t cell_id = ++repl_cell_id_;
  std::string request = nlohmann::json{{"id", cell_id}, {"code", code}}.dump() + "\n";
  bool died = false;
  for (size_t done = 0; done < request.size();) {
    ssize_t n = ::send(repl_channel_.get(), request.data() + done, request.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      died = true;
      break;
    }
    done += static_cast<size_t>(n);
  }

  OutputBuffer stdout_buf(options.output_limit_bytes), stderr_buf(options.output_limit_bytes);
  const auto deadline = started + options.wall_timeout;
  bool timed_out = false, cancelled = false, replied = false;
  std::string out_of_step;  // why the channel no longer pairs this request with its answer
  std::string reply_bytes;  // the answer so far: no newline yet
  nlohmann::json reply;
  while (!died && !replied && out_of_step.empty()) {
    if (!timed_out && !cancelled && Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    struct pollfd fds[7];
    int nfds = 0, cancel_index = -1;
    fds[nfds++] = {h.pidfd.get(), POLLIN, 0};
    fds[nfds++] = {repl_channel_.get(), POLLIN, 0};
    if (h.out) fds[nfds++] = {h.out.get(), POLLIN, 0};
    if (h.err) fds[nfds++] = {h.err.get(), POLLIN, 0};
    if (h.control) fds[nfds++] = {h.control.get(), POLLIN, 0};
    if (h.seccomp_socket) fds[nfds++] = {h.seccomp_socket.get(), POLLIN, 0};
    if (cancel_fd >= 0) {
      cancel_index = nfds;
      fds[nfds++] = {cancel_fd, POLLIN | POLLRDHUP, 0};
    }
    int rc = ::poll(fds, static_cast<nfds_t>(nfds), PollMs(deadline, false));
    ReceiveListener(h, policy_, /*threaded=*/true);
    if (rc < 0 && errno != EINTR) return SetupError(Status::Errno("poll").message());
    Drain(h.out, &stdout_buf);
    Drain(h.err, &stderr_buf);
    ReadControl(h);
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buffer[65536];
      ssize_t n = ::recv(repl_channel_.get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) {
        const size_t scanned = reply_bytes.size();
        reply_bytes.append(buffer, static_cast<size_t>(n));
        const size_t newline = reply_bytes.find('\n', scanned);
        if (newline == std::string::npos) {
          if (reply_bytes.size() > kMaxReplyBytes)
            out_of_step =
                fmt::format("the cell wrote more than {} MiB to the REPL's channel (fd 3)", kMaxReplyBytes >> 20);
        } else if (newline + 1 != reply_bytes.size() ||
                   !ParseReply(std::string_view(reply_bytes).substr(0, newline), cell_id, &reply)) {
          out_of_step = "the cell wrote to the REPL's channel (fd 3), which put it out of step";
        } else {
          replied = true;
        }
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        died = true;
      }
    }
    if (fds[0].revents & POLLIN) died = true;
    if (cancel_index >= 0 && CancelRequested(fds[cancel_index])) {
      cancelled = true;
      break;
    }
  }
  // What the cell printed before it answered is in the pipes by now.
  Drain(h.out, &stdout_buf);
  Drain(h.err, &stderr_buf);

  Result result;
  if (replied) {
    repl["value"] = reply.value("value", nlohmann::json(nullptr));
    repl["exception"] = reply.value("exception", nlohmann::json(nullptr));
    repl["traceback"] = reply.value("traceback", nlohmann::json(nullptr));
    const nlohmann::json exit_code = reply.value("exit_code", nlohmann::json(nullptr));
    if (exit_code.is_number_integer()) {
      // sys.exit ends the cell, as it would end a script, with its code; the interpreter lives on.
      result.exit_code = static_cast<int>(exit_code.get<int64_t>() & 0xff);
      result.status = result.exit_code == 0 ? RunStatus::kOk : RunStatus::kExit;
      result.reason = fmt::format("the cell called sys.exit (exit code {}); the interpreter keeps its state",
                                  result.exit_code);
    } else if (repl["exception"].is_null()) {
      result.status = RunStatus::kOk;
      result.exit_code = 0;
      result.reason = "the cell ran";
    } else {
      result.status = RunStatus::kExit;
      result.exit_code = 1;
      result.reason = fmt::format("the cell raised {}", repl["exception"].get<std::string>());
    }
  } else {
    // Timed out, cancelled, crashed or out of step: the interpreter goes, and the next cell starts a fresh one.
    KillExec(h);
    Reap(h);
    ReadControl(h);
    Drain(h.out, &stdout_buf);
    Drain(h.err, &stderr_buf);
    FillVerdict(h, timed_out, cancelled, options.wall_timeout, &result);
    if (!out_of_step.empty()) {
      result.reason = fmt::format("{}; the interpreter was killed and its state is lost (the next cell starts a "
                                  "fresh one)", out_of_step);
    } else if (timed_out) {
      result.reason = fmt::format("wall-clock time limit of {} ms exceeded; the interpreter was killed and its "
                                  "state is lost (the session lives on)", options.wall_timeout.count());
    } else if (terminating_ && result.status == RunStatus::kSignal && result.signal == SIGKILL) {
      result.reason = SessionEndedReason("cell") + "; the interpreter was killed";
    } else if (!cancelled && result.status != RunStatus::kSetupError) {
      result.reason = fmt::format("the interpreter died ({}); its state is lost", result.reason);
    }
    if (result.status == RunStatus::kOk) result.status = RunStatus::kExit;  // it may not just stop
    repl["interpreter_killed"] = true;
    drop_interpreter();
  }
  if (!restarted_because.empty()) result.reason += "; " + restarted_because;
  result.stdout_data = stdout_buf.Contents();
  result.stderr_data = stderr_buf.Contents();
  result.stdout_bytes = stdout_buf.total_bytes();
  result.stderr_bytes = stderr_buf.total_bytes();
  result.stdout_truncated = stdout_buf.truncated();
  result.stderr_truncated = stderr_buf.truncated();
  result.wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  // No per-cell limits report: the cgroup's counters are the session's, and a cell is meant to be cheap.
  SetExtra(result, "repl", repl);
  SetExtra(result, "changed_files", ChangedFilesJson(before, workspace_fd_.get()));
  return result;
}

}  // namespace nsbox
