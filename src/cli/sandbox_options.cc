// The options shared by the sandbox-making verbs: CLI11 declarations, validation, and the Policy/Executor they make.
#include "src/cli/sandbox_options.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "sandbox/base/data_dir.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include "sandbox/executor.h"
#include "sandbox/seccomp.h"
#include "sandbox/spec/units.h"
#include "sandbox/stdin_feeder.h"
#include "src/cli/image_store.h"
#include "src/cli/languages.h"
#include "src/netproxy/allow_list.h"

namespace nsbox::cli {
namespace {

// "SRC[:DST]" → {SRC, DST}; DST defaults to SRC. The first ':' not written "\:" ends SRC; in either path "\:" is a
// ':' and "\\" a '\' (any other backslash is itself), so that a path holding a ':' can be bound at all. A second
// unescaped ':' is refused: Docker's "SRC:DST:ro" must not become a writable bind at "DST:ro".
StatusOr<std::pair<std::string, std::string>> SplitBind(const std::string& spec, std::string_view option) {
  std::string parts[2];
  int part = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    const char c = spec[i];
    if (c == '\\' && i + 1 < spec.size() && (spec[i + 1] == ':' || spec[i + 1] == '\\')) {
      parts[part] += spec[++i];
    } else if (c == ':' && part == 0) {
      part = 1;
    } else if (c == ':') {
      return Status::Error(fmt::format("{} '{}': more than one ':' (SRC[:DST]; a read-only bind is --ro-bind, and a "
                                       "':' in a path is written \\:)", option, spec));
    } else {
      parts[part] += c;
    }
  }
  if (part == 1 && parts[1].empty())
    return Status::Error(fmt::format("{} '{}': an empty DST after ':' (leave out the ':' to bind at SRC)", option, spec));
  if (part == 0) return std::pair<std::string, std::string>{parts[0], ""};  // bound at the source's real path
  return std::pair<std::string, std::string>{parts[0], parts[1]};
}

}  // namespace

void AddSandboxOptions(CLI::App* app, SandboxOptions& o) {
  app->add_option("--rootfs", o.rootfs,
                  "root filesystem: host (the built-in read-only view of the host), an image NAME (nsbox image ls) or "
                  "a directory path")
      ->capture_default_str();
  app->add_option("--workspace", o.workspace,
                  "bind this host directory read-write at /workspace (default: a fresh tmpfs)");
  // One value per occurrence: a greedy vector option would take a following "--" as the end of its own list, and
  // the command's arguments after it ("-c", "-n") would then be parsed as nsbox options.
  app->add_option("--ro-bind", o.ro_binds, "bind a host path read-only (repeatable; write a ':' in a path as \\:)")
      ->allow_extra_args(false)
      ->type_name("SRC[:DST]");
  app->add_option("--bind", o.binds, "bind a host path read-write (repeatable; write a ':' in a path as \\:)")
      ->allow_extra_args(false)
      ->type_name("SRC[:DST]");
  app->add_option("--network", o.network,
                  "none (own namespace, loopback only), allow=DOMAIN[,DOMAIN...] (only these domains, through nsbox's "
                  "HTTP(S) proxy), or host (the host's network: gives up network isolation)")
      ->capture_default_str();
  app->add_option("--network-limit", o.network_limit, "with allow=: bytes the sandbox may move in and out, e.g. 100M");
  app->add_flag("--dangerously-allow-private-addresses", o.allow_private_addresses,
                "with allow=: let allowed domains resolve to loopback, private or link-local addresses");
  auto given = [&o](const char* name) {
    return [&o, name](const std::string&) {
      if (o.limit_given.empty()) o.limit_given = name;
    };
  };
  app->add_option("--memory", o.memory, "memory limit, e.g. 256M, 1G")->capture_default_str()->each(given("--memory"));
  app->add_option("--memory-swap", o.memory_swap, "swap allowed on top of --memory (default: none)")
      ->each(given("--memory-swap"));
  // Checked as a number first: an unsigned option would take "-1" as 2^64-1.
  app->add_option("--pids", o.pids, "maximum number of processes and threads")
      ->default_str(fmt::format("{}", o.pids))
      ->check([](const std::string& value) {
        // Decimal digits only: CLI11 would read "010" as octal 8 and "0x10" as 16.
        const bool decimal = !value.empty() && value.find_first_not_of("0123456789") == std::string::npos &&
                             (value.size() == 1 || value[0] != '0');
        return decimal ? std::string() : fmt::format("'{}' is not a number of processes (decimal digits)", value);
      })
      ->each(given("--pids"));
  app->add_option("--cpus", o.cpus, "CPU quota in CPUs, e.g. 0.5")
      ->default_str(fmt::format("{}", o.cpus))
      ->check([](const std::string& value) {
        // A plain decimal: CLI11 would take "0x10" as 16 CPUs, "0x1p-8" as 1/256, and " 2" as 2.
        const size_t dot = value.find('.');
        const std::string whole = value.substr(0, dot), part = dot == std::string::npos ? "" : value.substr(dot + 1);
        const bool digits = whole.find_first_not_of("0123456789") == std::string::npos &&
                            part.find_first_not_of("0123456789") == std::string::npos;
        const bool decimal = digits && !(whole.empty() && part.empty()) && (dot == std::string::npos || !part.empty());
        return decimal ? std::string() : fmt::format("'{}' is not a number of CPUs (a decimal such as 1.5)", value);
      })
      ->each(given("--cpus"));
  app->add_option("--tmpfs-size", o.tmpfs_size, "size cap of /tmp, /workspace, the home directory and /dev/shm (each)")
      ->capture_default_str();
  app->add_option("--profile", o.profile,
                  "seccomp profile: default, strict (no sockets but AF_UNIX), or a Docker/OCI JSON profile file")
      ->capture_default_str();
  app->add_flag("--dangerously-run-without-limits", o.no_limits,
                "run with NO memory, pids or CPU limits (for hosts where no cgroup controller is usable)");
}

std::vector<std::string> GivenSandboxArgs(const CLI::App& app) {
  CLI::App reference;
  SandboxOptions unused;
  AddSandboxOptions(&reference, unused);
  std::vector<std::string> args;
  for (const CLI::Option* declared : reference.get_options()) {
    if (declared == reference.get_help_ptr()) continue;
    const std::string name = declared->get_name();  // the long name, "--memory"
    const CLI::Option* given = app.get_option_no_throw(name);
    if (given == nullptr || given->count() == 0) continue;
    if (given->get_expected_max() == 0) {
      args.push_back(name);  // a flag
      continue;
    }
    for (const std::string& value : given->results()) args.insert(args.end(), {name, value});
  }
  return args;
}

StatusOr<Policy> BuildPolicy(const SandboxOptions& o, bool hold_image) {
  PolicyBuilder builder;
  if (o.rootfs != "host" && o.rootfs.find('/') == std::string::npos) {
    // A bare name is an image from `nsbox image build`; a directory is given as a path (./dir, /srv/root).
    auto image_root = hold_image ? UseImage(o.rootfs) : ResolveImage(o.rootfs);
    if (!image_root.ok()) return image_root.status().Wrap("--rootfs");
    builder.SetRootfsDir(*image_root);
  } else if (o.rootfs != "host") {
    if (!PathExists(o.rootfs))
      return Status::Error(
          fmt::format("--rootfs '{}': no such directory (use 'host' or a prepared root directory)", o.rootfs));
    builder.SetRootfsDir(o.rootfs);
  } else {
    builder.SetHostViewFile(DataDir() + "/rootfs/host.json");
  }
  if (!o.workspace.empty()) builder.SetWorkspaceDir(o.workspace);
  for (const auto& spec : o.ro_binds) {
    auto bind = SplitBind(spec, "--ro-bind");
    if (!bind.ok()) return bind.status();
    builder.AddReadOnlyBind(bind->first, bind->second);
  }
  for (const auto& spec : o.binds) {
    auto bind = SplitBind(spec, "--bind");
    if (!bind.ok()) return bind.status();
    builder.AddWritableBind(bind->first, bind->second);
  }
  if (o.network == "host") builder.DangerAllowHostNetwork();
  else if (o.network != "none" && !o.network.starts_with("allow="))
    return Status::Error(fmt::format("--network '{}': expected none, host or allow=DOMAIN[,DOMAIN...]", o.network));
  auto tmpfs = ParseSize(o.tmpfs_size);
  if (!tmpfs.ok()) return tmpfs.status().Wrap("--tmpfs-size");
  builder.SetTmpfsSize(*tmpfs);
  if (o.no_limits) {
    if (!o.limit_given.empty())
      return Status::Error(fmt::format("{} sets a limit, and --dangerously-run-without-limits asks for none: give one "
                                       "or the other", o.limit_given));
    builder.DangerDisableCgroupLimits();
  } else {
    CgroupLimits limits;
    auto memory = ParseSize(o.memory);
    if (!memory.ok()) return memory.status().Wrap("--memory");
    limits.memory_max_bytes = *memory;
    if (!o.memory_swap.empty()) {
      auto swap = ParseSize(o.memory_swap);
      if (!swap.ok()) return swap.status().Wrap("--memory-swap");
      limits.memory_swap_max_bytes = *swap;
    }
    limits.pids_max = o.pids;
    limits.cpus = o.cpus;
    builder.SetCgroupLimits(limits);
  }
  const std::string profiles_dir = DefaultSeccompProfilesDir();
  auto seccomp = LoadSeccompProfile(o.profile, profiles_dir);
  if (!seccomp.ok()) {
    // A profile named (not a path) with no profiles directory at all is missing data, not an unknown name: say where
    // the data comes from.
    const bool named = o.profile.find('/') == std::string::npos && !o.profile.ends_with(".json");
    // Without --profile the default is what failed: naming the option would send the user after one they never gave.
    const std::string_view label = o.profile == "default" ? "the default seccomp profile" : "--profile";
    struct stat st;
    if (named && ::stat(profiles_dir.c_str(), &st) != 0 && errno == ENOENT)
      return Status::Error(fmt::format("{}: unknown seccomp profile \"{}\": no file {}/{}.json; {} does not exist: {}",
                                       label, o.profile, profiles_dir, o.profile, profiles_dir, DataDirHint()));
    return seccomp.status().Wrap(label);
  }
  builder.SetSeccompProgram(*seccomp);
  return builder.TryBuild();
}

std::string InCliTerms(std::string message) {
  // The engine names a policy setting the way its API spells it; each is written once, here, as the option for it.
  static constexpr std::pair<std::string_view, std::string_view> kSettings[] = {
      {"CgroupLimits::cpus", "--cpus"},
      {"PolicyBuilder::DangerDisableCgroupLimits", "--dangerously-run-without-limits"},
      {"a root of your own (PolicyBuilder::SetRootfsDir)", "a root of your own (--rootfs DIR)"},
      {"leave the rootfs unset for the built-in host view", "use --rootfs host"},
      {"the workspace directory (PolicyBuilder::SetWorkspaceDir)", "a --workspace"},
  };
  for (const auto& [setting, option] : kSettings) {
    for (size_t at = message.find(setting); at != std::string::npos; at = message.find(setting, at + option.size()))
      message.replace(at, setting.size(), option);
  }
  return message;
}

StatusOr<std::optional<NetworkAllowSpec>> BuildNetworkSpec(const SandboxOptions& o) {
  bool allow = o.network.starts_with("allow=");
  if (!allow) {
    if (!o.network_limit.empty()) return Status::Error("--network-limit needs --network allow=DOMAIN,...");
    if (o.allow_private_addresses)
      return Status::Error("--dangerously-allow-private-addresses needs --network allow=DOMAIN,...");
    return std::optional<NetworkAllowSpec>();
  }
  NetworkAllowSpec spec;
  auto domains = netproxy::ParseAllowList(o.network);
  if (!domains.ok()) return domains.status();  // its messages name --network
  spec.domains = *domains;
  if (!o.network_limit.empty()) {
    auto limit = ParseSize(o.network_limit);
    if (!limit.ok()) return limit.status().Wrap("--network-limit");
    // The proxy takes 0 for no limit at all: a limit of nothing would lift the cap it asks for.
    if (*limit == 0) return Status::Error("--network-limit 0: give a size of at least 1 byte, or leave it out");
    spec.byte_limit = *limit;
  }
  spec.allow_private_addresses = o.allow_private_addresses;
  return std::optional<NetworkAllowSpec>(spec);
}

void AddProgramOptions(CLI::App* app, ProgramOptions& o) {
  app->add_flag("--json", o.json, "print one JSON result object on stdout instead of passing output through");
  app->add_option("--timeout", o.timeout, "wall-clock limit, e.g. 500ms, 10s, 2m")->capture_default_str();
  app->add_option("--output-limit", o.output_limit, "bytes kept per stream (head and tail), e.g. 64K, 1M")
      ->capture_default_str();
  app->add_option("--stdin", o.stdin_source, "FILE or - (default: /dev/null)");
  app->add_option("--env", o.env,
                  "KEY=VALUE added to the small clean environment, or KEY for the host's value (repeatable)")
      ->allow_extra_args(false);
  app->add_option("--env-file", o.env_files, "a file of KEY=VALUE (or KEY) lines, # comments; --env wins (repeatable)")
      ->allow_extra_args(false);
  app->add_option("--workdir", o.workdir, "the program's working directory inside the sandbox (default /workspace)");
  app->add_option("--lang", o.lang,
                  "language of --code/--file: python, bash, sh, node, c, cpp, go, rust, java, typescript (nsbox doctor "
                  "says which the host has)");
  app->add_option("--compile-timeout", o.compile_timeout,
                  "a compiled language's compile step: its own wall-clock limit (default: the language's, e.g. 30s)");
  app->add_option("--compile-memory", o.compile_memory,
                  "a compiled language's compile step: its own memory limit (default: the language's, 1G; the program "
                  "keeps the sandbox's)");
  app->add_option("--code", o.code, "the program text to run")->each([&o](const std::string&) { o.code_given = true; });
  app->add_option("--file", o.file, "a file holding the program text, or - for stdin")
      ->each([&o](const std::string&) { o.file_given = true; });
  app->add_option("command", o.command, "the command to run, after --");
}

StatusOr<std::string> ReadInput(const std::string& source, size_t max_bytes, std::string_view what) {
  std::string path = source == "-" ? "/dev/stdin" : source;
  // O_NONBLOCK: a FIFO that no one opens for writing would block open() itself, before any time limit runs.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | (source == "-" ? 0 : O_NONBLOCK)));
  if (!fd) return Status::Errno(fmt::format("{}: open({})", what, source));
  struct stat st;
  if (::fstat(fd.get(), &st) == 0 && S_ISDIR(st.st_mode))
    return Status::Error(fmt::format("{}: {} is a directory", what, source));
  struct statfs fs {};
  if (source != "-" && S_ISFIFO(st.st_mode) && ::fstatfs(fd.get(), &fs) == 0 && fs.f_type != PIPEFS_MAGIC) {
    // A named FIFO gets a while for its first bytes, then it is read to its end. (An anonymous pipe such as
    // <(command) has its writer already: it is waited for as long as it takes.)
    constexpr int kFifoWaitMs = 10'000;
    struct pollfd ready = {fd.get(), POLLIN, 0};
    int n;
    do {
      n = ::poll(&ready, 1, kFifoWaitMs);
    } while (n < 0 && errno == EINTR);
    if (n == 0)
      return Status::Error(fmt::format("{}: {} is a FIFO nothing wrote to within {} s", what, source,
                                       kFifoWaitMs / 1000));
  }
  if (source != "-") (void)::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Errno(fmt::format("{}: read({})", what, source));
    }
    if (n == 0) break;
    if (data.size() + static_cast<size_t>(n) > max_bytes)
      return Status::Error(fmt::format("{}: {} is larger than {} bytes", what, source, max_bytes));
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

namespace {

StatusOr<uint64_t> ParseCompileMemory(const std::string& text, std::string_view name) {
  auto parsed = ParseSize(text);
  if (!parsed.ok()) return parsed.status().Wrap(name);
  if (*parsed < kMinMemoryLimitBytes) return Status::Error(fmt::format("{}: must be at least 4M", name));
  return *parsed;
}

// --compile-memory, or the language table's; a bad value names the setting (`name`).
StatusOr<uint64_t> CompileMemory(const ProgramOptions& o, const Language& lang,
                                 std::string_view name = "--compile-memory") {
  if (o.compile_memory.empty()) return lang.compile->memory_bytes;
  return ParseCompileMemory(o.compile_memory, name);
}

}  // namespace

Status CheckCompileOptions(const ProgramOptions& o, const SandboxOptions& sandbox) {
  if (!o.compile_timeout.empty()) {
    if (auto timeout = ParseDuration(o.compile_timeout); !timeout.ok())
      return timeout.status().Wrap("--compile-timeout");
  }
  if (o.compile_memory.empty()) return OkStatus();
  if (sandbox.no_limits)
    return Status::Error("--compile-memory: --dangerously-run-without-limits sets no memory limits");
  return ParseCompileMemory(o.compile_memory, "--compile-memory").status();
}

StatusOr<uint64_t> ApplyCompileMemory(const ProgramOptions& o, SandboxOptions& sandbox, std::string_view name) {
  if (o.lang.empty()) return 0;
  auto lang = LookupLanguage(o.lang);
  if (!lang.ok() || !lang->compile) return 0;  // BuildProgram reports an unknown language, a misplaced option
  if (sandbox.no_limits) {
    if (!o.compile_memory.empty())
      return Status::Error(fmt::format("{}: --dangerously-run-without-limits sets no memory limits", name));
    return 0;
  }
  auto compile = CompileMemory(o, *lang, name);
  if (!compile.ok()) return compile.status();
  auto memory = ParseSize(sandbox.memory);
  if (!memory.ok()) return memory.status().Wrap("--memory");
  if (*compile > *memory) sandbox.memory = std::to_string(*compile);
  return *memory;
}

std::optional<uint64_t> ProgramMemory(const Policy& policy) {
  if (!policy.cgroup_limits()) return std::nullopt;
  return policy.cgroup_limits()->memory_max_bytes;
}

StatusOr<Executor> BuildExecutor(const ProgramOptions& o, const std::string& rootfs_dir,
                                 std::optional<uint64_t> program_memory_bytes) {
  auto program = BuildProgram(o, rootfs_dir, program_memory_bytes);
  if (!program.ok()) return program.status();
  if (program->compile)
    return Status::Error(fmt::format("--lang {} has a compile step, which this command does not run (use nsbox run "
                                     "or a session)", o.lang));
  return std::move(program->run);
}

namespace {

// A regular file (--stdin FILE, or nsbox's stdin redirected from one) reaches the program as a file, as
// `prog < input` would: *stdin_fd becomes a sealed copy (SealedStdin), seekable and with its size. A larger one, one
// whose size says nothing (procfs, sysfs: 0) or that grows while read, a FIFO, a pipe or a terminal stays, to be fed
// through a pipe as it comes, from where it was.
Status SealRegularStdin(int* stdin_fd, const std::string& source) {
  struct stat st;
  const off_t at = ::lseek(*stdin_fd, 0, SEEK_CUR);
  if (::fstat(*stdin_fd, &st) != 0 || !S_ISREG(st.st_mode) || at < 0 || st.st_size <= at ||
      static_cast<uint64_t>(st.st_size - at) > kMaxSealedStdinBytes)
    return OkStatus();
  std::string data(static_cast<size_t>(st.st_size - at) + 1, '\0');  // one byte more: end of file where it said
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(*stdin_fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Errno(fmt::format("--stdin: read({})", source));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done == data.size()) {  // it grew: fed from where it was, as it comes
    if (::lseek(*stdin_fd, at, SEEK_SET) != at) return Status::Errno(fmt::format("--stdin: lseek({})", source));
    return OkStatus();
  }
  data.resize(done);
  auto sealed = SealedStdin(data);
  if (!sealed.ok()) return sealed.status().Wrap("--stdin");
  if (*stdin_fd != 0) ::close(*stdin_fd);
  *stdin_fd = sealed->release();  // as the file's descriptor was: it lives until nsbox exits
  return OkStatus();
}

}  // namespace

StatusOr<Program> BuildProgram(const ProgramOptions& o, const std::string& rootfs_dir,
                               std::optional<uint64_t> program_memory_bytes) {
  Executor ex;
  auto timeout = ParseDuration(o.timeout);
  if (!timeout.ok()) return timeout.status().Wrap("--timeout");
  ex.wall_timeout = *timeout;
  auto limit = ParseSize(o.output_limit);
  if (!limit.ok()) return limit.status().Wrap("--output-limit");
  if (std::string why = CheckOutputLimit(*limit); !why.empty()) return Status::Error("--output-limit: " + why);
  ex.output_limit_bytes = *limit;
  ex.env = DefaultSandboxEnv();
  // pip refuses `pip install [--user]` on Debian's Python (PEP 668, "externally-managed-environment") to protect the
  // system's packages. In a sandbox nothing can reach them: the root is read-only, so pip installs into the sandbox's
  // own user site (~/.local, kept for a session's life) and the system stays as it was. Lifting the guard here makes
  // the documented `pip install --user` work on the host view and on images alike, without a venv to build first.
  ex.env["PIP_BREAK_SYSTEM_PACKAGES"] = "1";
  // The caller's umask (reading it means setting it; this runs before any thread exists).
  ex.umask = ::umask(022);
  ::umask(ex.umask);

  bool has_code = o.code_given || o.file_given;
  std::optional<Language> lang;
  if (!o.lang.empty()) {
    if (!o.command.empty())
      return Status::Error("give either --lang with --code/--file, or a command after --, not both");
    if (o.code_given && o.file_given) return Status::Error("give --code or --file, not both");
    if (!has_code) return Status::Error(fmt::format("--lang {} needs --code STRING or --file PATH", o.lang));
    auto found = LookupLanguage(o.lang);
    if (!found.ok()) return found.status();
    lang = std::move(*found);
    NSBOX_RETURN_IF_ERROR(CheckToolchain(*lang, rootfs_dir));
    if (!o.compile_timeout.empty() && !lang->compile)
      return Status::Error(fmt::format("--compile-timeout: language '{}' has no compile step", lang->name));
    if (!o.compile_memory.empty() && !lang->compile)
      return Status::Error(fmt::format("--compile-memory: language '{}' has no compile step", lang->name));
    if (o.file_given) {
      if (o.file == "-" && o.stdin_source == "-")
        return Status::Error("--file - and --stdin - both want nsbox's standard input");
      auto code = ReadInput(o.file, kMaxCodeBytes, "--file");
      if (!code.ok()) return code.status();
      ex.code = std::move(*code);
    } else {
      if (o.code.size() > kMaxCodeBytes)
        return Status::Error(fmt::format("--code is larger than {} bytes", kMaxCodeBytes));
      ex.code = o.code;
    }
    ApplyLanguage(*lang, ex);
  } else {
    if (!o.compile_timeout.empty()) return Status::Error("--compile-timeout needs --lang with a compiled language");
    if (!o.compile_memory.empty()) return Status::Error("--compile-memory needs --lang with a compiled language");
    if (has_code) return Status::Error("--code and --file need --lang");
    if (o.command.empty())
      return Status::Error("nothing to run: give a command after --, or --lang with --code/--file");
    if (o.command[0].empty()) return Status::Error("the command after -- is an empty string");
    // Only a batch job's JSON can carry one: execve would end the argument there, silently.
    for (size_t i = 0; i < o.command.size(); ++i)
      if (o.command[i].find('\0') != std::string::npos)
        return Status::Error(fmt::format("argument {} of the command holds a NUL byte", i));
    ex.argv = o.command;
  }
  // Docker's rules: KEY=VALUE sets it, a bare KEY passes the host's value (and nothing when the host has none); the
  // files come first, so that --env wins.
  auto add_env = [&ex](const std::string& kv, const std::string& where) -> Status {
    if (kv.find('\0') != std::string::npos)  // an environment string ends at its first NUL
      return Status::Error(fmt::format("{}: '{}' holds a NUL byte", where, kv.substr(0, kv.find('\0'))));
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    // A name with a newline would print as two variables in `env`; no space or control byte is part of a name.
    const bool odd_byte = std::any_of(key.begin(), key.end(), [](char c) {
      return static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) == 0x7f;
    });
    if (key.empty() || odd_byte)
      return Status::Error(
          fmt::format("{} '{}': expected KEY=VALUE or KEY (a name without spaces or control characters)", where, kv));
    if (eq != std::string::npos) {
      ex.env[key] = kv.substr(eq + 1);
    } else if (const char* host = getenv(key.c_str())) {
      ex.env[key] = host;
    }
    return OkStatus();
  };
  for (const auto& file : o.env_files) {
    auto text = ReadInput(file, 1 << 20, "--env-file");
    if (!text.ok()) return text.status();
    for (const auto& line : MeaningfulLines(*text))
      NSBOX_RETURN_IF_ERROR(add_env(line.text, fmt::format("--env-file {} line {}", file, line.number)));
  }
  for (const auto& kv : o.env) NSBOX_RETURN_IF_ERROR(add_env(kv, "--env"));
  if (!o.workdir.empty()) {
    if (o.workdir[0] != '/') return Status::Error(fmt::format("--workdir '{}': expected an absolute path", o.workdir));
    ex.cwd = o.workdir;
  }
  if (o.stdin_source == "-") {
    ex.stdin_fd = 0;
  } else if (!o.stdin_source.empty()) {
    // O_NONBLOCK: opening a FIFO nobody writes to would block here, before the time limit runs. The feeder polls
    // the source, so a writer that comes later is still waited for, within --timeout.
    UniqueFd fd(::open(o.stdin_source.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) return Status::Errno(fmt::format("--stdin: open({})", o.stdin_source));
    struct stat st;
    if (::fstat(fd.get(), &st) == 0 && S_ISDIR(st.st_mode))
      return Status::Error(fmt::format("--stdin: {} is a directory", o.stdin_source));
    ex.stdin_fd = fd.release();  // the Executor does not own it: it lives until nsbox exits
  }
  if (ex.stdin_fd >= 0) NSBOX_RETURN_IF_ERROR(SealRegularStdin(&ex.stdin_fd, o.stdin_source));
  CompileOverrides overrides;
  if (lang && lang->compile) {
    if (!o.compile_timeout.empty()) {
      auto parsed = ParseDuration(o.compile_timeout);
      if (!parsed.ok()) return parsed.status().Wrap("--compile-timeout");
      overrides.timeout = *parsed;
    }
    auto compile_memory = CompileMemory(o, *lang);
    if (!compile_memory.ok()) return compile_memory.status();
    overrides.memory_bytes = *compile_memory;
  }
  return FinishProgram(lang, std::move(ex), overrides, program_memory_bytes);
}

}  // namespace nsbox::cli
