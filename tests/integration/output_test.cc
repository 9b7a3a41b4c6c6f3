// Integration: output capture: floods keep head and tail with a marker in bounded memory, both streams drain
// concurrently, a background grandchild holding the pipe does not hang nsbox, binary output becomes valid UTF-8.
#include <catch2/catch.hpp>

#include "tests/support/run_nsbox.h"

using namespace nsbox::testing;
using namespace std::chrono_literals;

TEST_CASE("a 200 MB flood keeps head and tail with a cut marker, in bounded memory and time", "[integration][output]") {
  auto r = RunNsboxJson({"--output-limit", "64K", "--", "/bin/sh", "-c",
                         "echo HEAD-MARK; head -c 200000000 /dev/zero | tr '\\0' a; echo; echo TAIL-MARK"});
  INFO(r.Describe().substr(0, 2000));
  REQUIRE(r.status() == "ok");
  const std::string out = r.out();
  const uint64_t total = 10 + 200000000 + 1 + 10;
  CHECK(r.json.value("stdout_bytes", uint64_t{0}) == total);
  CHECK(r.json.value("stdout_truncated", false));
  CHECK(out.starts_with("HEAD-MARK\naaaa"));
  CHECK(out.ends_with("aaaa\nTAIL-MARK\n"));
  CHECK(out.find("[nsbox: " + std::to_string(total - 65536) + " bytes cut]") != std::string::npos);
  CHECK(out.size() < 65536 + 100);
  CHECK(r.process.max_rss_kb < 64 * 1024);  // nsbox itself: far below the 200 MB that went through it
  CHECK(r.process.elapsed < 30s);
}

TEST_CASE("stdout and stderr flooded at once are both drained (no deadlock)", "[integration][output]") {
  auto r = RunPython(R"(
chunk = "y" * 65536
for i in range(300):
    sys.stdout.write(chunk); sys.stderr.write(chunk)
sys.stdout.flush(); sys.stderr.flush()
)",
                     {"--output-limit", "1M", "--timeout", "20s"});
  INFO(r.Describe().substr(0, 2000));
  REQUIRE(r.status() == "ok");
  CHECK(r.json.value("stdout_bytes", 0) == 300 * 65536);
  CHECK(r.json.value("stderr_bytes", 0) == 300 * 65536);
  CHECK(r.json.value("stderr_truncated", false));
}

TEST_CASE("output under the limit is kept whole and not marked truncated", "[integration][output]") {
  auto r = RunNsboxJson({"--output-limit", "1K", "--", "/bin/sh", "-c", "printf '%01000d' 0"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == std::string(1000, '0'));
  CHECK_FALSE(r.json.value("stdout_truncated", true));
}

TEST_CASE("a background grandchild holding the output pipe does not hang nsbox", "[integration][output]") {
  auto r = RunNsboxJson({"--timeout", "30s", "--", "/bin/sh", "-c", "(sleep 60 &); (sleep 60 >&2 &); echo done"});
  INFO(r.Describe());
  REQUIRE(r.status() == "ok");
  CHECK(r.out() == "done\n");
  CHECK(r.process.elapsed < 20s);  // not held until the 30 s time-out by the sleeps' copies of the pipes
}

TEST_CASE("binary output is reported as valid UTF-8 with replacement characters", "[integration][output]") {
  auto r = RunNsboxJson({"--", "/bin/sh", "-c", "printf 'ok\\377\\376\\000\\300\\257 \\342\\202\\254'"});
  INFO(r.Describe());
  REQUIRE(!r.json.is_null());  // nlohmann's parser rejects invalid UTF-8: parsing at all proves validity
  REQUIRE(r.status() == "ok");
  CHECK(r.json.value("stdout_bytes", 0) == 11);
  CHECK(r.out() == std::string("ok\xEF\xBF\xBD\xEF\xBF\xBD") + std::string(1, '\0') +
                       "\xEF\xBF\xBD\xEF\xBF\xBD \xE2\x82\xAC");
}

TEST_CASE("without --json the program's output passes through byte for byte", "[integration][output]") {
  auto raw = RunNsboxRaw({"run", "--", "/bin/sh", "-c", "printf 'a\\377b'; printf 'e' >&2"});
  CHECK(raw.exit_code == 0);
  CHECK(raw.out == "a\xff" "b");
  CHECK(raw.err == "e");
}
