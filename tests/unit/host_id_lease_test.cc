// Unit tests of host id leases: the range syntax, ids the host hands out skipped, held ids skipped, the lock
// directory's safety, and that a lease ends with its holder.
#include "sandbox/host_id_lease.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <vector>

using namespace nsbox;
namespace fs = std::filesystem;

namespace {

struct LeaseFixture {
  fs::path root;
  HostIdLeaseOptions options;
  LeaseFixture() {
    char tmpl[] = "/tmp/host-id-lease-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root = tmpl;
    fs::create_directories(root / "etc");
    options.lock_dir = (root / "locks").string();
    options.etc_dir = (root / "etc").string();
    options.range = {2000000, 2000009};
  }
  ~LeaseFixture() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  void Etc(const std::string& name, const std::string& text) const { std::ofstream(root / "etc" / name) << text; }
  // A child process that takes a lease and holds it until killed; the id it got.
  uint32_t StartHolder(pid_t* holder) const {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    *holder = ::fork();
    REQUIRE(*holder >= 0);
    if (*holder == 0) {
      auto lease = LeaseHostId(options);
      uint32_t id = lease.ok() ? lease->id() : 0;
      (void)!::write(ready[1], &id, sizeof id);
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    uint32_t id = 0;
    REQUIRE(::read(ready[0], &id, sizeof id) == sizeof id);
    ::close(ready[0]);
    return id;
  }
};

}  // namespace

TEST_CASE("a host id range is FIRST-LAST above the host's ordinary ids") {
  auto range = ParseHostIdRange("1048576-1114111");
  REQUIRE(range.ok());
  CHECK(range->first == 1048576);
  CHECK(range->last == 1114111);
  for (const char* bad : {"", "1048576", "1048576-", "-5", "65535-70000", "70000-69999", "1-2-3", "0x100000-0x200000",
                          "1048576-4294967295", "99999999999-99999999999"}) {
    INFO(bad);
    CHECK_FALSE(ParseHostIdRange(bad).ok());
  }
}

TEST_CASE("leases take the lowest free id, skip held ones, and end when the range is used up") {
  LeaseFixture f;
  f.options.range = {2000000, 2000002};
  auto a = LeaseHostId(f.options);
  auto b = LeaseHostId(f.options);
  auto c = LeaseHostId(f.options);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(a->id() == 2000000);
  CHECK(b->id() == 2000001);
  CHECK(c->id() == 2000002);
  auto none = LeaseHostId(f.options);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::Contains("no free host id in 2000000-2000002 (3 held"));
  // A lease given up is free for the next.
  { HostIdLease gone = std::move(*b); }
  auto again = LeaseHostId(f.options);
  REQUIRE(again.ok());
  CHECK(again->id() == 2000001);
}

TEST_CASE("ids that subuid, subgid, passwd or group hand out are never leased") {
  LeaseFixture f;
  f.Etc("subuid", "alice:2000000:2\nbroken line\n");
  f.Etc("subgid", "bob:2000003:1\n");
  f.Etc("passwd", "svc:x:2000002:100::/:/bin/false\n");
  f.Etc("group", "grp:x:2000004:\n");
  auto lease = LeaseHostId(f.options);
  REQUIRE(lease.ok());
  CHECK(lease->id() == 2000005);
}

// A process of a directory service's account that has the leased id would own the sandbox's user namespace: where
// nsswitch.conf names such a source, the ids it resolves are skipped too (asked of the host's resolver).
TEST_CASE("nsswitch.conf sources beyond the files make the lease ask the directory") {
  LeaseFixture f;
  CHECK_FALSE(HostHasDirectoryAccounts(f.options.etc_dir));  // no nsswitch.conf: the files alone
  f.Etc("nsswitch.conf", "# sss here would be a comment\npasswd: files systemd\ngroup: files\nhosts: files dns\n");
  CHECK_FALSE(HostHasDirectoryAccounts(f.options.etc_dir));
  f.Etc("nsswitch.conf", "passwd:sss\n");  // glibc needs no space after the colon
  CHECK(HostHasDirectoryAccounts(f.options.etc_dir));
  f.Etc("nsswitch.conf", "group: files [NOTFOUND=continue]ldap\n");  // nor before a name after an action
  CHECK(HostHasDirectoryAccounts(f.options.etc_dir));
  f.Etc("nsswitch.conf", "passwd: compat\n");  // its +/- lines pull in NIS
  CHECK(HostHasDirectoryAccounts(f.options.etc_dir));
  f.Etc("nsswitch.conf", "passwd: files sss\ngroup: files\n");
  CHECK(HostHasDirectoryAccounts(f.options.etc_dir));
  f.Etc("nsswitch.conf", "passwd: files\ngroup: files [NOTFOUND=return] ldap\n");
  CHECK(HostHasDirectoryAccounts(f.options.etc_dir));
  f.Etc("nsswitch.conf", "passwd: files mymachines systemd\n");  // systemd-nspawn's containers' users
  CHECK(HostHasDirectoryAccounts(f.options.etc_dir));
  f.Etc("nsswitch.conf", "passwd: files\ngroup: files [ NOTFOUND = return ]\nnetgroup: nis\n");
  CHECK_FALSE(HostHasDirectoryAccounts(f.options.etc_dir));
  // The directory's answer: its accounts are skipped, and a range it fills names it.
  f.options.directory_has_id = [](uint64_t id) -> StatusOr<bool> { return id <= 2000001; };
  auto lease = LeaseHostId(f.options);
  REQUIRE(lease.ok());
  CHECK(lease->id() == 2000002);
  f.options.directory_has_id = [](uint64_t) -> StatusOr<bool> { return true; };
  auto none = LeaseHostId(f.options);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::Contains("or a directory service's accounts"));
  // A directory that does not answer: no id, and the cause, not "a larger range".
  f.options.directory_has_id = [](uint64_t id) -> StatusOr<bool> {
    return Status::Errno(fmt::format("getpwuid_r({})", id), EAGAIN);
  };
  auto unanswered = LeaseHostId(f.options);
  REQUIRE_FALSE(unanswered.ok());
  CHECK_THAT(unanswered.status().message(), Catch::Contains("asking the host's user database"));
  CHECK_THAT(unanswered.status().message(), Catch::Contains("getpwuid_r(2000000)"));
  CHECK_THAT(unanswered.status().message(), !Catch::Contains("larger range"));
  // This host's own resolver: root, uid 0, is an account everywhere.
  auto root = DirectoryHasId(0);
  REQUIRE(root.ok());
  CHECK(*root);
}

TEST_CASE("a lease ends with its holder, even one killed with SIGKILL") {
  LeaseFixture f;
  pid_t holder = 0;
  CHECK(f.StartHolder(&holder) == 2000000);
  auto while_held = LeaseHostId(f.options);
  REQUIRE(while_held.ok());
  CHECK(while_held->id() == 2000001);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  auto after = LeaseHostId(f.options);
  REQUIRE(after.ok());
  CHECK(after->id() == 2000000);
}

TEST_CASE("a lease given up removes its file; a killed holder's file is taken again") {
  LeaseFixture f;
  const fs::path file = fs::path(f.options.lock_dir) / "2000000";
  {
    auto lease = LeaseHostId(f.options);
    REQUIRE(lease.ok());
    CHECK(fs::exists(file));
    // A fork of the holder that ends its copy leaves the file: the lease is the parent's.
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      { HostIdLease copy = std::move(*lease); }
      ::_exit(fs::exists(file) ? 0 : 1);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(fs::exists(file));
    // Moved into another lease, it is still held; the moved-from lease removes nothing.
    HostIdLease moved = std::move(*lease);
    CHECK(moved.held());
    CHECK(fs::exists(file));
  }
  CHECK_FALSE(fs::exists(file));
  CHECK(fs::is_empty(f.options.lock_dir));

  pid_t holder = ::fork();
  REQUIRE(holder >= 0);
  if (holder == 0) {
    auto lease = LeaseHostId(f.options);
    ::kill(::getpid(), SIGKILL);
    ::_exit(lease.ok() ? 0 : 1);
  }
  ::waitpid(holder, nullptr, 0);
  CHECK(fs::exists(file));  // SIGKILL ran no destructor
  {
    auto again = LeaseHostId(f.options);
    REQUIRE(again.ok());
    CHECK(again->id() == 2000000);
  }
  CHECK(fs::is_empty(f.options.lock_dir));
}

TEST_CASE("a lease given up also removes the files killed holders left, not a live holder's") {
  LeaseFixture f;
  const fs::path locks(f.options.lock_dir);
  // Three holders at once, then two of them SIGKILLed: their files (2000001, 2000002) lie above the lowest free id,
  // which every later lease would take, so only a sweep removes them.
  std::vector<pid_t> holders(3);
  for (int i = 0; i < 3; ++i) REQUIRE(f.StartHolder(&holders[i]) == 2000000u + i);
  for (pid_t holder : {holders[0], holders[1]}) {
    ::kill(holder, SIGKILL);
    ::waitpid(holder, nullptr, 0);
  }
  std::ofstream(locks / "notes.txt") << "not a lock\n";
  {
    auto lease = LeaseHostId(f.options);
    REQUIRE(lease.ok());
    CHECK(lease->id() == 2000000);
    CHECK(fs::exists(locks / "2000001"));
  }
  CHECK_FALSE(fs::exists(locks / "2000000"));
  CHECK_FALSE(fs::exists(locks / "2000001"));
  CHECK(fs::exists(locks / "2000002"));    // its holder lives
  CHECK(fs::exists(locks / "notes.txt"));  // not an id: not ours to judge
  auto while_held = LeaseHostId(f.options);
  REQUIRE(while_held.ok());
  CHECK(while_held->id() == 2000000);
  ::kill(holders[2], SIGKILL);
  ::waitpid(holders[2], nullptr, 0);
}

TEST_CASE("a lock directory that others may write is refused") {
  LeaseFixture f;
  fs::create_directories(f.options.lock_dir);
  REQUIRE(::chmod(f.options.lock_dir.c_str(), 0777) == 0);
  auto lease = LeaseHostId(f.options);
  REQUIRE_FALSE(lease.ok());
  CHECK_THAT(lease.status().message(), Catch::Contains("writable by nobody else"));
  // A link in its place is not followed.
  fs::remove(f.options.lock_dir);
  fs::create_directory_symlink(f.root / "etc", f.options.lock_dir);
  CHECK_FALSE(LeaseHostId(f.options).ok());
}
