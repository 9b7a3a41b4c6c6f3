// Integration: --rootfs DIR: a small prepared root (busybox-static and its links) replaces the host view.
#include <unistd.h>

#include <filesystem>

#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;

namespace {

// A root with /bin/busybox and the applet links a script needs, plus an /etc entry of its own.
bool MakeBusyboxRoot(const TempDir& root) {
  const char* busybox = "/bin/busybox";
  if (::access(busybox, X_OK) != 0) return false;
  // busybox-static is a static binary; the dynamically linked Debian "busybox" would need /lib as well.
  auto file = RunProcess({"/usr/bin/ldd", busybox});
  if ((file.out + file.err).find("not a dynamic executable") == std::string::npos) return false;
  std::filesystem::create_directories(root.path() + "/bin");
  std::filesystem::copy_file(busybox, root.path() + "/bin/busybox");
  for (const char* applet : {"sh", "echo", "cat", "ls", "id", "hostname", "sleep"})
    std::filesystem::create_symlink("busybox", root.path() + "/bin/" + applet);
  root.Write("etc/motd", "prepared root\n");
  root.Write("etc/shadow", "root:SECRET:1::::::\n");  // must be replaced: nsbox writes its own identity files
  std::filesystem::permissions(root.path(), std::filesystem::perms(0755));
  return true;
}

}  // namespace

TEST_CASE("--rootfs DIR runs a program from a prepared busybox root", "[integration][rootfs]") {
  TempDir root;
  if (!MakeBusyboxRoot(root)) {
    RecordSkip("integration_tests", "--rootfs DIR runs a program from a prepared busybox root",
               "no static /bin/busybox (install busybox-static)");
    return;
  }
  auto r = RunNsboxJson({"--rootfs", root.path(), "--", "/bin/sh", "-c",
                         "echo hi; id -u; hostname; cat /etc/motd; ls /; ls /usr 2>&1 >/dev/null | wc -l; "
                         "cat /etc/shadow 2>/dev/null || echo no-shadow"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  std::string out = r.out();
  CHECK(out.starts_with("hi\n1000\nnsbox\nprepared root\n"));
  CHECK(out.find("no-shadow") != std::string::npos);
  CHECK(out.find("SECRET") == std::string::npos);
  CHECK(out.find("workspace") != std::string::npos);
}

TEST_CASE("--rootfs DIR with --lang sh runs the code from its memfd", "[integration][rootfs]") {
  TempDir root;
  if (!MakeBusyboxRoot(root)) {
    RecordSkip("integration_tests", "--rootfs DIR with --lang sh runs the code from its memfd",
               "no static /bin/busybox (install busybox-static)");
    return;
  }
  auto r =
      RunNsboxJson({"--rootfs", root.path(), "--lang", "sh", "--code", "echo $0; ls /usr/bin/python3 2>&1 | wc -l"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out().starts_with("/dev/fd/"));  // the code's sealed memfd (executor.h)
}

TEST_CASE("--rootfs of a directory that is not a root filesystem is a setup error", "[integration][rootfs]") {
  TempDir empty;
  auto r = RunNsboxJson({"--rootfs", empty.path(), "--", "/bin/true"});
  INFO(r.Describe());
  CHECK(r.status() == "setup_error");
  CHECK(r.process.exit_code == 125);
  CHECK(r.json.value("reason", "").find("not a root filesystem") != std::string::npos);
}
