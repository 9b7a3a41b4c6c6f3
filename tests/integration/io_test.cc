// Integration: what goes in and out besides stdout: --stdin FILE and -, --lang with --code/--file/--file -,
// --workspace (and that the code is never a file there), --ro-bind and --bind, --env.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
using namespace std::chrono_literals;

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Whether a background program's stdout is `text` within `limit` (checked every 20 ms).
bool OutBecomes(const BackgroundProcess& bg, const std::string& text, std::chrono::milliseconds limit) {
  for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
    if (bg.Out() == text) return true;
    std::this_thread::sleep_for(20ms);
  }
  return bg.Out() == text;
}

// The names in a directory (not recursive).
std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("stdin defaults to /dev/null", "[integration][io]") {
  SpawnOptions spawn;
  spawn.stdin_data = "should not arrive\n";
  auto r = RunNsboxJson({"--", "/bin/cat"}, spawn);
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "");
}

TEST_CASE("--stdin FILE feeds the file, --stdin - feeds nsbox's stdin", "[integration][io]") {
  TempDir dir;
  std::string file = dir.Write("input", "from a file\n");
  auto r = RunNsboxJson({"--stdin", file, "--", "/bin/cat"});
  INFO(r.Describe());
  CHECK(r.out() == "from a file\n");
  SpawnOptions spawn;
  spawn.stdin_data = "from a pipe\n";
  auto piped = RunNsboxJson({"--stdin", "-", "--", "/bin/cat"}, spawn);
  INFO(piped.Describe());
  CHECK(piped.out() == "from a pipe\n");
}

// Made by root, a pipe is root's with mode 0600: the sandbox user could read and write its descriptors but not open
// them again by name, as node's readFileSync('/dev/stdin') and `echo x > /dev/stderr` do.
TEST_CASE("the program opens its stdio again by name: /dev/stdin, /dev/stdout, /dev/stderr", "[integration][io]") {
  TempDir dir;
  std::string file = dir.Write("input", "3\n1 2 3\n");
  auto r =
      RunNsboxJson({"--stdin", file, "--", "/bin/sh", "-c",
                    "cat /dev/stdin > /dev/stdout && echo to-stderr > /dev/stderr && echo done > /proc/self/fd/1"});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "3\n1 2 3\ndone\n");
  CHECK(r.err() == "to-stderr\n");
  // A compiled language's steps run as execs of one sandbox: the same for them.
  auto c =
      RunNsboxJson({"--stdin", file, "--lang", "c", "--code",
                    "#include <stdio.h>\nint main(void) { FILE *in = fopen(\"/dev/stdin\", \"r\");\n"
                    "  int n = 0; if (!in || fscanf(in, \"%d\", &n) != 1) { perror(\"/dev/stdin\"); return 1; }\n"
                    "  FILE *err = fopen(\"/dev/stderr\", \"w\"); if (!err) { perror(\"/dev/stderr\"); return 1; }\n"
                    "  fprintf(err, \"n=%d\\n\", n); return 0; }\n"});
  INFO(c.Describe());
  CHECK(c.status() == "ok");
  CHECK(c.err() == "n=3\n");
}

// The program reads a pipe that nsbox fills, not the source's descriptor: that one would name the file's host path in
// /proc/self/fd/0 and could be opened again through it, for writing where the file's mode allows (0666 here).
// A regular file reaches the program as a sealed copy, a file as `prog < input` gives one (seekable, with its size:
// os.fstat(0).st_size is how fast-input Python reads it); anything else through a pipe. Neither names the host file
// or leads back to it.
TEST_CASE("--stdin FILE and - reach the program as a sealed file or a pipe: no host path, no way back to the file",
          "[integration][io]") {
  TempDir dir;
  std::string payload;
  for (int i = 0; i < 1200; ++i)
    for (int b = 0; b < 256; ++b) payload += static_cast<char>(b);  // 300 KiB, NUL bytes included: several pipefuls
  std::string file = dir.Write("input-host-secret-name", payload);
  REQUIRE(::chmod(file.c_str(), 0666) == 0);
  const std::string probe = R"py(
import os, sys
link = os.readlink("/proc/self/fd/0")
data = sys.stdin.buffer.read()
try:
    with open("/proc/self/fd/0", "r+b") as again:
        again.write(b"overwritten")
except OSError as e:
    pass
size = os.fstat(0).st_size
kind = "file" if link == "/memfd:nsbox-stdin (deleted)" else "pipe" if link.startswith("pipe:[") else link
print(kind, "host-secret" in link, size, len(data), data == bytes(range(256)) * 1200)
)py";
  auto r = RunPython(probe, {"--stdin", file});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "file False 307200 307200 True\n");
  CHECK(Slurp(file) == payload);

  SpawnOptions spawn;  // nsbox's stdin redirected from the file: the same
  spawn.stdin_fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(spawn.stdin_fd >= 0);
  auto redirected = RunPython(probe, {"--stdin", "-"}, spawn);
  ::close(spawn.stdin_fd);
  INFO(redirected.Describe());
  REQUIRE(redirected.status() == "ok");
  CHECK(redirected.out() == "file False 307200 307200 True\n");
  CHECK(Slurp(file) == payload);

  SpawnOptions through_pipe;  // a pipe stays a pipe, fed as it comes
  through_pipe.stdin_data = payload;
  auto piped = RunPython(probe, {"--stdin", "-"}, through_pipe);
  INFO(piped.Describe());
  REQUIRE(piped.status() == "ok");
  CHECK(piped.out() == "pipe False 0 307200 True\n");

  // A file whose size says nothing (procfs: 0) is fed whole through a pipe; a file read partly before, from there.
  auto proc = RunNsboxJson({"--stdin", "/proc/self/status", "--", "/bin/sh", "-c", "grep -c '^Name:'"});
  CHECK(proc.out() == "1\n");
  std::string lines = dir.Write("lines", "first\nsecond\n");
  auto rest = RunProcess(
      {"/bin/sh", "-c", "{ read -r skipped; \"$0\" run --stdin - -- /bin/cat; } < \"$1\"", NsboxBinary(), lines});
  CHECK(rest.out == "second\n");
}

TEST_CASE("a program that never reads a large --stdin ends normally", "[integration][io]") {
  TempDir dir;
  std::string file = dir.Write("big", std::string(8 << 20, 'x'));
  auto r = RunNsboxJson({"--timeout", "20s", "--stdin", file, "--", "/bin/true"});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  auto head = RunNsboxJson({"--stdin", file, "--", "/usr/bin/head", "-c", "5"});
  INFO(head.Describe());
  CHECK(head.status() == "ok");
  CHECK(head.out() == "xxxxx");
}

TEST_CASE("--lang runs --code, --file and --file - through the language's interpreter", "[integration][io]") {
  auto code = RunNsboxJson({"--lang", "python", "--code", "print(2**100)"});
  CHECK(code.out() == "1267650600228229401496703205376\n");
  TempDir dir;
  std::string file = dir.Write("script.sh", "echo \"$0\"; echo from-file\n");
  auto from_file = RunNsboxJson({"--lang", "bash", "--file", file});
  INFO(from_file.Describe());
  // The interpreter reads the code from its sealed memfd (executor.h).
  CHECK(std::regex_match(from_file.out(), std::regex("/dev/fd/[0-9]+\nfrom-file\n")));
  SpawnOptions spawn;
  spawn.stdin_data = "print('from stdin')\n";
  auto from_stdin = RunNsboxJson({"--lang", "python3", "--file", "-"}, spawn);
  INFO(from_stdin.Describe());
  CHECK(from_stdin.out() == "from stdin\n");
}

TEST_CASE("node runs where it is installed", "[integration][io]") {
  if (::access("/usr/bin/node", X_OK) != 0) {
    RecordSkip("integration_tests", "node runs where it is installed", "/usr/bin/node is not installed on this host");
    return;
  }
  auto r = RunNsboxJson({"--lang", "node", "--code", "console.log(6 * 7)"});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "42\n");
}

TEST_CASE("--workspace binds a host directory read-write and the code is never a file in it", "[integration][io]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  dir.Write("input.txt", "hello\n");
  TempDir locks;  // run as root: the sandbox's host uid pinned to one id of nsbox's range
  SpawnOptions spawn;
  spawn.extra_env["NSBOX_HOST_ID_DIR"] = locks.path() + "/ids";
  spawn.extra_env["NSBOX_HOST_ID_RANGE"] = "3300000-3300000";
  auto r = RunNsboxJson({"--workspace", dir.path(), "--lang", "sh", "--code",
                         "ls -A /workspace | sort | tr '\\n' ' '; tr a-z A-Z < input.txt > output.txt"},
                        spawn);
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "input.txt ");
  CHECK(Slurp(dir.path() + "/output.txt") == "HELLO\n");
  CHECK(Entries(dir.path()) == std::set<std::string>{"input.txt", "output.txt"});
  struct stat st;
  REQUIRE(::stat((dir.path() + "/output.txt").c_str(), &st) == 0);
  // Written by the sandbox user: an unprivileged host uid, leased from nsbox's range when run as root.
  CHECK(st.st_uid == (::geteuid() == 0 ? 3300000u : ::geteuid()));
}

TEST_CASE("nothing of nsbox's is left in --workspace after a failure and a time-out either", "[integration][io]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  auto failed = RunNsboxJson({"--workspace", dir.path(), "--lang", "python", "--code", "raise SystemExit(4)"});
  CHECK(failed.status() == "exit");
  CHECK(Entries(dir.path()).empty());
  auto timed_out = RunNsboxJson({"--workspace", dir.path(), "--timeout", "300ms", "--lang", "python", "--code",
                                 "import time; time.sleep(10)"});
  CHECK(timed_out.status() == "timeout");
  CHECK(Entries(dir.path()).empty());
}

TEST_CASE("a user's file named like nsbox's code file in --workspace is neither overwritten nor removed",
          "[integration][io]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  dir.Write(".nsbox-main.py", "KEEP\n");
  REQUIRE(::chown((dir.path() + "/.nsbox-main.py").c_str(), 65534, 65534) == 0);  // writable by the sandbox user
  auto r = RunNsboxJson({"--workspace", dir.path(), "--lang", "python", "--code", "print(1)"});
  INFO(r.Describe());
  CHECK(r.out() == "1\n");
  CHECK(Slurp(dir.path() + "/.nsbox-main.py") == "KEEP\n");
  CHECK(Entries(dir.path()) == std::set<std::string>{".nsbox-main.py"});
}

TEST_CASE("runs sharing one --workspace at once each run their own code", "[integration][io]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  auto slow = StartProcess({NsboxBinary(), "run", "--json", "--workspace", dir.path(), "--lang", "bash", "--code",
                            "touch started; sleep 1.5\necho A"});
  for (int i = 0; i < 500 && !std::filesystem::exists(dir.path() + "/started"); ++i) std::this_thread::sleep_for(20ms);
  auto quick = RunNsboxJson({"--workspace", dir.path(), "--lang", "bash", "--code", "echo B; echo B2"});
  CHECK(quick.out() == "B\nB2\n");
  slow.Wait();
  auto json = nlohmann::json::parse(slow.Out(), nullptr, false);
  INFO(slow.Out());
  CHECK(json.value("stdout", "") == "A\n");
  CHECK(json.value("stderr", "x") == "");
  CHECK(Entries(dir.path()) == std::set<std::string>{"started"});
}

// Issue 24: writing a code file into a full workspace failed half-way (ENOSPC) and the partial file was left there.
// The code is in memory now: it runs, and the workspace holds only what was there.
TEST_CASE("code larger than a full --workspace's free space runs, and nothing is left there", "[integration][io]") {
  if (::geteuid() != 0) {
    RecordSkip("integration_tests", "code larger than a full --workspace's free space runs, and nothing is left there",
               "mounting a small tmpfs needs root");
    return;
  }
  TempDir dir;
  REQUIRE(::mount("tmpfs", dir.path().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0777") == 0);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{dir.path()};
  {
    std::ofstream fill(dir.path() + "/fill");
    std::string block(4096, 'x');
    for (int i = 0; i < 64 && fill.write(block.data(), block.size()); ++i) fill.flush();
  }
  struct statvfs fs;
  REQUIRE(::statvfs(dir.path().c_str(), &fs) == 0);
  REQUIRE(fs.f_bavail == 0);  // full: the 12 KB code below could not be written there
  const std::string code = "# " + std::string(12 << 10, 'p') + "\nprint('ran', open('fill').read(1))\n";
  auto r = RunNsboxJson({"--workspace", dir.path(), "--lang", "python", "--code", code});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "ran x\n");
  CHECK(Entries(dir.path()) == std::set<std::string>{"fill"});
}

// Issue 24: a SIGKILLed `nsbox run` left its code file in the workspace (no one was left to remove it).
TEST_CASE("SIGKILL of nsbox run during a run leaves nothing of nsbox's in --workspace", "[integration][io]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  const std::string marker = UniqueMarker("killed-run");
  auto run = StartProcess({NsboxBinary(), "run", "--json", "--timeout", "60s", "--workspace", dir.path(), "--env",
                           "MARK=" + marker, "--lang", "bash", "--code", "touch started; sleep 60"});
  for (int i = 0; i < 500 && !std::filesystem::exists(dir.path() + "/started"); ++i) std::this_thread::sleep_for(20ms);
  REQUIRE(std::filesystem::exists(dir.path() + "/started"));
  CHECK(Entries(dir.path()) == std::set<std::string>{"started"});  // while it runs, too
  ::kill(run.pid, SIGKILL);
  run.Wait();
  CHECK(WaitForNoPidsWithMarker(marker, 10s));
  CHECK(Entries(dir.path()) == std::set<std::string>{"started"});
}

TEST_CASE("--ro-bind is readable and read-only; --bind is writable and visible on the host", "[integration][io]") {
  TempDir ro, rw;
  ro.Write("data", "read me\n");
  REQUIRE(::chmod(ro.path().c_str(), 0755) == 0);
  REQUIRE(::chmod(rw.path().c_str(), 0777) == 0);
  auto r = RunPython(R"(
print(open("/data/ro/data").read().strip(), err(open, "/data/ro/new", "w"), err(open, "/mnt/rw/new", "w"))
open("/mnt/rw/new", "w").write("written\n")
)",
                     {"--ro-bind", ro.path() + ":/data/ro", "--bind", rw.path() + ":/mnt/rw"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "read me EROFS ok\n");
  CHECK(Slurp(rw.path() + "/new") == "written\n");
}

TEST_CASE("--ro-bind of a single file without a destination appears at the same path", "[integration][io]") {
  TempDir dir;
  std::string file = dir.Write("single.txt", "single\n");
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  auto r = RunNsboxJson({"--ro-bind", file, "--", "/bin/cat", file});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "single\n");
}

TEST_CASE("a result that cannot be written is an nsbox failure, said on stderr, exit 125", "[integration][io]") {
  // /dev/full: every write fails with ENOSPC. The program succeeded, but the caller would get nothing of it.
  auto json = RunProcess({"/bin/sh", "-c", "exec \"$0\" run --json -- /bin/echo hi > /dev/full", NsboxBinary()});
  CHECK(json.exit_code == 125);
  CHECK(json.err == "nsbox: writing the result: No space left on device (ENOSPC)\n");
  auto text = RunProcess({"/bin/sh", "-c", "exec \"$0\" run -- /bin/echo hi > /dev/full", NsboxBinary()});
  CHECK(text.exit_code == 125);
  CHECK(text.err == "nsbox: writing the program's output: No space left on device (ENOSPC)\n");
  // Nothing to write, nothing lost: the program's own exit code.
  auto quiet = RunProcess({"/bin/sh", "-c", "exec \"$0\" run -- /bin/sh -c 'exit 3' > /dev/full", NsboxBinary()});
  CHECK(quiet.exit_code == 3);
}

TEST_CASE("a reader that goes away is a write error too (exit 125, said), not a silent death by SIGPIPE",
          "[integration][io]") {
  // 141 would read as "the program was killed by SIGPIPE". The program itself still gets SIGPIPE's default action.
  auto r = RunProcess(
      {"/bin/bash", "-c",
       "\"$0\" run -- /bin/sh -c 'head -c 10M /dev/zero' | head -c1 >/dev/null; echo \"rc=${PIPESTATUS[0]}\"",
       NsboxBinary()});
  INFO(r.err);
  CHECK(r.out == "rc=125\n");
  CHECK(r.err == "nsbox: writing the program's output: Broken pipe (EPIPE)\n");
  auto inside = RunNsboxJson({"--", "/bin/sh", "-c", "yes | head -c 3; echo \" $?\""});
  CHECK(inside.out() == "y\ny 0\n");
}

TEST_CASE("started with stdout closed, nsbox holds /dev/null there, not one of its own files or pipes",
          "[integration][io]") {
  // Otherwise descriptor 1 goes to the first thing nsbox opens (its profile, a pipe to the sandbox, the socket to a
  // session), which would then receive the result. The result of a closed stdout is discarded, as asked.
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  auto bg =
      StartProcess({"/bin/sh", "-c", "exec \"$0\" run --bind \"$1\":/w -- /bin/sh -c 'touch /w/started; sleep 2' >&-",
                    NsboxBinary(), dir.path()});
  std::string fd1;
  for (int i = 0; i < 500 && fd1.empty(); ++i) {
    if (std::filesystem::exists(dir.path() + "/started")) {
      char target[256] = {};
      ssize_t n = ::readlink(("/proc/" + std::to_string(bg.pid) + "/fd/1").c_str(), target, sizeof target - 1);
      fd1 = n > 0 ? std::string(target, static_cast<size_t>(n)) : "(none)";
    }
    ::usleep(10000);
  }
  int status = bg.Wait();
  CHECK(fd1 == "/dev/null");
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// The code needs no room in the workspace (it is a memfd), so a workspace the sandbox user may only read runs it; the
// program's own writes there are refused as for any directory it cannot write.
TEST_CASE("a --workspace the sandbox user cannot write runs the code, and refuses the program's writes",
          "[integration][io]") {
  TempDir dir;  // root's, mode 0755: the sandbox user (an unprivileged host uid) may not create files in it
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  auto r = RunNsboxJson({"--workspace", dir.path(), "--lang", "python", "--code",
                         "print(1)\ntry:\n    open('out', 'w')\nexcept PermissionError:\n    print('refused')"});
  INFO(r.Describe());
  CHECK(r.status() == "ok");
  CHECK(r.out() == "1\nrefused\n");
  CHECK(Entries(dir.path()).empty());
}

TEST_CASE("--stdin from a FIFO: nsbox does not hang opening it; a writer that comes later is read, within --timeout",
          "[integration][io]") {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  SpawnOptions guard;
  guard.timeout = 20s;
  // Nobody ever writes: the program waits for input until the time limit, and nsbox ends it there.
  auto r = RunNsboxJson({"--timeout", "1s", "--stdin", fifo, "--", "/bin/cat"}, guard);
  INFO(r.Describe());
  CHECK_FALSE(r.process.guard_fired);
  CHECK(r.status() == "timeout");
  std::thread writer([&] {
    std::this_thread::sleep_for(300ms);
    std::ofstream(fifo) << "late\n";
  });
  auto late = RunNsboxJson({"--timeout", "10s", "--stdin", fifo, "--", "/bin/cat"}, guard);
  writer.join();
  INFO(late.Describe());
  CHECK(late.status() == "ok");
  CHECK(late.out() == "late\n");
}

TEST_CASE("without --json, the program's output is passed on while it runs, and is what --json would keep",
          "[integration][io]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  // The program goes on only once the test has seen its first line on nsbox's stdout.
  auto bg = StartProcess({NsboxBinary(), "run", "--timeout", "30s", "--bind", dir.path() + ":/w", "--", "/bin/sh", "-c",
                          "echo first; while [ ! -e /w/go ]; do sleep 0.05; done; echo second"});
  const bool seen = OutBecomes(bg, "first\n", 10s);
  std::ofstream(dir.path() + "/go") << "";
  int status = bg.Wait();
  CHECK(seen);
  CHECK(WIFEXITED(status));
  CHECK(bg.Out() == "first\nsecond\n");
  // A cut stream: the head as it came, then the marker and the tail, the same bytes as the JSON result's.
  const std::vector<std::string> program = {"--output-limit", "20", "--", "/bin/sh", "-c", "seq 1 100; seq 1 50 >&2"};
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), program.begin(), program.end());
  auto text = RunNsboxRaw(args);
  auto json = RunNsboxJson(program);
  CHECK(text.exit_code == 0);
  CHECK(text.out == json.out());
  CHECK(text.err == json.err());
  CHECK(text.out.find("[nsbox: 272 bytes cut]") != std::string::npos);
}

// A compiled language's program runs as an exec after its compile step: its output went out only at the end, stdout
// whole and then stderr, and a reader that went away left it running to its time-out.
TEST_CASE("without --json, a compiled program's output too is passed on as it runs, in the order written",
          "[integration][io][compiled]") {
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
  auto bg =
      StartProcess({NsboxBinary(), "run", "--timeout", "30s", "--bind", dir.path() + ":/w", "--lang", "c", "--code",
                    "#include <stdio.h>\n#include <unistd.h>\nint main(void) {\n"
                    "  printf(\"first\\n\"); fflush(stdout); fprintf(stderr, \"err\\n\");\n"
                    "  while (access(\"/w/go\", F_OK) != 0) usleep(50000);\n"
                    "  printf(\"second\\n\"); return 0; }\n"});
  const bool seen = OutBecomes(bg, "first\n", 30s);  // the compile step comes first
  std::ofstream(dir.path() + "/go") << "";
  int status = bg.Wait();
  CHECK(seen);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(bg.Out() == "first\nsecond\n");
  // A reader that goes away ends the program (exit 125, said), not its time-out.
  auto r = RunProcess({"/bin/bash", "-c",
                       "\"$0\" run --timeout 20s --lang c --code '#include <stdio.h>\nint main(void) { for (;;) "
                       "puts(\"y\"); }' | head -c1 >/dev/null; echo \"rc=${PIPESTATUS[0]}\"",
                       NsboxBinary()});
  INFO(r.err);
  CHECK(r.out == "rc=125\n");
  CHECK(r.err == "nsbox: writing the program's output: Broken pipe (EPIPE)\n");  // 125, not the time-out's 124
}

TEST_CASE("a large JSON result is streamed out, not built whole in nsbox's memory", "[integration][io]") {
  // 16 MiB of NUL bytes kept: as JSON text that is 96 MiB of \u0000, which nsbox used to hold twice over.
  auto r = RunProcess({NsboxBinary(), "run", "--json", "--output-limit", "16M", "--", "/bin/sh", "-c",
                       "head -c 64M /dev/zero"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.size() > 96u << 20);
  CHECK(r.out.ends_with("}\n"));
  CHECK(nlohmann::json::parse(r.out, nullptr, false).value("stdout_bytes", 0) == 64u << 20);
  CHECK(r.max_rss_kb < 110 * 1024);  // about 52 MiB for this 64 MiB output
}
