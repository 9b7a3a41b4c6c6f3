// Integration: nothing is left behind after success, failure, setup error, time-out or SIGKILL of nsbox: no
// process, no mount in the host's mount table, no temporary file, no cgroup.
#include <signal.h>

#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
using namespace std::chrono_literals;

namespace {

size_t Entries(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}


// Runs one scenario with a private TMPDIR and a marker in the program's argv, then checks the host.
void CheckNothingLeft(const std::string& scenario, const std::vector<std::string>& options, const std::string& body,
                      const std::string& expected_status, bool kill_nsbox = false) {
  TempDir tmp;
  std::string marker = UniqueMarker("cleanup");
  auto mounts_before = MountLinesContaining("nsbox");
  const auto groups_before = NsboxGroups();
  SpawnOptions spawn;
  spawn.extra_env["TMPDIR"] = tmp.path();
  std::vector<std::string> argv = {NsboxBinary(), "run", "--json"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"--", "/usr/bin/python3", "-c", body, marker});
  std::string status;
  if (kill_nsbox) {
    auto bg = StartProcess(argv, spawn);
    REQUIRE(WaitForPidsWithMarker(marker, 3, 10s));  // nsbox, the program and its child

    ::kill(bg.pid, SIGKILL);
    bg.Wait();
    status = "killed";
  } else {
    auto r = RunProcess(argv, spawn);
    status = nlohmann::json::parse(r.out, nullptr, false).value("status", "<no json>");
  }
  INFO(scenario);
  CHECK(status == expected_status);
  CHECK(WaitForNoPidsWithMarker(marker, 3s));
  CHECK(MountLinesContaining("nsbox") == mounts_before);
  CHECK(MountLinesContaining(marker).empty());
  CHECK(Entries(tmp.path()) == 0);
  CHECK(WaitForGroups(groups_before));
}

const char* const kSpawnsChildren =
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]])\n"
    "time.sleep(0.2)\n";

}  // namespace

TEST_CASE("nothing is left behind after a successful run", "[integration][cleanup]") {
  CheckNothingLeft("success", {}, std::string(kSpawnsChildren) + "print('ok')", "ok");
}

TEST_CASE("nothing is left behind after a failing run", "[integration][cleanup]") {
  CheckNothingLeft("failure", {}, std::string(kSpawnsChildren) + "sys.exit(3)", "exit");
}

TEST_CASE("nothing is left behind after a time-out", "[integration][cleanup]") {
  CheckNothingLeft("time-out", {"--timeout", "1s"}, std::string(kSpawnsChildren) + "time.sleep(60)", "timeout");
}

TEST_CASE("nothing is left behind after nsbox is killed with SIGKILL", "[integration][cleanup]") {
  CheckNothingLeft("SIGKILL", {"--timeout", "60s"}, std::string(kSpawnsChildren) + "time.sleep(60)", "killed", true);
}

TEST_CASE("nothing is left behind after a setup error", "[integration][cleanup]") {
  TempDir tmp;
  auto mounts_before = MountLinesContaining("nsbox");
  SpawnOptions spawn;
  spawn.extra_env["TMPDIR"] = tmp.path();
  const auto groups_before = NsboxGroups();
  auto r = RunNsboxJson({"--", "/nonexistent/program"}, spawn);
  CHECK(r.status() == "setup_error");
  CHECK(MountLinesContaining("nsbox") == mounts_before);
  CHECK(Entries(tmp.path()) == 0);
  CHECK(NsboxGroups() == groups_before);
}

// On cgroup v1 the group is made while the child builds its root: a limit that fails then must still stop the run
// before the program starts, and leave no child, cgroup or mount.
TEST_CASE("a cgroup limit that fails after the clone stops the run and leaves nothing behind", "[integration][cleanup]") {
  TempDir tmp;
  std::string marker = UniqueMarker("cgroup-fail");
  auto mounts_before = MountLinesContaining("nsbox");
  const auto groups_before = NsboxGroups();  // this run must add none
  SpawnOptions spawn;
  spawn.extra_env["TMPDIR"] = tmp.path();
  auto r = RunNsboxJson({"--cpus", "0.001", "--", "/usr/bin/python3", "-c", "open('/workspace/ran','w')", marker}, spawn);
  CHECK(r.status() == "setup_error");
  CHECK(r.process.exit_code == 125);
  CHECK(r.json.value("reason", "").find("--cpus 0.001 is below the minimum of 0.01") != std::string::npos);
  CHECK(WaitForNoPidsWithMarker(marker, 3s));
  CHECK(MountLinesContaining("nsbox") == mounts_before);
  CHECK(Entries(tmp.path()) == 0);
  CHECK(NsboxGroups() == groups_before);
}
