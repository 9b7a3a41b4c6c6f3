// Network policy through real sandboxes: none by default, and allow= reaching only allowed domains via the proxy.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nsbox_config.h"
#include "tests/support/run_nsbox.h"

using nlohmann::json;
using nsbox::testing::RunNsboxJson;
using nsbox::testing::RunNsboxRaw;

namespace {

// The stand-in origin (tests/network/origin.py) on 127.0.0.1, for "allowed.test" and "refused.test".
struct Origin {
  pid_t pid = -1;
  int port = 0;
  Origin() {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::execl("/usr/bin/python3", "python3", NSBOX_SOURCE_DIR "/tests/network/origin.py", nullptr);
      _exit(127);
    }
    ::close(fds[1]);
    std::string line;
    char c;
    while (line.size() < 16 && ::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
    ::close(fds[0]);
    const char* buf = line.c_str();
    port = std::atoi(buf);
    REQUIRE(port > 0);
  }
  ~Origin() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// Both test names resolve to the local origin; only the policy decides which one may be reached.
struct ResolverOverride {
  ResolverOverride() { ::setenv("NSBOX_TEST_RESOLVER_OVERRIDE", "allowed.test=127.0.0.1,refused.test=127.0.0.1", 1); }
  ~ResolverOverride() { ::unsetenv("NSBOX_TEST_RESOLVER_OVERRIDE"); }
};

std::vector<std::string> AllowArgs() {
  return {"--network", "allow=allowed.test", "--dangerously-allow-private-addresses"};
}

std::string Fetch(const std::string& url) {
  return fmt::format(
      "import urllib.request, sys\n"
      "try:\n"
      "    print(urllib.request.urlopen('{}', timeout=10).read().decode().strip())\n"
      "except Exception as e:\n"
      "    print('FAILED', e)\n",
      url);
}

std::vector<std::string> Python(std::vector<std::string> args, const std::string& code) {
  args.insert(args.end(), {"--lang", "python", "--code", code});
  return args;
}

}  // namespace

TEST_CASE("network none: only loopback exists, DNS fails and the host's loopback is unreachable", "[network]") {
  Origin origin;
  json r =
      RunNsboxJson(
          {"--lang", "python", "--code",
           fmt::format("import socket, os\n"
                       "print(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'no-sys')\n"
                       "try:\n    socket.getaddrinfo('example.com', 80)\n    print('dns ok')\n"
                       "except OSError as e: print('dns failed')\n"
                       "s = socket.socket()\n"
                       "try:\n    s.connect(('127.0.0.1', {}))\n    print('connected')\n"
                       "except OSError as e: print('refused', e.errno)\n",
                       origin.port)})
          .json;
  CHECK(r["status"] == "ok");
  CHECK(r["stdout"].get<std::string>().find("dns failed") != std::string::npos);
  CHECK(r["stdout"].get<std::string>().find("refused 111") != std::string::npos);
}

TEST_CASE("network allow: an allowed domain is fetched through the proxy", "[network]") {
  Origin origin;
  ResolverOverride resolver;
  json r = RunNsboxJson(Python(AllowArgs(), Fetch(fmt::format("http://allowed.test:{}/", origin.port)))).json;
  INFO(r.dump());
  CHECK(r["status"] == "ok");
  CHECK(r["stdout"] == "hello from the allowed origin\n");
  CHECK(r["denied_hosts"].empty());
  CHECK(r["network"]["bytes_in"].get<uint64_t>() > 0);
}

TEST_CASE("network allow: a refused domain is refused by the proxy and reported in denied_hosts", "[network]") {
  Origin origin;
  ResolverOverride resolver;
  json r = RunNsboxJson(Python(AllowArgs(), Fetch(fmt::format("http://refused.test:{}/", origin.port)))).json;
  INFO(r.dump());
  // The proxy's own refusal, at once: not a connection tried and timed out.
  CHECK(r["stdout"] ==
        "FAILED HTTP Error 403: Forbidden (refused.test is not in the --network allow list (allowed: "
        "allowed.test))\n");
  REQUIRE(r["denied_hosts"].size() == 1);
  CHECK(r["denied_hosts"][0]["host"] == "refused.test");
  CHECK(r["denied_hosts"][0]["count"] == 1);
}

// A compiled language runs its steps in a session of its own, a --cases run its cases, and a batch job either: each
// reports the proxy's refusals and traffic as a plain run does.
TEST_CASE("network allow: compiled programs, --cases and batch jobs report denied_hosts and network", "[network]") {
  Origin origin;
  ResolverOverride resolver;
  const std::string refused = fmt::format("http://refused.test:{}/", origin.port);
  const std::string c_code = fmt::format(
      "#include <stdlib.h>\nint main(void) {{ return system(\"curl -sS -m 5 -o /dev/null {} 2>/dev/null\") != 0; }}\n",
      refused);
  auto check = [](const json& r) {
    INFO(r.dump());
    REQUIRE(r.contains("denied_hosts"));
    REQUIRE(r["denied_hosts"].size() == 1);
    CHECK(r["denied_hosts"][0]["host"] == "refused.test");
    CHECK(r["denied_hosts"][0]["count"] == 1);
    REQUIRE(r.contains("network"));
    CHECK(r["network"]["allowed_domains"] == json::array({"allowed.test"}));
    CHECK(r["network"]["mode"] == "allow");
    CHECK(r["network"].contains("bytes_in"));
  };
  nsbox::testing::TempDir dir;
  std::vector<std::string> args = AllowArgs();
  args.insert(args.end(), {"--lang", "c", "--code", c_code});
  SECTION("a compiled run") { check(RunNsboxJson(args).json); }
  SECTION("a compiled run's --cases") {
    args.insert(args.end(), {"--cases", dir.Write("cases.jsonl", "{\"expected_stdout\": \"\"}\n")});
    check(RunNsboxJson(args).json);
  }
  SECTION("a compiled batch job") {
    json job = {{"id", "c"}, {"language", "c"}, {"code", c_code}};
    auto r = RunNsboxRaw({"batch", "--network", "allow=allowed.test", "--dangerously-allow-private-addresses",
                          dir.Write("jobs.jsonl", job.dump() + "\n")});
    INFO(r.err);
    check(json::parse(r.out)["result"]);
  }
}

TEST_CASE("network allow: DNS from inside still fails; only the proxy resolves names", "[network]") {
  Origin origin;
  ResolverOverride resolver;
  json r =
      RunNsboxJson(Python(AllowArgs(),
                          "import socket\ntry:\n    socket.getaddrinfo('allowed.test', 80)\n    print('resolved')\n"
                          "except OSError:\n    print('no dns')\n"))
          .json;
  INFO(r.dump());
  CHECK(r["stdout"] == "no dns\n");
}

TEST_CASE("network allow: IP literals are refused even for the allowed origin's address", "[network]") {
  Origin origin;
  ResolverOverride resolver;
  // 127.0.0.1 itself is in NO_PROXY (the sandbox's own loopback); any other literal goes to the proxy, which
  // refuses it without connecting anywhere.
  json r = RunNsboxJson(Python(AllowArgs(), Fetch(fmt::format("http://10.11.12.13:{}/", origin.port)))).json;
  INFO(r.dump());
  CHECK(r["stdout"].get<std::string>().starts_with("FAILED"));
  REQUIRE(r["denied_hosts"].size() == 1);
  CHECK(r["denied_hosts"][0]["host"] == "10.11.12.13");
}

TEST_CASE("network allow: a redirect to a refused host is refused", "[network]") {
  Origin origin;
  ResolverOverride resolver;
  std::string url = fmt::format("http://allowed.test:{0}/redirect?to=http://refused.test:{0}/", origin.port);
  json r = RunNsboxJson(Python(AllowArgs(), Fetch(url))).json;
  INFO(r.dump());
  CHECK(r["stdout"].get<std::string>().starts_with("FAILED"));
  REQUIRE(r["denied_hosts"].size() == 1);
  CHECK(r["denied_hosts"][0]["host"] == "refused.test");
}

TEST_CASE("network allow: without the explicit opt-in a domain resolving to loopback is refused", "[network]") {
  Origin origin;
  ResolverOverride resolver;
  json r = RunNsboxJson(
               Python({"--network", "allow=allowed.test"}, Fetch(fmt::format("http://allowed.test:{}/", origin.port))))
               .json;
  INFO(r.dump());
  CHECK(r["stdout"].get<std::string>().starts_with("FAILED"));
  CHECK(r["denied_hosts"].size() == 1);
}

TEST_CASE("network allow: --network-limit caps the bytes moved", "[network]") {
  Origin origin;
  ResolverOverride resolver;
  auto args = AllowArgs();
  args.insert(args.end(), {"--network-limit", "64K"});
  json r = RunNsboxJson(Python(args, Fetch(fmt::format("http://allowed.test:{}/big", origin.port)))).json;
  INFO(r.dump());
  CHECK(r["stdout"].get<std::string>().starts_with("FAILED"));
  CHECK(r["network"]["limit_reached"] == true);
  CHECK(r["network"]["bytes_in"].get<uint64_t>() + r["network"]["bytes_out"].get<uint64_t>() <= 64 * 1024);
}

// The proxy resolves an allowed name as itself only: not NAME.<search domain> from the host's resolv.conf, which
// is another name (with Kubernetes' ndots:5 it is even tried first). The host's /etc/hosts still answers. Run in a
// mount and network namespace of its own, whose resolv.conf points at a stub DNS server (tests/network/dns_stub.py)
// that answers only for names under corp.test.
TEST_CASE("network allow: the host's DNS search domains are not appended to an allowed name", "[network]") {
  if (::geteuid() != 0) {
    nsbox::testing::RecordSkip("network_tests", "network allow: the host's DNS search domains are not appended to an "
                               "allowed name", "the private mount and network namespace need root");
    return;
  }
  nsbox::testing::TempDir dir;
  const std::string script = fmt::format(
      R"(set -e
printf 'nameserver 127.0.0.1\nsearch corp.test\noptions ndots:5 attempts:1 timeout:1\n' > {dir}/resolv.conf
printf '127.0.0.1 localhost\n127.0.0.1 hosted.test\n' > {dir}/hosts
ip link set lo up
mount --bind {dir}/resolv.conf /etc/resolv.conf
mount --bind {dir}/hosts /etc/hosts
echo served > {dir}/page
/usr/bin/python3 {src}/tests/network/dns_stub.py corp.test {dir}/asked > {dir}/dns.out 2>&1 &
/usr/bin/python3 -m http.server --bind 127.0.0.1 8765 --directory {dir} > /dev/null 2>&1 &
trap 'kill $(jobs -p)' EXIT
for i in $(seq 100); do
  grep -q ready {dir}/dns.out && (echo > /dev/tcp/127.0.0.1/8765) 2> /dev/null && break; sleep 0.1
done
for host in allowed.test hosted.test; do
  {nsbox} run --json --network allow=$host --dangerously-allow-private-addresses --lang bash \
    --code "curl -sS -m 10 http://$host:8765/page" > {dir}/$host.json
done
)",
      fmt::arg("dir", dir.path()), fmt::arg("src", NSBOX_SOURCE_DIR), fmt::arg("nsbox", nsbox::testing::NsboxBinary()));
  auto r = nsbox::testing::RunProcess({"/usr/bin/unshare", "--mount", "--net", "--", "/bin/bash", "-c", script});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto read_json = [&](const std::string& name) {
    auto text = nsbox::testing::RunProcess({"/bin/cat", dir.path() + "/" + name}).out;
    return json::parse(text, nullptr, false);
  };
  json searched = read_json("allowed.test.json");
  INFO(searched.dump());
  // allowed.test has no DNS answer; allowed.test.corp.test, which the stub answers, must never be asked for.
  // (the proxy's 502 page, which curl prints)
  CHECK(searched.value("stdout", "").find("cannot resolve allowed.test") != std::string::npos);
  std::string asked = nsbox::testing::RunProcess({"/bin/cat", dir.path() + "/asked"}).out;
  INFO(asked);
  CHECK(asked.find("allowed.test\n") != std::string::npos);
  CHECK(asked.find("allowed.test.corp.test") == std::string::npos);
  json hosted = read_json("hosted.test.json");
  INFO(hosted.dump());
  CHECK(hosted.value("stdout", "") == "served\n");
}

TEST_CASE("network options: malformed allow lists are one-line errors", "[network]") {
  auto r = RunNsboxRaw({"run", "--network", "allow=http://x.com/path", "--", "/bin/true"});
  CHECK(r.exit_code == 125);
  CHECK(r.err.find("--network") != std::string::npos);
  r = RunNsboxRaw({"run", "--network-limit", "1M", "--", "/bin/true"});
  CHECK(r.exit_code == 125);
  CHECK(r.err.find("allow=") != std::string::npos);
}

TEST_CASE(
    "network allow in a session: pip installs from an allowed local index, the package persists, others are refused",
    "[network][session]") {
  Origin origin;
  ResolverOverride resolver;
  // The session's supervisor, which runs the proxy, inherits this with the environment of `session create`.
  ::setenv("NSBOX_TEST_RESOLVER_OVERRIDE", "index.test=127.0.0.1,refused.test=127.0.0.1", 1);
  auto created = RunNsboxRaw({"session", "create", "--json", "--network", "allow=index.test",
                              "--dangerously-allow-private-addresses", "--idle-timeout", "2m"});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = json::parse(created.out)["id"].get<std::string>();
  struct Remove {
    std::string id;
    ~Remove() { RunNsboxRaw({"session", "rm", id}); }
  } remove{id};
  std::string index = fmt::format("http://index.test:{}/simple/", origin.port);
  auto install = RunNsboxRaw({"exec", id, "--json", "--timeout", "120s", "--env", "PIP_DISABLE_PIP_VERSION_CHECK=1",
                              "--", "/usr/bin/python3", "-m", "pip", "install", "--user", "--no-deps",
                              "--break-system-packages", "--trusted-host", "index.test", "--index-url", index,
                              "nsboxdemo"});
  json installed = json::parse(install.out);
  INFO(installed.dump());
  REQUIRE(installed["status"] == "ok");
  CHECK(installed["denied_hosts"].empty());
  // A later exec of the same session imports it: pip --user put it in the session's home directory.
  auto use =
      RunNsboxRaw({"exec", id, "--json", "--lang", "python", "--code", "import nsboxdemo\nprint(nsboxdemo.GREETING)"});
  json used = json::parse(use.out);
  INFO(used.dump());
  CHECK(used["stdout"] == "installed through the proxy\n");
  // An index outside the list fails and the refusal is reported for that exec.
  auto refused = RunNsboxRaw({"exec", id, "--json", "--timeout", "60s", "--", "/usr/bin/python3", "-m", "pip",
                              "download", "--no-deps", "--retries", "0", "-d", "/tmp/dl", "--trusted-host",
                              "refused.test", "--index-url", fmt::format("http://refused.test:{}/simple/", origin.port),
                              "nsboxdemo"});
  json denied = json::parse(refused.out);
  INFO(denied.dump());
  CHECK(denied["status"] == "exit");
  REQUIRE(denied["denied_hosts"].size() == 1);
  CHECK(denied["denied_hosts"][0]["host"] == "refused.test");
}
