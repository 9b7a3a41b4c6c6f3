// Unit tests of the image store and template parsing: run without root against a store in a temp dir.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "nsbox_config.h"
#include "sandbox/base/fs.h"
#include "sandbox/base/unique_fd.h"
#include <nlohmann/json.hpp>

#include "src/cli/file_tree.h"
#include "src/cli/image_store.h"
#include "src/cli/image_template.h"
#include "tests/support/skip.h"

namespace {

using nsbox::cli::ImageTemplate;

// A fresh directory, removed with everything in it at the end of the test.
class TempStore {
 public:
  TempStore() {
    char pattern[] = "/tmp/nsbox-image-test-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path_ = pattern;
  }
  ~TempStore() { (void)nsbox::cli::RemoveTree(path_); }
  const std::string& path() const { return path_; }
  // A published-looking image: NAME/rootfs with a /usr, and NAME/image.json.
  void AddImage(const std::string& name, const std::string& meta_json) {
    REQUIRE(::mkdir((path_ + "/" + name).c_str(), 0755) == 0);
    REQUIRE(::mkdir((path_ + "/" + name + "/rootfs").c_str(), 0755) == 0);
    REQUIRE(::mkdir((path_ + "/" + name + "/rootfs/usr").c_str(), 0755) == 0);
    REQUIRE(nsbox::WriteFile(path_ + "/" + name + "/image.json", meta_json).ok());
  }

 private:
  std::string path_;
};

const char kGoodTemplate[] = R"({
  "description": "test",
  "packages": ["busybox", "python3-numpy", "libstdc++6"],
  "files": [{"path": "/etc/x", "content": "y\n", "mode": "0600"}],
  "customize": ["true"],
  "smoke_test": ["/bin/sh", "-c", "true"]
})";

}  // namespace

TEST_CASE("a valid template yields its packages, smoke test and a stable digest") {
  auto t = nsbox::cli::ParseTemplate("good", "/x/good.json", kGoodTemplate);
  REQUIRE(t.ok());
  CHECK(t->packages == std::vector<std::string>{"busybox", "python3-numpy", "libstdc++6"});
  CHECK(t->smoke_test == std::vector<std::string>{"/bin/sh", "-c", "true"});
  CHECK(t->digest.size() == 16);
  CHECK(nsbox::cli::ParseTemplate("good", "/x/good.json", kGoodTemplate)->digest == t->digest);
  CHECK(nsbox::cli::ParseTemplate("good", "/x/good.json", std::string(kGoodTemplate) + " ")->digest != t->digest);
}

TEST_CASE("broken templates are rejected with a message that says what is wrong") {
  auto error_of = [](const std::string& text) {
    auto t = nsbox::cli::ParseTemplate("bad", "/x/bad.json", text);
    REQUIRE_FALSE(t.ok());
    return t.status().message();
  };
  CHECK_THAT(error_of("{"), Catch::Contains("template 'bad' is broken: not valid JSON"));
  // The parser's words, without nlohmann's "[json.exception.parse_error.101]"; a key twice is refused.
  CHECK_THAT(error_of("{"), !Catch::Contains("[json.exception"));
  CHECK_THAT(error_of(R"({"smoke_test": ["true"], "packages": [], "packages": ["gcc"]})"),
             Catch::Contains("the key \"packages\" twice in one object"));
  CHECK_THAT(error_of("[]"), Catch::Contains("must be a JSON object"));
  CHECK_THAT(error_of(R"({"smoke_test": ["true"], "pakages": []})"), Catch::Contains("unknown key 'pakages'"));
  CHECK_THAT(error_of(R"({"smoke_test": ["true"], "packages": "busybox"})"),
             Catch::Contains("'packages' must be a list"));
  CHECK_THAT(error_of(R"({"smoke_test": ["true"], "packages": ["--option=evil"]})"),
             Catch::Contains("is not a Debian package name"));
  CHECK_THAT(error_of(R"({"packages": ["busybox"]})"), Catch::Contains("'smoke_test' must be a non-empty argv list"));
  CHECK_THAT(error_of(R"({"smoke_test": []})"), Catch::Contains("'smoke_test' must be a non-empty argv list"));
  CHECK_THAT(error_of(R"({"smoke_test": ["true"], "files": [{"path": "etc/x", "content": ""}]})"),
             Catch::Contains("must be absolute"));
  CHECK_THAT(error_of(R"({"smoke_test": ["true"], "files": [{"path": "/etc/../../x", "content": ""}]})"),
             Catch::Contains("without '..'"));
  // The path reaches a shell in tools/mkrootfs's hooks: $( ), backquotes and quotes would run on the host.
  for (const char* path :
       {"/opt/$(touch${IFS}/tmp/x)/f", "/opt/`id`", "/opt/a\\\"b", "/opt/a;b", "/opt/.hidden/x", "//x"})
    CHECK_THAT(error_of(fmt::format(R"({{"smoke_test": ["true"], "files": [{{"path": "{}", "content": ""}}]}})", path)),
               Catch::Contains("may hold only letters, digits"));
  CHECK(nsbox::cli::ParseTemplate(
            "ok", "/x/ok.json",
            R"({"smoke_test": ["true"], "files": [{"path": "/etc/pip.conf.d/a_b-1+c@d,e=f", "content": ""}]})")
            .ok());
  CHECK_THAT(error_of(R"({"smoke_test": ["true"], "files": [{"path": "/x", "content": "", "mode": "rw"}]})"),
             Catch::Contains("mode must be an octal string"));
}

TEST_CASE("the shipped templates all parse and each has a smoke test") {
  const std::string dir = std::string(NSBOX_SOURCE_DIR) + "/rootfs/templates";
  auto names = nsbox::cli::KnownTemplates(dir);
  CHECK(names ==
        std::vector<std::string>{"datasci", "gcc", "go", "java", "minimal", "node", "polyglot", "python", "rust"});
  for (const auto& name : names) {
    INFO(name);
    auto t = nsbox::cli::LoadTemplate(name, dir);
    REQUIRE(t.ok());
    CHECK_FALSE(t->smoke_test.empty());
    CHECK_FALSE(t->description.empty());
  }
}

TEST_CASE("every language's template in languages.json is a shipped template") {
  const std::string dir = std::string(NSBOX_SOURCE_DIR) + "/rootfs/templates";
  std::ifstream in(std::string(NSBOX_SOURCE_DIR) + "/rootfs/languages.json");
  const nlohmann::json table = nlohmann::json::parse(in);
  for (const auto& [name, entry] : table.items()) {
    if (!entry.is_object() || entry.contains("alias")) continue;
    INFO(name);
    REQUIRE(entry.contains("template"));
    CHECK(nsbox::cli::LoadTemplate(entry["template"].get<std::string>(), dir).ok());
  }
}

TEST_CASE("an unknown template name is an error that lists the known templates") {
  const std::string dir = std::string(NSBOX_SOURCE_DIR) + "/rootfs/templates";
  auto t = nsbox::cli::LoadTemplate("pyhton", dir);
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.status().message(),
             Catch::Contains("unknown template 'pyhton'") && Catch::Contains("minimal, node, polyglot, python"));
  CHECK_THAT(nsbox::cli::LoadTemplate("/nonexistent/t.json", dir).status().message(),
             Catch::Contains("does not exist"));
}

TEST_CASE("image names that could escape the store or read as options are refused") {
  for (const char* good : {"minimal", "py3.11", "a", "data_sci-2"}) CHECK(nsbox::cli::ValidateImageName(good).ok());
  for (const char* bad : {"", ".", "..", ".build-x", "-rf", "a/b", "Upper", "x y", "_x"}) {
    INFO(bad);
    CHECK_FALSE(nsbox::cli::ValidateImageName(bad).ok());
  }
  CHECK_FALSE(nsbox::cli::ValidateImageName(std::string(65, 'a')).ok());
}

TEST_CASE("a new image takes --name or the template's name, never an empty one and never host") {
  CHECK(nsbox::cli::NewImageName(std::nullopt, "python").value() == "python");
  CHECK(nsbox::cli::NewImageName(std::string("ds"), "datasci").value() == "ds");
  CHECK(nsbox::cli::NewImageName(std::string(), "minimal").status().message() ==
        "--name is empty: give the image a name, or leave --name out for the template's");
  const std::string host_refused =
      "'host' cannot name an image: --rootfs host always means the host view (give another --name)";
  CHECK(nsbox::cli::NewImageName(std::string("host"), "minimal").status().message() == host_refused);
  CHECK(nsbox::cli::NewImageName(std::nullopt, "host").status().message() == host_refused);  // ./host.json
  CHECK_FALSE(nsbox::cli::NewImageName(std::string("Bad Name"), "minimal").ok());
}

TEST_CASE("ls shows published images with their metadata and hides builds in progress") {
  TempStore store;
  store.AddImage("py", R"({"template": "python", "size_bytes": 1048576, "created": "2026-01-01T00:00:00Z"})");
  store.AddImage("broken-meta", "not json");
  store.AddImage("wrong-types", R"({"template": 5, "size_bytes": "x"})");
  REQUIRE(::mkdir((store.path() + "/.build-x-abc").c_str(), 0755) == 0);
  REQUIRE(::mkdir((store.path() + "/not-an-image").c_str(), 0755) == 0);
  auto images = nsbox::cli::ListImages(store.path());
  REQUIRE(images.ok());
  REQUIRE(images->size() == 3);
  CHECK((*images)[0].name == "broken-meta");
  CHECK((*images)[0].template_name == "?");
  CHECK((*images)[1].name == "py");
  CHECK((*images)[1].template_name == "python");
  CHECK((*images)[1].size_bytes == 1048576);
  CHECK((*images)[1].created == "2026-01-01T00:00:00Z");
  CHECK((*images)[2].name == "wrong-types");  // listed, and usable by name, as one without image.json
  CHECK((*images)[2].template_name == "?");
  CHECK(nsbox::cli::HumanSize(1048576) == "1.0M");
}

TEST_CASE("a store that does not exist yet lists no images") {
  auto images = nsbox::cli::ListImages("/nonexistent/nsbox-store");
  REQUIRE(images.ok());
  CHECK(images->empty());
}

TEST_CASE("an image name resolves to its rootfs; an unknown one names the known images") {
  TempStore store;
  store.AddImage("py", "{}");
  store.AddImage("minimal", "{}");
  auto root = nsbox::cli::ResolveImageIn(store.path(), "py");
  REQUIRE(root.ok());
  CHECK(*root == store.path() + "/py/rootfs");
  auto missing = nsbox::cli::ResolveImageIn(store.path(), "datasci");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("no image 'datasci'") && Catch::Contains("minimal, py"));
  CHECK_FALSE(nsbox::cli::ResolveImageIn(store.path(), "../py").ok());
  // A store this user cannot list (0711, not root) is not said to hold no images.
  REQUIRE(nsbox::WriteFile(store.path() + "/not-a-store", "").ok());
  auto unlisted = nsbox::cli::ResolveImageIn(store.path() + "/not-a-store", "py");
  REQUIRE_FALSE(unlisted.ok());
  CHECK_THAT(unlisted.status().message(), Catch::Contains("(known images: not listed, reading the image store: "
                                                          "opendir(") &&
                                              Catch::Contains("Not a directory (ENOTDIR)"));
}

TEST_CASE("ResolveImage reads the store from NSBOX_IMAGE_STORE") {
  TempStore store;
  store.AddImage("env-image", "{}");
  ::setenv("NSBOX_IMAGE_STORE", store.path().c_str(), 1);
  auto root = nsbox::cli::ResolveImage("env-image");
  ::unsetenv("NSBOX_IMAGE_STORE");
  REQUIRE(root.ok());
  CHECK(*root == store.path() + "/env-image/rootfs");
  CHECK(nsbox::cli::ImageStoreRoot() == "/var/lib/nsbox/images");
}

TEST_CASE("rm removes an image entirely and refuses unknown names") {
  TempStore store;
  store.AddImage("gone", "{}");
  REQUIRE(nsbox::WriteFile(store.path() + "/gone/rootfs/usr/file", "data").ok());
  REQUIRE(::symlink("/etc", (store.path() + "/gone/rootfs/etc-link").c_str()) == 0);
  REQUIRE(nsbox::cli::RemoveImage(store.path(), "gone").ok());
  CHECK_FALSE(nsbox::PathExists(store.path() + "/gone"));
  CHECK(nsbox::PathExists("/etc/passwd"));  // the symlink was removed, not followed
  CHECK(nsbox::cli::ListImages(store.path())->empty());
  CHECK_THAT(nsbox::cli::RemoveImage(store.path(), "gone").message(), Catch::Contains("no image 'gone'"));
}

TEST_CASE("rm removes only images: not another directory of the store, not a symlink, nothing in a foreign store") {
  TempStore store;
  store.AddImage("kept", "{}");
  REQUIRE(::chmod(store.path().c_str(), nsbox::cli::kImageStoreMode) == 0);
  // A directory without rootfs/ (another program's state, say) and a symlink to an image are not images.
  REQUIRE(::mkdir((store.path() + "/serve").c_str(), 0755) == 0);
  REQUIRE(nsbox::WriteFile(store.path() + "/serve/state.json", "{}").ok());
  REQUIRE(::symlink((store.path() + "/kept").c_str(), (store.path() + "/alias").c_str()) == 0);
  CHECK_THAT(nsbox::cli::RemoveImage(store.path(), "serve").message(),
             Catch::StartsWith("no image 'serve' (known images: kept)"));
  CHECK(nsbox::PathExists(store.path() + "/serve/state.json"));
  CHECK_THAT(nsbox::cli::RemoveImage(store.path(), "alias").message(), Catch::StartsWith("no image 'alias'"));
  CHECK_FALSE(nsbox::cli::ResolveImageIn(store.path(), "alias").ok());
  CHECK(nsbox::cli::ListImages(store.path())->size() == 1);
  // NSBOX_IMAGE_STORE naming a directory that is not nsbox's: nothing in it is removed, not even an image-like one.
  REQUIRE(::chmod(store.path().c_str(), 0755) == 0);
  CHECK(nsbox::cli::RemoveImage(store.path(), "kept").message() ==
        fmt::format("image store {} (mode 755) holds 'alias', which is not an image: name a directory of nsbox's own "
                    "(NSBOX_IMAGE_STORE)",
                    store.path()));
  CHECK(nsbox::PathExists(store.path() + "/kept/rootfs"));
}

TEST_CASE("rm removes a tree deeper than a path can name and than the descriptors allow open at once") {
  TempStore store;
  store.AddImage("deep", "{}");
  nsbox::UniqueFd dir(::open((store.path() + "/deep/rootfs").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (int level = 0; level < 1100; ++level) {  // 1100 * 5 bytes: past PATH_MAX (4096)
    REQUIRE(::mkdirat(dir.get(), "dddd", 0755) == 0);
    REQUIRE(::symlinkat("/etc", dir.get(), "link") == 0);
    dir = nsbox::UniqueFd(::openat(dir.get(), "dddd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(dir);
  }
  REQUIRE(nsbox::WriteFile(store.path() + "/deep/rootfs/usr/file", "x").ok());
  dir.reset();
  auto removed = nsbox::cli::RemoveImage(store.path(), "deep");
  INFO(removed.message());
  CHECK(removed.ok());
  CHECK(nsbox::PathExists("/etc/passwd"));  // the links were removed, not followed
  auto left = nsbox::cli::ForeignEntry(store.path());
  REQUIRE(left.ok());
  CHECK(left->empty());  // no .rm-* directory stays behind
  CHECK(nsbox::cli::SweepStaleEntries(store.path()).ok());
}

TEST_CASE("an image held by a sandbox being set up (UseImage) is not removed") {
  // The race this closes: rm looked for the image's mounts before a starting sandbox had made them, then emptied the
  // image under the running program.
  TempStore store;
  store.AddImage("held", "{}");
  ::setenv("NSBOX_IMAGE_STORE", store.path().c_str(), 1);
  auto root = nsbox::cli::UseImage("held");
  auto again = nsbox::cli::UseImage("held");  // one lock per image and process
  ::unsetenv("NSBOX_IMAGE_STORE");
  REQUIRE(root.ok());
  CHECK(*root == store.path() + "/held/rootfs");
  CHECK(again.ok());
  CHECK_THAT(nsbox::cli::RemoveImage(store.path(), "held").message(),
             Catch::StartsWith("image 'held' is in use by a sandbox or session being started or running on it"));
  CHECK(nsbox::PathExists(store.path() + "/held/rootfs/usr"));
  // While rm holds the image, a sandbox cannot take it.
  store.AddImage("going", "{}");
  nsbox::UniqueFd removing(::open((store.path() + "/going").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(::flock(removing.get(), LOCK_EX) == 0);
  ::setenv("NSBOX_IMAGE_STORE", store.path().c_str(), 1);
  auto refused = nsbox::cli::UseImage("going");
  ::unsetenv("NSBOX_IMAGE_STORE");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() == "image 'going' is being removed");
}

TEST_CASE("the sweep removes leftovers of dead builds but not a build whose lock is held") {
  TempStore store;
  const std::string live = store.path() + "/.build-live-aaaaaa";
  const std::string dead = store.path() + "/.build-dead-bbbbbb";
  const std::string removing = store.path() + "/.rm-old-123";
  for (const auto& dir : {live, dead, removing}) {
    REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
    REQUIRE(nsbox::WriteFile(dir + "/junk", "x").ok());
  }
  store.AddImage("kept", "{}");
  // flock(2) locks belong to the open file description: a second open() in this process conflicts, as another builder
  // would.
  nsbox::UniqueFd lock(::open(live.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(::flock(lock.get(), LOCK_EX) == 0);
  auto removed = nsbox::cli::SweepStaleEntries(store.path());
  REQUIRE(removed.ok());
  CHECK(*removed == 2);
  CHECK(nsbox::PathExists(live + "/junk"));
  CHECK_FALSE(nsbox::PathExists(dead));
  CHECK_FALSE(nsbox::PathExists(removing));
  CHECK(nsbox::PathExists(store.path() + "/kept/rootfs"));
}

TEST_CASE("a leftover the sweep cannot remove is reported, and the others are still swept") {
  if (::geteuid() != 0) {
    nsbox::testing::RecordSkip("image_tests", "immutable leftover", "chattr +i needs root");
    return;
  }
  TempStore store;
  const std::string stuck = store.path() + "/.rm-stuck-1";
  const std::string dead = store.path() + "/.build-dead-cccccc";
  for (const auto& dir : {stuck, dead}) {
    REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
    REQUIRE(nsbox::WriteFile(dir + "/keep", "x").ok());
  }
  if (std::system(("chattr +i " + stuck + "/keep 2>/dev/null").c_str()) != 0) {
    nsbox::testing::RecordSkip("image_tests", "immutable leftover", "the file system has no immutable flag");
    return;
  }
  auto removed = nsbox::cli::SweepStaleEntries(store.path());
  (void)std::system(("chattr -i " + stuck + "/keep").c_str());
  REQUIRE_FALSE(removed.ok());
  CHECK_THAT(removed.status().message(), Catch::Contains("removing the leftover " + stuck));
  CHECK_FALSE(nsbox::PathExists(dead));
}

TEST_CASE("a directory that is not nsbox's is neither swept nor given the store's mode") {
  // NSBOX_IMAGE_STORE=/tmp by mistake: /tmp keeps its mode, and another program's .build-* directory stays.
  TempStore store;
  REQUIRE(::chmod(store.path().c_str(), 01777) == 0);
  REQUIRE(nsbox::WriteFile(store.path() + "/someone-elses-file", "x").ok());
  const std::string build = store.path() + "/.build-of-another-tool";
  REQUIRE(::mkdir(build.c_str(), 0755) == 0);
  CHECK(*nsbox::cli::ForeignEntry(store.path()) == "someone-elses-file");
  auto removed = nsbox::cli::SweepStaleEntries(store.path());
  REQUIRE(removed.ok());
  CHECK(*removed == 0);
  CHECK(nsbox::PathExists(build));
  if (::geteuid() == 0) {
    CHECK(nsbox::cli::EnsureStore(store.path()).message() ==
          fmt::format("image store {} (mode 1777) holds 'someone-elses-file', which is not an image: name a directory "
                      "of nsbox's own (NSBOX_IMAGE_STORE)",
                      store.path()));
    struct stat st;
    REQUIRE(::stat(store.path().c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 01777);
  }
  // Only images and leftovers in it: nothing foreign, and the sweep goes ahead.
  REQUIRE(::unlink((store.path() + "/someone-elses-file").c_str()) == 0);
  store.AddImage("kept", "{}");
  CHECK(nsbox::cli::ForeignEntry(store.path())->empty());
  CHECK(*nsbox::cli::SweepStaleEntries(store.path()) == 1);
}

TEST_CASE("disk usage counts a hard-linked file once") {
  TempStore store;
  std::string big(256 * 1024, 'x');
  REQUIRE(nsbox::WriteFile(store.path() + "/a", big).ok());
  auto one = nsbox::cli::DiskUsage(store.path());
  REQUIRE(one.ok());
  REQUIRE(::link((store.path() + "/a").c_str(), (store.path() + "/b").c_str()) == 0);
  auto linked = nsbox::cli::DiskUsage(store.path());
  REQUIRE(linked.ok());
  CHECK(*one >= big.size());
  CHECK(*linked == *one);
}

TEST_CASE("the store is created root-owned with mode 0711 when nsbox runs as root") {
  if (::geteuid() != 0) {
    nsbox::testing::RecordSkip("image_tests", "store mode", "needs root to create a root-owned store");
    return;
  }
  TempStore parent;
  const std::string store = parent.path() + "/var/lib/nsbox/images";
  // mkdtemp's 0700 would keep the sandbox's unprivileged uid out of the store, and EnsureStore says so.
  CHECK_THAT(nsbox::cli::EnsureStore(store).message(), Catch::Contains("cannot be searched by others"));
  REQUIRE(::chmod(parent.path().c_str(), 0755) == 0);
  REQUIRE(nsbox::cli::EnsureStore(store).ok());
  struct stat st;
  REQUIRE(::stat(store.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0711);
  CHECK(st.st_uid == 0);
  REQUIRE(::chmod(store.c_str(), 0777) == 0);
  REQUIRE(nsbox::cli::EnsureStore(store).ok());
  REQUIRE(::stat(store.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0711);
}
