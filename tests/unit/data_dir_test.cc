// Unit: CheckTrustedPath, the rule that nsbox's data (profiles, host view, languages, templates, helpers) is changeable
// only by root and the running user.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sandbox/base/data_dir.h"

namespace fs = std::filesystem;
using nsbox::CheckTrustedPath;

namespace {

// A fresh directory under /tmp (root's and sticky, which the rule accepts above a trusted path), mode 0755.
struct DataTempTree {
  fs::path root;
  DataTempTree() {
    char tmpl[] = "/tmp/nsbox-data-dir-test-XXXXXX";
    root = ::mkdtemp(tmpl);
    ::chmod(root.c_str(), 0755);
  }
  ~DataTempTree() { fs::remove_all(root); }
  fs::path Dir(const std::string& relative, mode_t mode = 0755) {
    fs::path p = root / relative;
    fs::create_directories(p);
    ::chmod(p.c_str(), mode);
    return p;
  }
};

}  // namespace

TEST_CASE("a data directory only root or the running user can change is accepted, resolved") {
  DataTempTree t;
  fs::path data = t.Dir("share/nsbox");
  auto checked = CheckTrustedPath((t.root / "share/./nsbox").string(), ::geteuid());
  INFO((checked.ok() ? "" : checked.status().message()));
  REQUIRE(checked.ok());
  CHECK(*checked == data.string());
}

TEST_CASE("a world-writable data directory is refused, naming it and the fix") {
  DataTempTree t;
  fs::path data = t.Dir("nsbox", 0777);
  auto checked = CheckTrustedPath(data.string(), ::geteuid());
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.status().message(), Catch::Contains(data.string() + " is writable by others (mode 0777)") &&
                                             Catch::Contains("chmod go-w"));
}

TEST_CASE("a group-writable directory above the data directory is refused, naming that directory") {
  DataTempTree t;
  fs::path above = t.Dir("opt", 0775);
  fs::path data = t.Dir("opt/nsbox");
  auto checked = CheckTrustedPath(data.string(), ::geteuid());
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.status().message(), Catch::StartsWith(above.string() + " is writable by its group (mode 0775)"));
}

TEST_CASE("a world-writable sticky directory is accepted above the data directory but not as it") {
  DataTempTree t;
  fs::path sticky = t.Dir("shared", 01777);
  fs::path data = t.Dir("shared/nsbox");
  CHECK(CheckTrustedPath(data.string(), ::geteuid()).ok());
  auto itself = CheckTrustedPath(sticky.string(), ::geteuid());
  REQUIRE_FALSE(itself.ok());
  CHECK_THAT(itself.status().message(), Catch::Contains("is writable by others (mode 1777)"));
}

TEST_CASE("a data directory owned by another user is refused, naming its owner") {
  DataTempTree t;
  fs::path data = t.Dir("nsbox");
  uid_t running = ::geteuid();
  if (running == 0) {
    REQUIRE(::chown(data.c_str(), 4242, 4242) == 0);
  } else {
    running = running + 1;  // the directory's owner (this test's user) is then "another user"
  }
  auto checked = CheckTrustedPath(data.string(), running);
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.status().message(), Catch::Contains(data.string() + " is owned by uid") &&
                                             Catch::Contains("not by root or the running user"));
}

TEST_CASE("a world-writable file in a trusted directory is refused") {
  DataTempTree t;
  fs::path data = t.Dir("nsbox");
  fs::path file = data / "mkrootfs";
  { std::FILE* f = std::fopen(file.c_str(), "w"); REQUIRE(f); std::fclose(f); }
  ::chmod(file.c_str(), 0777);
  auto checked = CheckTrustedPath(file.string(), ::geteuid());
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.status().message(), Catch::Contains(file.string() + " is writable by others"));
}

TEST_CASE("a symlink is judged by what it points to, and the answer is the target, not the link") {
  DataTempTree t;
  fs::path open_dir = t.Dir("open", 0777);
  fs::path trusted = t.Dir("trusted/nsbox");
  fs::path into_open = t.root / "link-to-open";
  fs::create_directory_symlink(open_dir, into_open);
  auto refused = CheckTrustedPath(into_open.string(), ::geteuid());
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains(open_dir.string() + " is writable by others"));
  // A link that lives where anyone may swap it still resolves once: nsbox then uses the target it checked.
  fs::path link_in_open = open_dir / "nsbox";
  fs::create_directory_symlink(trusted, link_in_open);
  auto accepted = CheckTrustedPath(link_in_open.string(), ::geteuid());
  REQUIRE(accepted.ok());
  CHECK(*accepted == trusted.string());
}

TEST_CASE("what nsbox reads below the data directory is held to the same rule, at any depth") {
  DataTempTree t;
  fs::path data = t.Dir("share/nsbox");
  t.Dir("share/nsbox/seccomp-profiles");
  t.Dir("share/nsbox/rootfs/templates");
  std::ofstream(data / "seccomp-profiles/default.json") << "{}";
  std::ofstream(data / "rootfs/templates/python.json") << "{}";
  std::ofstream(data / "README") << "not read by nsbox";
  ::chmod((data / "README").c_str(), 0666);  // what nsbox does not read is not judged
  CHECK(nsbox::CheckTrustedEntries(data.string(), ::geteuid()).ok());

  // A profile another user could rewrite to allow every system call.
  ::chmod((data / "seccomp-profiles").c_str(), 0777);
  auto profiles = nsbox::CheckTrustedEntries(data.string(), ::geteuid());
  REQUIRE_FALSE(profiles.ok());
  CHECK_THAT(profiles.message(), Catch::Contains("seccomp-profiles is writable by others (mode 0777)"));
  ::chmod((data / "seccomp-profiles").c_str(), 0755);

  // A template (its customize commands run as root in an image build), deep in rootfs/.
  ::chmod((data / "rootfs/templates/python.json").c_str(), 0664);
  auto templ = nsbox::CheckTrustedEntries(data.string(), ::geteuid());
  REQUIRE_FALSE(templ.ok());
  CHECK_THAT(templ.message(), Catch::Contains("templates/python.json is writable by its group (mode 0664)"));
  ::chmod((data / "rootfs/templates/python.json").c_str(), 0644);

  // A file another user owns.
  if (::geteuid() == 0) {
    REQUIRE(::chown((data / "seccomp-profiles/default.json").c_str(), 65534, 65534) == 0);
    auto owned = nsbox::CheckTrustedEntries(data.string(), ::geteuid());
    REQUIRE_FALSE(owned.ok());
    CHECK_THAT(owned.message(), Catch::Contains("default.json is owned by uid 65534"));
  }
}

TEST_CASE("a missing data directory is refused, naming the call and the path") {
  auto checked = CheckTrustedPath("/nonexistent-nsbox-data", ::geteuid());
  REQUIRE_FALSE(checked.ok());
  CHECK_THAT(checked.status().message(),
             Catch::Contains("realpath(/nonexistent-nsbox-data)") && Catch::Contains("ENOENT"));
}

TEST_CASE("the test programs run from the build tree, so they read the source tree's data") {
  CHECK(nsbox::RunningFromBuildTree());
}
