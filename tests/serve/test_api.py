# tests/serve/test_api.py: every endpoint and bad input of docs/api.md against one shared `nsbox serve`.
"""One server serves these classes (socket and TCP with tokens for alice and bob, uid 65533 allowed, host network
allowed); each test removes what it made and then checks that nothing it caused is left on the host (processes,
cgroups, mounts, state entries); the last class stops the server by SIGTERM and checks that it left nothing."""

import hashlib
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import NSBOX, REPO, Api, Footprint, Server, files_path, wait_clean, wait_for

TOKENS = {"alice": "tok-alice-" + secrets.token_hex(8), "bob": "tok-bob-" + secrets.token_hex(8)}
MAX_BODY = 1 << 20
SHARED_ARGS = ["--max-sandboxes", "64", "--max-per-client", "40", "--max-body", str(MAX_BODY),
               "--max-timeout", "30", "--allow-uid", "65533", "--allow-network-host"]
ALLOWED_UID, OTHER_UID = 65533, 65534
SANDBOX_ID = re.compile(r"^sb-[0-9a-f]{24}$")
UNKNOWN_ID = "sb-" + "0" * 24
SMALL = {"limits": {"memory": "128M", "pids": 64}}

_shared = {"server": None, "error": None}


def shared_server():
    if _shared["error"]:
        raise AssertionError(f"the shared server could not start: {_shared['error']}")
    if _shared["server"] is None:
        server = Server(SHARED_ARGS, tokens=TOKENS)
        try:
            server.start()
        except AssertionError as e:
            _shared["error"] = str(e)
            server.remove()
            raise
        _shared["server"] = server
    return _shared["server"]


def shutdown_leftovers():
    if _shared["server"] is not None:
        _shared["server"].remove()
        _shared["server"] = None


def assert_error(case, r, status, code):
    """A non-2xx answer: the status, and the body {"error": {"code", "message": one line}}."""
    case.assertEqual(r.status, status, f"expected HTTP {status} {code}, got {r!r}")
    body = r.json()
    case.assertIsInstance(body.get("error"), dict, f"no error object: {r!r}")
    case.assertEqual(body["error"].get("code"), code, repr(r))
    message = body["error"].get("message")
    case.assertIsInstance(message, str)
    case.assertTrue(message.strip(), f"an empty message: {r!r}")
    case.assertNotIn("\n", message.strip(), f"the message is not one line: {r!r}")
    return body


def as_uid(uid, socket_path, requests):
    """Sends each (method, path, body) as uid over the socket from a forked child; returns [(status, body)]."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = []
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            api = Api(socket_path=socket_path, timeout=20)
            for method, path, body in requests:
                try:
                    r = api.request(method, path, body)
                    out.append([r.status, r.body.decode(errors="replace")])
                except OSError as e:
                    out.append([-1, f"{type(e).__name__}: {e}"])
            os.write(write_end, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    data = b""
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return [(status, body) for status, body in json.loads(data or b"[]")]


class SharedCase(unittest.TestCase):
    """A test against the shared server; what it creates is removed after it, then the leak check runs."""

    def setUp(self):
        self.server = shared_server()
        self.api = self.server.api()
        self.alice = self.server.api(token=TOKENS["alice"])
        self.bob = self.server.api(token=TOKENS["bob"])
        self.base = Footprint.of(self.server)
        self.seen = Footprint()
        self.made = []

    def make(self, api=None, body=None):
        api = api or self.api
        sbx = api.create(dict(SMALL, **(body or {})))
        self.made.append((api, sbx["id"]))
        self.seen.merge(Footprint.of(self.server))
        return sbx

    def tearDown(self):
        if self.server.proc.poll() is not None:
            self.fail(f"the server exited with {self.server.proc.returncode}: {self.server.log_tail()}")
        self.seen.merge(Footprint.of(self.server))
        for api, sandbox_id in self.made:
            r = api.delete(sandbox_id)
            self.assertIn(r.status, (204, 404), f"DELETE {sandbox_id}: {r!r}")
        left = wait_clean(self.seen, self.server, base=self.base)
        self.assertEqual(left, [], "left on the host after the test's sandboxes were deleted")

    def run_in(self, sandbox_id, body, api=None):
        return (api or self.api).exec(sandbox_id, body)


class Endpoints(SharedCase):
    def test_one_connection_carries_several_requests(self):
        conn = self.api.connection()
        self.addCleanup(conn.close)
        for path in ("/v1/healthz", "/v1/capacity", "/v1/sandboxes"):
            conn.request("GET", path)
            r = conn.getresponse()
            self.assertEqual(r.status, 200, path)
            json.loads(r.read())

    def test_healthz_answers_ok(self):
        r = self.api.request("GET", "/v1/healthz")
        self.assertEqual(r.status, 200, repr(r))
        self.assertEqual(r.json(), {"status": "ok"})

    def test_readyz_answers_ready_without_a_token_while_sandboxes_can_be_made(self):
        r = self.api.request("GET", "/v1/readyz")
        self.assertEqual((r.status, r.json()), (200, {"status": "ready"}), repr(r))

    def test_openapi_json_is_the_document_in_the_repo(self):
        r = self.api.request("GET", "/v1/openapi.json")
        self.assertEqual(r.status, 200, repr(r))
        self.assertTrue(r.content_type.startswith("application/json"), r.content_type)
        with open(os.path.join(REPO, "docs", "openapi.json"), encoding="utf-8") as f:
            self.assertEqual(r.json(), json.load(f))

    def test_capacity_reports_limits_and_counts_a_new_sandbox(self):
        before = self.api.call("GET", "/v1/capacity")
        for key in ("sandboxes", "pool", "memory_bytes", "pids"):
            self.assertIn(key, before)
        self.assertEqual(before["sandboxes"]["max"], 64)
        self.assertEqual(before["sandboxes"]["per_client_max"], 40)
        self.assertEqual(before["pool"], {})
        for budget in ("memory_bytes", "pids"):
            b = before[budget]
            self.assertTrue(all(isinstance(b[k], int) for k in ("budget", "committed", "free")), b)
            self.assertLessEqual(b["free"], b["budget"])
        self.assertEqual(before["client"]["sandboxes"]["max"], 40)
        self.make()
        after = self.api.call("GET", "/v1/capacity")
        self.assertEqual(after["sandboxes"]["running"], before["sandboxes"]["running"] + 1)
        self.assertGreater(after["memory_bytes"]["committed"], before["memory_bytes"]["committed"])
        self.assertEqual(after["client"]["sandboxes"]["running"], before["client"]["sandboxes"]["running"] + 1)
        self.assertGreater(after["client"]["memory_bytes"]["committed"], before["client"]["memory_bytes"]["committed"])

    def test_create_answers_201_with_the_sandbox(self):
        now_ms = time.time() * 1000
        sbx = self.make(body={"labels": {"conversation": "c-17"}, "idle_timeout": 300, "max_lifetime": 600,
                              "network": "none", "template": "host"})
        self.assertRegex(sbx["id"], SANDBOX_ID)
        self.assertEqual(sbx["state"], "running")
        self.assertEqual(sbx["labels"], {"conversation": "c-17"})
        self.assertEqual(sbx["template"], "host")
        self.assertEqual(sbx["network"], "none")
        self.assertIs(sbx["from_pool"], False)
        self.assertEqual((sbx["idle_timeout"], sbx["max_lifetime"]), (300, 600))
        self.assertIsInstance(sbx["limits"], dict)
        self.assertLess(abs(sbx["created_at_ms"] - now_ms), 3_600_000, "created_at_ms is not the time in ms")

    def test_an_empty_body_creates_with_the_defaults(self):
        r = self.api.request("POST", "/v1/sandboxes", raw=b"", headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 201, repr(r))
        sbx = r.json()
        self.made.append((self.api, sbx["id"]))
        self.assertEqual((sbx["template"], sbx["network"]), ("host", "none"))

    def test_the_socket_is_mode_0660(self):
        self.assertEqual(stat.S_IMODE(os.stat(self.server.socket_path).st_mode), 0o660)

    def test_an_idle_sandbox_ends_after_its_idle_timeout_and_one_past_its_max_lifetime(self):
        idle = self.make(body={"idle_timeout": 1})["id"]
        old = self.make(body={"idle_timeout": 300, "max_lifetime": 2})["id"]
        for sandbox_id in (idle, old):
            ended = wait_for(lambda: self.api.request("GET", f"/v1/sandboxes/{sandbox_id}").status in (404, 409), 20,
                             0.2)
            self.assertTrue(ended, f"{sandbox_id} still runs 20 s after its time-out")
        self.assertNotIn(idle, [s["id"] for s in self.api.call("GET", "/v1/sandboxes")["sandboxes"]])

    def test_template_python_runs_python(self):
        sbx = self.make(body={"template": "python"})
        self.assertEqual(sbx["template"], "python")
        r = self.run_in(sbx["id"], {"argv": ["python3", "-c", "print(2 ** 10)"]})
        self.assertEqual(r["stdout"], "1024\n", r)

    def test_list_and_get_show_the_sandbox_and_delete_ends_it(self):
        sbx = self.make()
        listed = self.api.call("GET", "/v1/sandboxes")["sandboxes"]
        self.assertIn(sbx["id"], [s["id"] for s in listed])
        got = self.api.call("GET", f"/v1/sandboxes/{sbx['id']}")
        self.assertEqual((got["id"], got["state"]), (sbx["id"], "running"))
        r = self.api.delete(sbx["id"])
        self.assertEqual((r.status, r.body), (204, b""))
        assert_error(self, self.api.request("GET", f"/v1/sandboxes/{sbx['id']}"), 404, "not_found")
        assert_error(self, self.api.delete(sbx["id"]), 404, "not_found")
        listed = self.api.call("GET", "/v1/sandboxes")["sandboxes"]
        self.assertNotIn(sbx["id"], [s["id"] for s in listed])

    def test_a_delete_ends_a_running_exec_whose_answer_says_why(self):
        sbx = self.make()["id"]
        answer = {}
        marker = sleep_marker()
        t = threading.Thread(target=lambda: answer.update(self.api.exec(sbx, {"cmd": f"exec sleep {marker}"})))
        t.start()
        self.assertTrue(wait_for(lambda: host_processes_with_argv(["sleep", marker]), 10), "the exec did not start")
        self.assertEqual(self.api.delete(sbx).status, 204)
        t.join(30)
        self.assertEqual((answer.get("status"), answer.get("signal")), ("signal", 9), answer)
        self.assertIn("the sandbox was deleted", answer.get("reason", ""), answer)


class Exec(SharedCase):
    def setUp(self):
        super().setUp()
        self.sbx = self.make(body={"env": {"FROM_CREATE": "c", "OVERRIDDEN": "create"}})["id"]

    def test_argv_runs_without_a_shell(self):
        r = self.run_in(self.sbx, {"argv": ["printf", "%s|%s", "a b", "$HOME"]})
        self.assertEqual((r["status"], r["exit_code"], r["stdout"]), ("ok", 0, "a b|$HOME"), r)

    def test_cmd_runs_by_sh_c_and_a_nonzero_exit_is_a_result(self):
        r = self.run_in(self.sbx, {"cmd": "echo $((6 * 7)); echo oops >&2; exit 3"})
        self.assertEqual((r["status"], r["exit_code"], r["stdout"], r["stderr"]), ("exit", 3, "42\n", "oops\n"), r)

    def test_language_and_code_runs_python(self):
        r = self.run_in(self.sbx, {"language": "python", "code": "import sys; print(6 * 7, sys.version_info[0])"})
        self.assertEqual((r["status"], r["stdout"]), ("ok", "42 3\n"), r)

    def test_a_compiled_language_is_compiled_then_run_and_a_compile_error_is_compile_error(self):
        r = self.run_in(self.sbx, {"language": "cpp", "stdin": "40 2\n",
                                   "code": "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; "
                                           "std::cout << a + b << std::endl; }"})
        self.assertEqual((r["status"], r["stdout"], r["compile"]["status"]), ("ok", "42\n", "ok"), r)
        r = self.run_in(self.sbx, {"language": "c", "code": "int main(void) { return not_declared; }"})
        self.assertEqual((r["status"], r["exit_code"], r["compile"]["exit_code"]), ("compile_error", -1, 1), r)
        self.assertIn("not_declared", r["stderr"], r)

    def test_an_exec_in_a_sandbox_whose_session_ended_outside_the_server_is_409_and_the_sandbox_is_gone(self):
        before = set(os.listdir(self.server.state_dir))
        gone = self.make()["id"]
        [session] = [e for e in set(os.listdir(self.server.state_dir)) - before if e.startswith("s")]
        env = dict(os.environ, NSBOX_STATE_DIR=self.server.state_dir)
        rm = subprocess.run([NSBOX, "session", "rm", session], env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(rm.returncode, 0, rm.stderr)
        r = assert_error(self, self.api.request("POST", f"/v1/sandboxes/{gone}/exec", {"argv": ["/bin/true"]}), 409,
                         "conflict")
        self.assertIn("has ended", r["error"]["message"])
        assert_error(self, self.api.request("GET", f"/v1/sandboxes/{gone}"), 404, "not_found")
        # The sandbox beside it is untouched.
        self.assertEqual(self.run_in(self.sbx, {"argv": ["/bin/true"]})["status"], "ok")

    def test_compile_memory_and_compile_timeout_limit_the_compile_step_alone(self):
        hello = "#include <iostream>\nint main() { std::cout << 42 << std::endl; }"
        # 8M, well under what cc1plus allocates: at 16M it could thrash on its text pages until its time-out.
        r = self.run_in(self.sbx, {"language": "cpp", "code": hello, "compile_memory": "8M"})
        self.assertEqual((r["status"], r["compile"]["status"]), ("compile_error", "oom"), r)
        self.assertIn("compile_memory", r["reason"], r)
        r = self.run_in(self.sbx, {"language": "cpp", "code": hello, "compile_timeout": 0.05})
        self.assertEqual((r["status"], r["compile"]["status"]), ("compile_error", "timeout"), r)
        # Limits the compiler fits in: the program runs, its exit code its own.
        r = self.run_in(self.sbx, {"language": "c", "code": "int main(void) { return 3; }", "compile_timeout": 20,
                                   "compile_memory": "100M"})
        self.assertEqual((r["status"], r["exit_code"], r["compile"]["status"]), ("exit", 3, "ok"), r)
        # The one-shot form takes them too.
        r = self.api.call("POST", "/v1/run", dict(SMALL, language="cpp", code=hello, compile_memory="8M"))
        self.assertEqual((r["status"], r["compile"]["status"]), ("compile_error", "oom"), r)

    def test_compile_limits_without_a_compile_step_or_bad_values_and_a_repl_cwd_are_400(self):
        for body, field in [({"language": "python", "code": "1", "compile_memory": "64M"}, "compile_memory"),
                            ({"language": "bash", "code": "true", "compile_timeout": 5}, "compile_timeout"),
                            ({"argv": ["/bin/true"], "compile_timeout": 5}, "compile_timeout"),
                            ({"language": "c", "code": "int main(){}", "compile_timeout": -1}, "compile_timeout"),
                            ({"language": "c", "code": "int main(){}", "compile_timeout": "5s"}, "compile_timeout"),
                            ({"language": "c", "code": "int main(){}", "compile_memory": 0}, "compile_memory"),
                            ({"language": "c", "code": "int main(){}", "compile_memory": "lots"}, "compile_memory"),
                            ({"language": "python", "code": "1", "repl": True, "cwd": "/tmp"}, "cwd")]:
            with self.subTest(body=body):
                r = assert_error(self, self.api.request("POST", f"/v1/sandboxes/{self.sbx}/exec", body), 400,
                                 "bad_request")
                self.assertIn(f"'{field}'", r["error"]["message"])

    def test_stdin_is_the_programs_input(self):
        r = self.run_in(self.sbx, {"argv": ["tr", "a-z", "A-Z"], "stdin": "hello stdin\n"})
        self.assertEqual(r["stdout"], "HELLO STDIN\n", r)

    def test_env_of_the_exec_and_of_the_sandbox_reach_the_program(self):
        r = self.run_in(self.sbx, {"cmd": 'echo "$FROM_CREATE $OVERRIDDEN $FROM_EXEC"',
                                   "env": {"OVERRIDDEN": "exec", "FROM_EXEC": "e"}})
        self.assertEqual(r["stdout"], "c exec e\n", r)

    def test_cwd_sets_the_working_directory(self):
        self.api.call("PUT", files_path(self.sbx, "sub/dir/x"), raw=b"x")
        r = self.run_in(self.sbx, {"argv": ["pwd"], "cwd": "/workspace/sub/dir"})
        self.assertEqual(r["stdout"], "/workspace/sub/dir\n", r)

    def test_timeout_is_a_result_with_status_timeout(self):
        r = self.run_in(self.sbx, {"argv": ["sleep", "30"], "timeout": 1})
        self.assertEqual((r["status"], r["exit_code"]), ("timeout", -1), r)
        again = self.run_in(self.sbx, {"argv": ["echo", "still here"]})
        self.assertEqual(again["stdout"], "still here\n", "the sandbox did not survive its exec's time-out")

    def test_output_limit_clips_stdout(self):
        r = self.run_in(self.sbx, {"language": "python", "code": "print('x' * 20000)", "output_limit": 1000})
        self.assertTrue(r["stdout_truncated"], r)
        self.assertEqual(r["stdout_bytes"], 20001)
        self.assertLess(len(r["stdout"]), 5000)

    def test_binary_output_within_the_output_limit_arrives_whole(self):
        # 3 MiB of control bytes a stream: 36 MiB of JSON once each is "\u0001" (the session tests go past 64 MiB).
        both = "head -c 3M /dev/zero | tr '\\0' '\\1'; head -c 3M /dev/zero | tr '\\0' '\\2' >&2"
        r = self.run_in(self.sbx, {"cmd": both, "output_limit": 4 << 20, "timeout": 60})
        self.assertEqual(r["status"], "ok", r["reason"])
        self.assertTrue(r["stdout"] == "\x01" * (3 << 20) and r["stderr"] == "\x02" * (3 << 20))

    def test_result_is_the_exec_json_object_with_changed_files(self):
        r = self.run_in(self.sbx, {"cmd": "echo hi > made.txt"})
        for key in ("status", "exit_code", "signal", "reason", "stdout", "stderr", "stdout_bytes", "stderr_bytes",
                    "stdout_truncated", "stderr_truncated", "wall_ms", "cpu_ms", "peak_memory_bytes",
                    "denied_syscalls", "denied_hosts", "changed_files"):
            self.assertIn(key, r)
        self.assertIn({"path": "/workspace/made.txt", "size": 3}, r["changed_files"])

    def test_the_sandboxs_limits_hold_in_its_execs(self):
        r = self.run_in(self.sbx, {"argv": ["true"]})
        self.assertEqual((r["limits"]["memory_max_bytes"], r["limits"]["pids_max"]), (128 << 20, 64), r["limits"])

    def test_an_allow_list_network_reports_the_refused_host(self):
        sbx = self.make(body={"network": {"allow": ["pypi.org"]}})
        self.assertEqual(sbx["network"], {"allow": ["pypi.org"]})
        r = self.run_in(sbx["id"], {"language": "python", "timeout": 20, "code":
                                    "import urllib.request\nurllib.request.urlopen('http://example.com/', timeout=10)"})
        self.assertNotEqual(r["exit_code"], 0, r)
        self.assertIn("example.com", [d["host"] for d in r["denied_hosts"]], r)

    def test_files_and_processes_persist_between_execs(self):
        self.run_in(self.sbx, {"cmd": "echo kept > kept.txt"})
        r = self.run_in(self.sbx, {"cmd": "cat /workspace/kept.txt"})
        self.assertEqual(r["stdout"], "kept\n", r)

    def test_repl_keeps_state_between_two_calls(self):
        first = self.run_in(self.sbx, {"language": "python", "code": "x = 41\nimport math", "repl": True})
        self.assertEqual(first["status"], "ok", first)
        second = self.run_in(self.sbx, {"language": "python", "code": "print(x + 1, math.floor(2.5))", "repl": True})
        self.assertEqual((second["status"], second["stdout"]), ("ok", "42 2\n"), second)
        self.assertIn("repl", second)


class ConcurrentExecs(SharedCase):
    def test_8_execs_at_once_in_one_sandbox_each_get_their_own_output(self):
        sbx = self.make()["id"]
        results, lock = {}, threading.Lock()

        def one(n):
            try:
                r = self.server.api().exec(sbx, {"cmd": f"sleep 0.2; echo exec-{n}; echo err-{n} >&2; exit {n}"})
            except Exception as e:  # noqa: BLE001: reported below
                r = {"error": str(e)}
            with lock:
                results[n] = r

        threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for n in range(8):
            r = results.get(n, {})
            self.assertEqual((r.get("stdout"), r.get("stderr"), r.get("exit_code")),
                             (f"exec-{n}\n", f"err-{n}\n", n), r)


class Streaming(SharedCase):
    PROGRAM = "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done; exit 4"

    def setUp(self):
        super().setUp()
        self.sbx = self.make()["id"]

    def check_stream(self, head, lines):
        self.assertEqual(head.status, 200, repr(head))
        self.assertTrue(head.content_type.startswith("application/x-ndjson"), head.content_type)
        self.assertTrue(lines, "no line in the stream")
        types = [line.get("type") for line in lines]
        self.assertEqual(types.count("result"), 1, f"not exactly one result: {types}")
        self.assertEqual(types[-1], "result", f"the result is not last: {types}")
        self.assertTrue(set(types[:-1]) <= {"stdout", "stderr"}, types)
        out = "".join(line["data"] for line in lines if line["type"] == "stdout")
        err = "".join(line["data"] for line in lines if line["type"] == "stderr")
        return out, err, lines[-1]["result"]

    def test_stream_true_sends_chunks_then_exactly_one_result_last(self):
        head, lines = self.api.stream("POST", f"/v1/sandboxes/{self.sbx}/exec?stream=true", {"cmd": self.PROGRAM})
        out, err, result = self.check_stream(head, lines)
        self.assertEqual((out, err), ("out1\nout2\nout3\n", "err1\nerr2\nerr3\n"))
        self.assertEqual((result["exit_code"], result["status"]), (4, "exit"), result)
        self.assertEqual(result["stdout"], out)

    def test_accept_ndjson_streams_too(self):
        head, lines = self.api.stream("POST", f"/v1/sandboxes/{self.sbx}/exec", {"cmd": self.PROGRAM},
                                      headers={"Accept": "application/x-ndjson"})
        out, _err, result = self.check_stream(head, lines)
        self.assertEqual(out, "out1\nout2\nout3\n")
        self.assertEqual(result["exit_code"], 4)

    def test_stream_false_answers_one_object_whatever_accept_says(self):
        # Before: an Accept of application/x-ndjson streamed even with ?stream=false.
        r = self.api.request("POST", f"/v1/sandboxes/{self.sbx}/exec?stream=false", body={"cmd": self.PROGRAM},
                             headers={"Accept": "application/x-ndjson"})
        self.assertEqual((r.status, r.headers.get("content-type")), (200, "application/json"), r)
        self.assertEqual((r.json()["exit_code"], r.json()["stdout"]), (4, "out1\nout2\nout3\n"))

    def test_a_result_line_larger_than_the_stream_queue_arrives_whole(self):
        # The stream queues at most 1 MiB; a result line repeating 3 MB of output is queued piece by piece.
        head, lines = self.api.stream("POST", f"/v1/sandboxes/{self.sbx}/exec?stream=true",
                                      {"cmd": "head -c 3000000 /dev/zero | tr '\\0' q", "output_limit": 4 << 20})
        out, _err, result = self.check_stream(head, lines)
        self.assertEqual(out, "q" * 3000000)
        self.assertEqual((result["status"], result["stdout"]), ("ok", out))

    def test_a_streamed_timeout_ends_with_a_timeout_result(self):
        head, lines = self.api.stream("POST", f"/v1/sandboxes/{self.sbx}/exec?stream=true",
                                      {"cmd": "echo before; sleep 30", "timeout": 1})
        out, _err, result = self.check_stream(head, lines)
        self.assertEqual((out, result["status"]), ("before\n", "timeout"))


class Files(SharedCase):
    def setUp(self):
        super().setUp()
        self.sbx = self.make()["id"]

    def put(self, path, data, expect=200):
        return self.api.call("PUT", files_path(self.sbx, path), raw=data, expect=expect)

    def test_binary_bytes_round_trip_and_parents_are_created(self):
        data = bytes(range(256)) * 64 + b"\0\r\n\xff\xfe"
        written = self.put("a/b/c.bin", data)
        self.assertEqual(written, {"path": "/workspace/a/b/c.bin", "size": len(data)})
        r = self.api.request("GET", files_path(self.sbx, "a/b/c.bin"))
        self.assertEqual(r.status, 200, repr(r))
        self.assertTrue(r.content_type.startswith("application/octet-stream"), r.content_type)
        self.assertEqual(r.body, data)
        inside = self.run_in(self.sbx, {"argv": ["sha256sum", "/workspace/a/b/c.bin"]})
        self.assertEqual(inside["stdout"].split()[0], hashlib.sha256(data).hexdigest())

    def test_an_absolute_path_under_workspace_and_an_empty_file(self):
        self.assertEqual(self.put("/workspace/empty", b""), {"path": "/workspace/empty", "size": 0})
        r = self.api.request("GET", files_path(self.sbx, "empty"))
        self.assertEqual((r.status, r.body), (200, b""))

    def test_a_file_written_by_an_exec_is_read(self):
        self.run_in(self.sbx, {"cmd": "printf 'from exec' > out.txt"})
        self.assertEqual(self.api.request("GET", files_path(self.sbx, "out.txt")).body, b"from exec")

    def test_list_gives_name_path_type_and_size(self):
        self.put("d/f.txt", b"12345")
        self.put("d/sub/g", b"g")
        self.run_in(self.sbx, {"cmd": "ln -s f.txt /workspace/d/link"})
        listing = self.api.call("GET", files_path(self.sbx, "d", list="true"))
        entries = {e["name"]: e for e in listing["entries"]}
        self.assertEqual(set(entries), {"f.txt", "sub", "link"})
        self.assertEqual(entries["f.txt"], {"name": "f.txt", "path": "/workspace/d/f.txt", "type": "file", "size": 5})
        self.assertEqual(entries["sub"]["type"], "dir")
        self.assertEqual(entries["link"]["type"], "symlink")

    def test_delete_removes_a_file_and_a_directory_recursively(self):
        self.put("gone.txt", b"x")
        self.put("tree/a/b", b"y")
        r = self.api.request("DELETE", files_path(self.sbx, "gone.txt"))
        self.assertEqual(r.status, 204, repr(r))
        assert_error(self, self.api.request("GET", files_path(self.sbx, "gone.txt")), 404, "not_found")
        self.assertEqual(self.api.request("DELETE", files_path(self.sbx, "tree")).status, 204)
        inside = self.run_in(self.sbx, {"cmd": "ls -A /workspace"})
        self.assertNotIn("tree", inside["stdout"].split())

    def test_the_workspace_root_is_listed_with_path_dot(self):
        self.put("top.txt", b"t")
        names = [e["name"] for e in self.api.call("GET", files_path(self.sbx, ".", list="true"))["entries"]]
        self.assertIn("top.txt", names)

    def test_a_fifo_is_not_read_and_a_write_replaces_it(self):
        self.run_in(self.sbx, {"cmd": "mkfifo /workspace/fifo"})
        assert_error(self, self.api.request("GET", files_path(self.sbx, "fifo")), 400, "bad_request")
        self.assertEqual(self.put("fifo", b"now a file"), {"path": "/workspace/fifo", "size": 10})
        self.assertEqual(self.run_in(self.sbx, {"cmd": "test -f fifo && cat fifo"})["stdout"], "now a file")

    def test_a_chunked_upload_is_written_whole(self):
        conn = self.api.connection()
        self.addCleanup(conn.close)
        conn.putrequest("PUT", files_path(self.sbx, "chunked.bin"))
        conn.putheader("Transfer-Encoding", "chunked")
        conn.putheader("Content-Type", "application/octet-stream")
        conn.endheaders()
        parts = [b"\0\xff" * 5000, b"middle", bytes(range(256))]
        for part in parts:
            conn.send(b"%x\r\n%s\r\n" % (len(part), part))
        conn.send(b"0\r\n\r\n")
        r = conn.getresponse()
        self.assertEqual((r.status, json.loads(r.read())), (200, {"path": "/workspace/chunked.bin",
                                                                  "size": sum(map(len, parts))}))
        self.assertEqual(self.api.request("GET", files_path(self.sbx, "chunked.bin")).body, b"".join(parts))

    def test_a_missing_file_is_404(self):
        assert_error(self, self.api.request("GET", files_path(self.sbx, "no/such/file")), 404, "not_found")

    def test_a_listing_of_a_huge_directory_is_cut_and_says_truncated(self):
        # The sandbox's code can make millions of empty files; the server lists them outside its limits.
        self.run_in(self.sbx, {"language": "python", "code":
                               "import os\nos.mkdir('/workspace/many')\n"
                               "for i in range(20005): open('/workspace/many/%06d' % i, 'w').close()"})
        listing = self.api.call("GET", files_path(self.sbx, "many", list="true"))
        self.assertTrue(listing.get("truncated"))
        self.assertEqual(len(listing["entries"]), 20000)
        # Names of control bytes are six times their length as JSON: the answer is capped at 8 MiB as sent.
        self.run_in(self.sbx, {"language": "python", "code":
                               "import os\nos.mkdir('/workspace/wide')\n"
                               "for i in range(4000): open('/workspace/wide/' + '\\x01' * 240 + '%06d' % i, 'w').close()"})
        r = self.api.request("GET", files_path(self.sbx, "wide", list="true"))
        self.assertEqual(r.status, 200, repr(r))
        self.assertLessEqual(len(r.body), (8 << 20) + 64)
        listing = json.loads(r.body)
        self.assertTrue(listing.get("truncated"))
        self.assertLess(len(listing["entries"]), 4000)
        small = self.api.call("GET", files_path(self.sbx, ".", list="true"))
        self.assertNotIn("truncated", small)

    def test_a_name_that_is_not_utf8_comes_with_its_bytes_percent_encoded(self):
        r = self.run_in(self.sbx, {"cmd": "printf data > \"$(printf 'x\\377y')\""})
        self.assertEqual(r["changed_files"], [{"path": "/workspace/x\ufffdy", "path_encoded": "/workspace/x%FFy",
                                               "size": 4}])
        listing = self.api.call("GET", files_path(self.sbx, ".", list="true"))["entries"]
        entry = [e for e in listing if e["name"].startswith("x")]
        self.assertEqual(entry, [{"name": "x\ufffdy", "path": "/workspace/x\ufffdy", "path_encoded": "/workspace/x%FFy",
                                  "type": "file", "size": 4}])
        # The encoded path goes back as ?path= as it is.
        r = self.api.request("GET", "/v1/sandboxes/%s/files?path=%s" % (self.sbx, entry[0]["path_encoded"]))
        self.assertEqual((r.status, r.body), (200, b"data"))
        self.put("plain-é.txt", b"p")
        plain = [e for e in self.api.call("GET", files_path(self.sbx, ".", list="true"))["entries"]
                 if e["name"] == "plain-é.txt"]
        self.assertEqual(len(plain), 1)
        self.assertNotIn("path_encoded", plain[0])

    def test_a_directory_the_sandbox_locked_is_400_not_a_server_failure(self):
        self.run_in(self.sbx, {"cmd": "mkdir /workspace/locked && chmod 000 /workspace/locked"})
        body = assert_error(self, self.api.request("PUT", files_path(self.sbx, "locked/x"), raw=b"x"), 400,
                            "bad_request")
        self.assertIn("EACCES", body["error"]["message"], body)

    def test_a_path_the_server_writes_is_one_it_can_remove(self):
        deep = "a/" * 256 + "f"
        assert_error(self, self.api.request("PUT", files_path(self.sbx, deep), raw=b"x"), 400, "bad_request")
        self.assertEqual(self.put("a/" * 255 + "f", b"x")["size"], 1)
        self.assertEqual(self.api.request("DELETE", files_path(self.sbx, "a")).status, 204)


class BadInput(SharedCase):
    def test_an_unknown_sandbox_is_404_on_every_route(self):
        for method, path, kw in [("GET", f"/v1/sandboxes/{UNKNOWN_ID}", {}),
                                 ("DELETE", f"/v1/sandboxes/{UNKNOWN_ID}", {}),
                                 ("POST", f"/v1/sandboxes/{UNKNOWN_ID}/exec", {"body": {"cmd": "true"}}),
                                 ("PUT", files_path(UNKNOWN_ID, "x"), {"raw": b"x"}),
                                 ("GET", files_path(UNKNOWN_ID, "x"), {}),
                                 ("GET", files_path(UNKNOWN_ID, ".", list="true"), {}),
                                 ("DELETE", files_path(UNKNOWN_ID, "x"), {})]:
            with self.subTest(route=f"{method} {path}"):
                assert_error(self, self.api.request(method, path, **kw), 404, "not_found")

    def test_a_malformed_sandbox_id_is_404(self):
        for bad in ("not-an-id", "..", "sb-..%2F..%2Fetc", "sb-" + "A" * 24, "sb-" + "0" * 25):
            with self.subTest(id=bad):
                assert_error(self, self.api.request("GET", f"/v1/sandboxes/{bad}"), 404, "not_found")

    def test_files_without_a_path_is_400(self):
        sbx = self.make()["id"]
        for method in ("GET", "PUT", "DELETE"):
            with self.subTest(method=method):
                r = self.api.request(method, f"/v1/sandboxes/{sbx}/files", raw=b"x" if method == "PUT" else None)
                assert_error(self, r, 400, "bad_request")
                r = self.api.request(method, files_path(sbx, ""), raw=b"x" if method == "PUT" else None)
                assert_error(self, r, 400, "bad_request")
        # The workspace itself is a directory: the message names it (it quoted an empty path).
        r = self.api.request("PUT", files_path(sbx, "/workspace"), raw=b"x")
        self.assertIn("'/workspace/' names a directory", assert_error(self, r, 400, "bad_request")["error"]["message"])

    def test_a_query_parameter_the_route_does_not_take_or_a_flag_neither_true_nor_false_is_400(self):
        # Before: both were ignored, so `?strem=true` answered without a stream and `?list=yes` read the directory.
        sbx = self.make()["id"]
        cases = [("POST", f"/v1/sandboxes/{sbx}/exec?strem=true", {"cmd": "true"}, "'strem'"),
                 ("POST", "/v1/run?stream=yes", {"cmd": "true"}, "'stream' is 'yes'"),
                 ("GET", files_path(sbx, "a.txt") + "&list=yes", None, "'list' is 'yes'"),
                 ("GET", files_path(sbx, "a.txt") + "&limit=10", None, "'limit'"),
                 ("GET", f"/v1/sandboxes/{sbx}?verbose=1", None, "takes none"),
                 ("GET", "/v1/capacity?x=1", None, "'x'"),
                 # Given twice, in either order: the server would take one and a proxy or a log might read the other.
                 ("GET", files_path(sbx, "../x") + "&path=ok.txt", None, "the query parameter 'path' twice"),
                 ("GET", files_path(sbx, "ok.txt") + "&path=../x", None, "the query parameter 'path' twice"),
                 ("POST", f"/v1/sandboxes/{sbx}/exec?stream=true&stream=false", {"cmd": "true"}, "'stream' twice")]
        for method, path, body, said in cases:
            with self.subTest(path=path):
                r = self.api.request(method, path, body=body)
                self.assertIn(said, assert_error(self, r, 400, "bad_request")["error"]["message"])
        # The route's own, as true or false; the probes take any (a load balancer's cache-buster).
        r = self.api.request("POST", f"/v1/sandboxes/{sbx}/exec?stream=false", body={"cmd": "echo hi"})
        self.assertEqual((r.status, r.json()["stdout"]), (200, "hi\n"), r)
        self.assertEqual(self.api.request("GET", files_path(sbx, ".") + "&list=1").status, 200)
        self.assertEqual(self.api.request("GET", "/v1/healthz?ts=123").status, 200)

    def test_an_unknown_route_is_404(self):
        assert_error(self, self.api.request("GET", "/v1/nothing-here"), 404, "not_found")
        assert_error(self, self.api.request("GET", "/v2/healthz"), 404, "not_found")

    def test_a_method_a_route_does_not_take_is_405_with_allow(self):
        sbx = self.make()["id"]
        for method, path, allow in (("PUT", "/v1/sandboxes", "GET, HEAD, POST"),
                                    ("POST", f"/v1/sandboxes/{sbx}", "GET, HEAD, DELETE"),
                                    ("GET", f"/v1/sandboxes/{sbx}/exec", "POST"),
                                    ("POST", files_path(sbx, "a.txt"), "GET, HEAD, PUT, DELETE"),
                                    ("DELETE", "/v1/run", "POST"),
                                    ("POST", "/v1/capacity", "GET, HEAD"),
                                    # By the path's shape: an unknown (or another client's) sandbox is not told apart.
                                    ("PATCH", "/v1/sandboxes/sbx-not-there", "GET, HEAD, DELETE"),
                                    ("OPTIONS", "/v1/healthz", "GET, HEAD")):
            with self.subTest(method=method, path=path):
                r = self.api.request(method, path)
                message = assert_error(self, r, 405, "method_not_allowed")["error"]["message"]
                self.assertEqual(r.headers.get("allow"), allow, r)
                self.assertIn(method, message)
        # The refused POST did nothing to the sandbox.
        self.assertEqual(self.api.request("GET", f"/v1/sandboxes/{sbx}").status, 200)

    def test_every_get_route_answers_head_without_a_body(self):
        sbx = self.make()["id"]
        self.assertEqual(self.api.request("PUT", files_path(sbx, "h.txt"), raw=b"twelve bytes").status, 200)
        for path in ("/v1/healthz", "/v1/sandboxes", f"/v1/sandboxes/{sbx}", files_path(sbx, "h.txt"),
                     "/v1/capacity"):
            with self.subTest(path=path):
                got = self.api.request("GET", path)
                head = self.api.request("HEAD", path)
                self.assertEqual((head.status, head.body), (200, b""), head)
                self.assertEqual(head.headers.get("content-type"), got.headers.get("content-type"))
                if path.endswith("h.txt"):
                    self.assertEqual(head.headers.get("content-length"), "12", head)
        assert_error(self, self.api.request("GET", files_path(sbx, "missing.txt")), 404, "not_found")
        self.assertEqual(self.api.request("HEAD", files_path(sbx, "missing.txt")).status, 404)

    def test_malformed_json_is_400(self):
        sbx = self.make()["id"]
        for path in ("/v1/sandboxes", f"/v1/sandboxes/{sbx}/exec", "/v1/run"):
            with self.subTest(path=path):
                r = self.api.request("POST", path, raw=b'{"cmd": "tr', headers={"Content-Type": "application/json"})
                message = assert_error(self, r, 400, "bad_request")["error"]["message"]
                # The parser's words, without nlohmann's "[json.exception.parse_error.101]" in front.
                self.assertTrue(message.startswith("malformed JSON: parse error at line 1, column "), message)
                r = self.api.request("POST", path, raw=b"[1, 2]", headers={"Content-Type": "application/json"})
                self.assertIn("must be a JSON object", assert_error(self, r, 400, "bad_request")["error"]["message"])
                # 100000 levels in 200 KB: refused as it is read, before any code copies it.
                deep = b'{"labels": {"x": ' + b"[" * 100000 + b"]" * 100000 + b"}}"
                r = self.api.request("POST", path, raw=deep, headers={"Content-Type": "application/json"})
                self.assertIn("nests deeper than", assert_error(self, r, 400, "bad_request")["error"]["message"])
                # Two values for one key: a proxy that read the first would see another request than the server ran.
                twice = b'{"cmd": "true", "timeout": 5, "limits": {"pids": 8, "pids": 4096}, "timeout": 3600}'
                r = self.api.request("POST", path, raw=twice, headers={"Content-Type": "application/json"})
                self.assertIn('the key "pids" twice', assert_error(self, r, 400, "bad_request")["error"]["message"])
                # A NUL byte would end nlohmann's parse there: what follows it would go unread.
                nul = b'{"cmd": "echo ran"}\x00{garbage'
                r = self.api.request("POST", path, raw=nul, headers={"Content-Type": "application/json"})
                self.assertIn("a NUL byte (at byte 20)", assert_error(self, r, 400, "bad_request")["error"]["message"])

    def test_an_ambiguous_body_length_is_400_and_the_connection_closes(self):
        # libmicrohttpd frames by the first Content-Length and ignores a second: a proxy that took the other would see
        # the pipelined request below as part of the body (request smuggling). Such a request is refused, and nothing
        # after it on the connection is read.
        smuggled = b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        for framing in (b"Content-Length: 16\r\nContent-Length: 72\r\n",
                        b"Content-Length: 16\r\nTransfer-Encoding: chunked\r\n"):
            with self.subTest(framing=framing), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(self.server.socket_path)
                s.settimeout(10)
                s.sendall(b"POST /v1/run HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n" + b'{"cmd":"echo 1"}' + smuggled)
                answer = b""
                while chunk := s.recv(65536):
                    answer += chunk
                self.assertTrue(answer.startswith(b"HTTP/1.1 400 "), answer[:200])
                self.assertEqual(answer.count(b"HTTP/1.1 "), 1, answer)
                self.assertIn(b"the request has ", answer)
        # The same length twice is no ambiguity.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.server.socket_path)
            s.settimeout(30)
            s.sendall(b"POST /v1/run HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 16\r\n"
                      b"Content-Length: 16\r\n\r\n" + b'{"cmd":"echo 1"}')
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer[:200])

    def test_an_unknown_field_is_400(self):
        sbx = self.make()["id"]
        for path, body in [("/v1/sandboxes", {"templat": "host"}), ("/v1/sandboxes", {"limits": {"memroy": "1G"}}),
                           (f"/v1/sandboxes/{sbx}/exec", {"cmd": "true", "timeuot": 5}),
                           ("/v1/run", {"cmd": "true", "bogus": 1})]:
            with self.subTest(path=path, body=body):
                body_ = assert_error(self, self.api.request("POST", path, body), 400, "bad_request")
                unknown = [k for k in ("templat", "memroy", "timeuot", "bogus") if k in json.dumps(body)][0]
                self.assertIn(unknown, body_["error"]["message"], "the message does not name the field")

    def test_a_wrong_type_is_400(self):
        sbx = self.make()["id"]
        for path, body in [(f"/v1/sandboxes/{sbx}/exec", {"argv": "echo hi"}),
                           (f"/v1/sandboxes/{sbx}/exec", {"cmd": "true", "timeout": "soon"}),
                           (f"/v1/sandboxes/{sbx}/exec", {"cmd": "true", "env": {"A": 1}}),
                           ("/v1/sandboxes", {"network": 5}),
                           ("/v1/sandboxes", {"limits": {"pids": "many"}})]:
            with self.subTest(path=path, body=body):
                assert_error(self, self.api.request("POST", path, body), 400, "bad_request")

    def test_limits_and_hosts_the_engine_refuses_are_400_naming_the_field(self):
        for body, words in [({"limits": {"memory": 1}}, "memory limit must be at least 4M"),
                            ({"limits": {"memory": "1K"}}, "memory limit must be at least 4M"),
                            ({"limits": {"memory": 18446744073709551615}}, "too large"),
                            ({"limits": {"tmpfs": 0}}, "tmpfs size must be at least 4K"),
                            ({"limits": {"pids": 1}}, "pids limit must be at least 2"),
                            ({"limits": {"cpus": 0.001}}, "from 0.01 to 1024"),
                            ({"network": {"allow": ["*"]}}, "bare wildcard"),
                            ({"network": {"allow": ["127.0.0.1"]}}, "IP addresses are not accepted")]:
            with self.subTest(body=body):
                r = assert_error(self, self.api.request("POST", "/v1/sandboxes", body), 400, "bad_request")
                message = r["error"]["message"]
                self.assertIn(words, message)
                self.assertIn("'limits" if "limits" in body else "'network.allow'", message)
                self.assertNotIn("--", message, "the message names a command-line flag, not the API's field")

    def test_a_streamed_exec_that_is_a_bad_request_answers_400_before_any_stream(self):
        sbx = self.make()["id"]
        for path, body in [(f"/v1/sandboxes/{sbx}/exec?stream=true", {"language": "cobol", "code": "x"}),
                           (f"/v1/sandboxes/{sbx}/exec?stream=true",
                            {"language": "python", "code": "1", "compile_timeout": 5}),
                           ("/v1/run?stream=true", dict(SMALL, language="cobol", code="x"))]:
            with self.subTest(path=path, body=body):
                head, lines = self.api.stream("POST", path, body)
                self.assertEqual((head.status, lines), (400, []), head.body)
                self.assertEqual(json.loads(head.body)["error"]["code"], "bad_request")
        self.assertEqual(len(self.api.call("GET", "/v1/sandboxes")["sandboxes"]), 1, "/v1/run left its sandbox")

    def test_exec_needs_exactly_one_program(self):
        sbx = self.make()["id"]
        for body in [{}, {"argv": ["true"], "cmd": "true"}, {"argv": []}, {"language": "python"},
                     {"language": "", "code": "print(1)"},
                     {"code": "print(1)"}, {"cmd": "true", "language": "python", "code": "1"}]:
            with self.subTest(body=body):
                assert_error(self, self.api.request("POST", f"/v1/sandboxes/{sbx}/exec", body), 400, "bad_request")

    def test_a_huge_body_is_413_and_the_server_goes_on(self):
        sbx = self.make()["id"]
        big = "x" * (2 * MAX_BODY)
        assert_error(self, self.api.request("POST", "/v1/sandboxes", {"labels": {"big": big}}), 413,
                     "payload_too_large")
        assert_error(self, self.api.request("POST", f"/v1/sandboxes/{sbx}/exec", {"cmd": "true", "stdin": big}),
                     413, "payload_too_large")
        assert_error(self, self.api.request("PUT", files_path(sbx, "big.bin"), raw=big.encode()), 413,
                     "payload_too_large")
        assert_error(self, self.api.request("GET", files_path(sbx, "big.bin")), 404, "not_found")
        self.assertEqual(self.api.request("GET", "/v1/healthz").status, 200)
        self.assertEqual(self.run_in(sbx, {"argv": ["echo", "ok"]})["stdout"], "ok\n")

    def test_path_traversal_and_absolute_escapes_are_400(self):
        sbx = self.make()["id"]
        canary_dir = tempfile.mkdtemp(prefix="nsbox-serve-canary.")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", canary_dir]))
        canary = os.path.join(canary_dir, "keep")
        open(canary, "w").write("keep")
        for path in ("../x", "a/../../x", "/etc/passwd", "/workspace/../etc/passwd", "/workspacex/y", canary):
            with self.subTest(path=path, op="GET"):
                assert_error(self, self.api.request("GET", files_path(sbx, path)), 400, "bad_request")
            with self.subTest(path=path, op="list"):
                assert_error(self, self.api.request("GET", files_path(sbx, path, list="true")), 400, "bad_request")
        for path in ("../x", "a/../../x", os.path.join(canary_dir, "new")):
            with self.subTest(path=path, op="PUT"):
                assert_error(self, self.api.request("PUT", files_path(sbx, path), raw=b"x"), 400, "bad_request")
        for path in ("../x", canary):
            with self.subTest(path=path, op="DELETE"):
                assert_error(self, self.api.request("DELETE", files_path(sbx, path)), 400, "bad_request")
        self.assertEqual(sorted(os.listdir(canary_dir)), ["keep"], "a host file was written or removed")

    def test_a_nul_byte_or_an_overlong_name_in_the_path_is_400_and_writes_nothing(self):
        sbx = self.make()["id"]
        for path in ("a\0b", "x" * 256, "d/" + "y" * 300, "/".join(["d"] * 2100)):
            with self.subTest(path=path[:20]):
                r = assert_error(self, self.api.request("PUT", files_path(sbx, path), raw=b"x"), 400, "bad_request")
                self.assertEqual(len(r["error"]["message"].splitlines()), 1)
        self.assertEqual(self.run_in(sbx, {"cmd": "ls -A /workspace"})["stdout"], "", "a file was written")

    def test_a_symlink_out_of_the_workspace_is_400(self):
        sbx = self.make()["id"]
        canary_dir = tempfile.mkdtemp(prefix="nsbox-serve-canary.")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", canary_dir]))
        open(os.path.join(canary_dir, "keep"), "w").write("keep")
        made = self.run_in(sbx, {"cmd": f"ln -s /etc /workspace/l && ln -s /etc/passwd /workspace/p && "
                                        f"ln -s {canary_dir} /workspace/c && ln -s .. /workspace/up"})
        self.assertEqual(made["exit_code"], 0, made)
        for method, path, kw in [("GET", files_path(sbx, "l/passwd"), {}), ("GET", files_path(sbx, "p"), {}),
                                 ("GET", files_path(sbx, "l", list="true"), {}),
                                 ("GET", files_path(sbx, "up/etc/passwd"), {}),
                                 ("GET", files_path(sbx, "c/keep"), {}),
                                 ("PUT", files_path(sbx, "c/new"), {"raw": b"x"}),
                                 ("PUT", files_path(sbx, "l/nsbox-serve-test"), {"raw": b"x"}),
                                 ("DELETE", files_path(sbx, "c/keep"), {})]:
            with self.subTest(route=f"{method} {path}"):
                assert_error(self, self.api.request(method, path, **kw), 400, "bad_request")
        self.assertEqual(sorted(os.listdir(canary_dir)), ["keep"], "a host file was written or removed")
        self.assertFalse(os.path.exists("/etc/nsbox-serve-test"))


class Auth(SharedCase):
    def test_tcp_without_a_token_is_401(self):
        anon = Api(port=self.server.port)
        for method, path, body in [("GET", "/v1/sandboxes", None), ("POST", "/v1/sandboxes", {}),
                                   ("GET", "/v1/capacity", None)]:
            with self.subTest(route=f"{method} {path}"):
                r = anon.request(method, path, body)
                assert_error(self, r, 401, "unauthorized")
                self.assertEqual(r.headers.get("www-authenticate"), "Bearer", r)  # RFC 9110 11.6.1

    def test_tcp_with_a_wrong_token_is_401(self):
        for token in ("wrong", TOKENS["alice"] + "x", TOKENS["alice"][:-1], "alice"):
            with self.subTest(token=token):
                r = Api(port=self.server.port, token=token).request("POST", "/v1/sandboxes", {})
                assert_error(self, r, 401, "unauthorized")
        r = Api(port=self.server.port).request("GET", "/v1/sandboxes", headers={"Authorization": "Basic YTpi"})
        assert_error(self, r, 401, "unauthorized")
        self.assertEqual(self.alice.call("GET", "/v1/sandboxes")["sandboxes"], [], "a refused create made a sandbox")

    def test_tcp_with_a_good_token_creates_and_runs(self):
        sbx = self.make(api=self.alice)["id"]
        r = self.alice.exec(sbx, {"cmd": "echo over tcp"})
        self.assertEqual(r["stdout"], "over tcp\n")
        # The scheme's name is case-insensitive (RFC 9110); the token is not.
        lower = Api(port=self.server.port).request("GET", f"/v1/sandboxes/{sbx}",
                                                   headers={"Authorization": "bearer " + TOKENS["alice"]})
        self.assertEqual(lower.status, 200, lower)

    def raw_exchange(self, head, wait_s=30):
        """Sends `head` (a request's head, no body) over TCP and returns what comes back within wait_s."""
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=wait_s) as s:
            s.sendall(head)
            answer = b""
            try:
                while b"\r\n\r\n" not in answer:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
            except socket.timeout:
                pass
            return answer

    def test_a_client_without_a_token_is_refused_before_its_body_is_read(self):
        # A declared 16 MB body that never comes: the 401 is the answer at once, no buffer is held for it.
        for auth in (b"", b"Authorization: Bearer wrong\r\n"):
            with self.subTest(auth=auth):
                answer = self.raw_exchange(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth +
                                           b"Content-Type: application/json\r\nContent-Length: 16000000\r\n\r\n{")
                self.assertTrue(answer.startswith(b"HTTP/1.1 401"), answer[:200])
        # A token holder's declared body is waited for (no answer before it is sent).
        answer = self.raw_exchange(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                   TOKENS["alice"].encode() + b"\r\nContent-Length: 100\r\n\r\n{", wait_s=1)
        self.assertEqual(answer, b"")

    def test_a_probe_with_a_body_is_400_at_once_and_holds_no_body(self):
        # The probes need no token: a body sent to one was read and counted against the cap every client's bodies
        # share, so that 17 connections without a token made every upload and exec 503.
        for framing in (b"Content-Length: 16000000\r\n", b"Transfer-Encoding: chunked\r\n"):
            with self.subTest(framing=framing):
                answer = self.raw_exchange(b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\nabc")
                self.assertTrue(answer.startswith(b"HTTP/1.1 400"), answer[:200])
        answer = self.raw_exchange(b"GET /v1/readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        self.assertTrue(answer.startswith(b"HTTP/1.1 200"), answer[:200])

    def test_a_transfer_coding_but_chunked_or_two_authorization_headers_are_400_at_once(self):
        # libmicrohttpd knows no coding but chunked: a body framed by another was waited for until the client closed,
        # with no answer. Of two Authorization headers the last one was served; a proxy may have checked the first.
        alice, bob = (b"Authorization: Bearer " + TOKENS[name].encode() + b"\r\n" for name in ("alice", "bob"))
        cases = [(alice + b"Transfer-Encoding: gzip\r\n", b"Transfer-Encoding other than chunked"),
                 (alice + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", b"one Transfer-Encoding"),
                 (alice + bob, b"more than one Authorization header")]
        def exchange(request):
            with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as s:
                s.sendall(request)
                answer = b""
                while chunk := s.recv(65536):  # the refusal closes the connection
                    answer += chunk
                return answer

        for headers, why in cases:
            with self.subTest(headers=headers):
                answer = exchange(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
                self.assertTrue(answer.startswith(b"HTTP/1.1 400"), answer[:200])
                self.assertIn(why, answer)
        # The coding's name is case-insensitive.
        answer = exchange(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + alice +
                          b"Transfer-Encoding: Chunked\r\n\r\n0\r\n\r\n")
        self.assertTrue(answer.startswith(b"HTTP/1.1 200"), answer[:200])

    def test_an_encoded_slash_does_not_split_a_path_segment(self):
        sbx = self.make(api=self.alice)["id"]
        for path in (f"/v1/sandboxes/{sbx}%2Fexec", f"/v1/sandboxes/{sbx}%2fexec"):
            with self.subTest(path=path):
                # One segment: the path of a sandbox (whose id has a slash), which takes no POST and does not exist.
                r = self.alice.request("POST", path, {"cmd": "echo ran"})
                assert_error(self, r, 405, "method_not_allowed")
                self.assertEqual(r.headers.get("allow"), "GET, HEAD, DELETE", r)
                assert_error(self, self.alice.request("GET", path), 404, "not_found")
        # Other escapes in a segment are decoded as before.
        r = self.alice.request("GET", f"/v1/sandboxes/{sbx[:3]}%{ord(sbx[3]):02X}{sbx[4:]}")
        self.assertEqual(r.status, 200, r)

    def test_a_percent_sign_that_starts_no_escape_is_a_bad_request(self):
        sbx = self.make(api=self.alice)["id"]
        self.assertEqual(self.alice.request("PUT", f"/v1/sandboxes/{sbx}/files?path=%25zz", raw=b"x").status, 200)
        for path in (f"/v1/sandboxes/{sbx}/files?path=%zz", f"/v1/sandboxes/{sbx}/files?path=a%2",
                     f"/v1/sandboxes/{sbx}%/files?path=a"):
            with self.subTest(path=path):
                r = self.alice.request("GET", path)
                self.assertEqual((r.status, r.json()["error"]["code"]), (400, "bad_request"), r)
                self.assertIn("two hex digits", r.json()["error"]["message"])
        r = self.alice.request("GET", f"/v1/sandboxes/{sbx}/files?path=%25zz")
        self.assertEqual((r.status, r.body), (200, b"x"), r)

    def test_a_path_cannot_write_a_line_of_its_own_into_the_log(self):
        forged = "nsbox serve: ending sb-forged (token:bob): the sandbox's idle_timeout passed"
        r = Api(port=self.server.port).request("GET", "/v1/x%0A" + forged.replace(" ", "%20"))
        self.assertEqual(r.status, 401, r)
        with open(self.server.log_path, errors="replace") as f:
            lines = f.read().splitlines()
        self.assertFalse([line for line in lines if line.startswith("nsbox serve: ending sb-forged")], lines[-5:])
        self.assertTrue([line for line in lines if "/v1/x\\x0ansbox serve: ending" in line], lines[-5:])

    def test_a_socket_peer_with_another_uid_is_403(self):
        os.chmod(self.server.socket_path, 0o666)  # the uid check, not the file mode, must refuse
        answers = as_uid(OTHER_UID, self.server.socket_path,
                         [("GET", "/v1/sandboxes", None), ("POST", "/v1/sandboxes", {}), ("GET", "/v1/capacity", None)])
        self.assertEqual(len(answers), 3, answers)
        for status, body in answers:
            self.assertEqual(status, 403, f"uid {OTHER_UID}: {status} {body[:200]}")
            self.assertEqual(json.loads(body)["error"]["code"], "forbidden")

    def test_an_allowed_uid_is_served_as_a_client_of_its_own(self):
        os.chmod(self.server.socket_path, 0o666)
        mine = self.make()["id"]
        answers = as_uid(ALLOWED_UID, self.server.socket_path,
                         [("GET", "/v1/sandboxes", None), ("GET", f"/v1/sandboxes/{mine}", None)])
        self.assertEqual(answers[0][0], 200, answers)
        self.assertNotIn(mine, answers[0][1], "uid 65533 sees root's sandbox in its list")
        self.assertEqual(answers[1][0], 404, answers)


class Isolation(SharedCase):
    def test_a_sandbox_of_one_token_is_404_for_another(self):
        sbx = self.make(api=self.alice)["id"]
        for method, path, kw in [("GET", f"/v1/sandboxes/{sbx}", {}),
                                 ("POST", f"/v1/sandboxes/{sbx}/exec", {"body": {"cmd": "true"}}),
                                 ("PUT", files_path(sbx, "x"), {"raw": b"x"}),
                                 ("GET", files_path(sbx, ".", list="true"), {}),
                                 ("DELETE", files_path(sbx, "x"), {}),
                                 ("DELETE", f"/v1/sandboxes/{sbx}", {})]:
            for who, api in (("bob", self.bob), ("the socket's uid", self.api)):
                with self.subTest(who=who, route=f"{method} {path}"):
                    assert_error(self, api.request(method, path, **kw), 404, "not_found")
        self.assertNotIn(sbx, [s["id"] for s in self.bob.call("GET", "/v1/sandboxes")["sandboxes"]])
        self.assertEqual(self.alice.call("GET", f"/v1/sandboxes/{sbx}")["state"], "running")
        self.assertEqual(self.alice.exec(sbx, {"cmd": "ls /workspace"})["stdout"], "", "bob's PUT reached it")


    def test_a_client_holds_at_most_its_share_of_the_answer_room(self):
        # The answer room (--max-held-answers 512M) was first come, first served: one client's exec with a large
        # output_limit reserved it all and every other client's execs and file reads were 503 meanwhile. Each client
        # holds at most its share (40 of 64 sandboxes here: 320 MiB); 20M of output_limit reserves 249 MiB.
        sbx_a, sbx_b = self.make(api=self.alice)["id"], self.make(api=self.bob)["id"]
        too_big = self.alice.request("POST", f"/v1/sandboxes/{sbx_a}/exec?stream=true",
                                     body={"cmd": "true", "output_limit": 30 << 20})
        self.assertIn("share of --max-held-answers",
                      assert_error(self, too_big, 400, "bad_request")["error"]["message"])
        answers, order, lock = {}, [], threading.Lock()  # order: the answers' names and "released", as they came

        def run(name, api, sandbox_id, cmd):
            r = api.request("POST", f"/v1/sandboxes/{sandbox_id}/exec",
                            body={"cmd": cmd, "output_limit": 20 << 20, "timeout": 30})
            with lock:
                order.append(name)
                answers[name] = (r.status, json.loads(r.body).get("stdout"))

        gate = "go-" + secrets.token_hex(6)
        held = gated(gate, "echo first")
        first = threading.Thread(target=run, args=("first", self.alice, sbx_a, held))
        first.start()
        second = threading.Thread(target=run, args=("second", self.alice, sbx_a, "echo second"))
        try:
            # Its program runs, so its room is reserved (that comes before the program); it ends only once released.
            self.assertTrue(wait_for(lambda: host_processes_with_argv(["/bin/sh", "-c", held]), 20),
                            "alice's first exec did not start")
            second.start()
            run("bob", self.bob, sbx_b, "echo bob")
            self.assertEqual(answers["bob"], (200, "bob\n"),
                             f"another client's exec waited for alice's room: {answers}")
            self.assertNotIn("first", order, "alice's first exec ended before it was released")
            # A moment for a second run beside the first to show its answer (a waiting one waits up to 10 s).
            wait_for(lambda: "second" in answers, 3)
        finally:
            with lock:
                order.append("released")
            self.alice.call("PUT", files_path(sbx_a, gate), raw=b"")
            first.join(30)
            if second.ident is not None:  # started
                second.join(30)
        self.assertEqual(answers.get("first"), (200, "first\n"), answers)
        self.assertEqual(answers.get("second"), (200, "second\n"), answers)
        # Only bob's answer came before the release: alice's second waited for her first's room.
        self.assertEqual(order[:2], ["bob", "released"], f"alice's second exec ran past her share of the room: {order}")


class Concurrency(SharedCase):
    CLIENTS = 32

    def test_32_concurrent_clients_each_get_their_own_result(self):
        problems, lock = [], threading.Lock()

        def client(n):
            marker = f"client-{n}-{secrets.token_hex(4)}"
            api = self.server.api()
            try:
                sbx = api.create(dict(SMALL, labels={"marker": marker}))
                with lock:
                    self.made.append((api, sbx["id"]))
                api.call("PUT", files_path(sbx["id"], "m.txt"), raw=marker.encode())
                r = api.exec(sbx["id"], {"cmd": 'cat; echo "$MARK"; cat m.txt', "stdin": marker + "\n",
                                         "env": {"MARK": marker.upper()}})
                want = f"{marker}\n{marker.upper()}\n{marker}"
                if r["stdout"] != want:
                    raise AssertionError(f"stdout {r['stdout']!r}, want {want!r}")
                if api.call("GET", f"/v1/sandboxes/{sbx['id']}")["labels"] != {"marker": marker}:
                    raise AssertionError("another client's labels")
                if api.delete(sbx["id"]).status != 204:
                    raise AssertionError("DELETE did not answer 204")
            except Exception as e:  # noqa: BLE001: every client's failure is reported
                with lock:
                    problems.append(f"client {n}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=client, args=(n,)) for n in range(self.CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(100)
        self.assertFalse(any(t.is_alive() for t in threads), "a client got no answer in 100s")
        self.assertEqual(problems, [])


class Races(SharedCase):
    ANSWERS = {200, 201, 204, 404, 409}  # a request racing a DELETE or a write: done, gone, or changed meanwhile

    def test_files_racing_a_delete_or_a_write_answer_gone_or_changed_never_500_or_400(self):
        # Bounded stress: the windows are a few system calls wide, so a round catches a regression only sometimes.
        seen, lock = {}, threading.Lock()
        gone = [0]  # 404s so far: each round waits for one of its own

        def note(r):
            with lock:
                seen.setdefault(r.status, r)
                gone[0] += r.status == 404

        def hammer(sandbox_id, stop, kind):
            api = self.server.api()
            while not stop.is_set():
                if kind == "put":
                    note(api.request("PUT", files_path(sandbox_id, "a.txt"), raw=secrets.token_bytes(200_000)))
                elif kind == "get":
                    note(api.request("GET", files_path(sandbox_id, "a.txt")))
                else:
                    note(api.request("GET", files_path(sandbox_id, ".", list="true")))

        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            sandbox_id = self.server.api().create(SMALL)["id"]
            stop = threading.Event()
            threads = [threading.Thread(target=hammer, args=(sandbox_id, stop, kind))
                       for kind in ("put", "put", "get", "get", "list")]
            for t in threads:
                t.start()
            time.sleep(secrets.randbelow(300) / 1000)
            before = gone[0]
            self.assertIn(self.server.api().delete(sandbox_id).status, (204, 404))
            time.sleep(0.05)
            # Requests after the delete are what this test is for: under load the hammers may not have sent one yet.
            wait_for(lambda: gone[0] > before, 10)
            stop.set()
            for t in threads:
                t.join(30)
        unexpected = {status: r for status, r in seen.items() if status not in self.ANSWERS}
        self.assertEqual(unexpected, {})
        self.assertIn(404, seen, "no request came after a delete: the test did not test")


def sleep_marker():
    """A `sleep` argument no other process on the host has: its process is found by its command line."""
    return f"{secrets.randbelow(9000) + 1000}.{secrets.randbelow(900000) + 100000}"


def gated(gate, then):
    """A cmd that waits until /workspace/<gate> exists (a PUT through the files API, not an exec, releases it), then
    runs `then`; give its exec a timeout. With a gate name of its own its shell is found on the host by
    host_processes_with_argv(["/bin/sh", "-c", cmd]) (an exec's cmd runs as /bin/sh -c cmd)."""
    return f"while [ ! -e /workspace/{gate} ]; do sleep 0.05; done; {then}"


def host_processes_with_argv(argv):
    wanted = b"\0".join(a.encode() for a in argv) + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read() == wanted:
                        found.append(int(name))
            except OSError:
                pass
    return found


HANGING_CLIENT = r"""
import socket, sys, time
stream = sys.argv[1] == "stream"
path, sbx, body = sys.stdin.read().split("\n", 2)
s = socket.socket(socket.AF_UNIX)
s.connect(path)
data = body.encode()
s.sendall(b"POST /v1/sandboxes/%s/exec%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % (sbx.encode(), b"?stream=true" if stream else b"", len(data)) + data)
seen = b""
while stream and (b"started" not in seen or b"stdout" not in seen):
    chunk = s.recv(4096)
    if not chunk:
        sys.exit("the stream ended: " + seen.decode(errors="replace"))
    seen += chunk
print("READY", flush=True)
time.sleep(600)
"""


class SlowClients(SharedCase):
    def kill_a_client_mid_exec(self, mode):
        """A client (a process of its own) starts an exec of a long sleep and is SIGKILLed: the exec must end."""
        sbx = self.make()["id"]
        marker = sleep_marker()
        body = json.dumps({"cmd": f"echo started; exec sleep {marker}", "timeout": 30})
        client = subprocess.Popen([sys.executable, "-c", HANGING_CLIENT, mode], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(lambda: client.poll() is None and client.kill())
        client.stdin.write(f"{self.server.socket_path}\n{sbx}\n{body}".encode())
        client.stdin.close()
        ready = client.stdout.readline()
        self.assertEqual(ready.strip(), b"READY", client.stderr.read() if client.poll() is not None else ready)
        self.assertTrue(wait_for(lambda: host_processes_with_argv(["sleep", marker]), 10),
                        "the exec's program is not running")
        client.kill()
        client.wait()
        gone = wait_for(lambda: not host_processes_with_argv(["sleep", marker]), 15, 0.1)
        self.assertTrue(gone, "the exec of a killed client still runs 15 s later (its time-out is 30 s)")
        self.assertEqual(self.api.request("GET", "/v1/healthz").status, 200)
        self.assertEqual(self.run_in(sbx, {"argv": ["echo", "after"]})["stdout"], "after\n")

    def test_a_client_killed_mid_stream_ends_its_exec_and_others_go_on(self):
        self.kill_a_client_mid_exec("stream")

    def test_a_client_killed_while_waiting_for_a_plain_exec_ends_it(self):
        self.kill_a_client_mid_exec("plain")

    def test_a_client_that_does_not_read_its_stream_blocks_no_one(self):
        sbx = self.make()["id"]
        silent = socket.socket(socket.AF_UNIX)
        self.addCleanup(silent.close)
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        silent.connect(self.server.socket_path)
        body = json.dumps({"cmd": "head -c 30000000 /dev/zero | tr '\\0' x", "timeout": 20}).encode()
        silent.sendall(b"POST /v1/sandboxes/%s/exec?stream=true HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       b"application/json\r\nContent-Length: %d\r\n\r\n" % (sbx.encode(), len(body)) + body)
        quick = self.server.api(timeout=20)
        other = self.make(api=quick)["id"]
        self.assertEqual(quick.exec(other, {"argv": ["echo", "not blocked"]})["stdout"], "not blocked\n")
        self.assertEqual(quick.exec(sbx, {"argv": ["echo", "same sandbox"]})["stdout"], "same sandbox\n")

    def test_a_half_sent_request_does_not_block_others(self):
        stalled = socket.socket(socket.AF_UNIX)
        self.addCleanup(stalled.close)
        stalled.connect(self.server.socket_path)
        stalled.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        quick = self.server.api(timeout=20)
        sbx = self.make(api=quick)["id"]
        self.assertEqual(quick.exec(sbx, {"argv": ["echo", "not blocked"]})["stdout"], "not blocked\n")
        self.assertEqual(self.server.api(token=TOKENS["bob"], timeout=20).request("GET", "/v1/healthz").status, 200)


REACH_PROBE = r"""
import json, os, socket, sys
sock_path, port, state_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {"socket_visible": os.path.exists(sock_path), "state_visible": os.path.exists(state_dir)}
def talk(family, address):
    s = socket.socket(family)
    s.settimeout(3)
    try:
        s.connect(address)
        s.sendall(b"GET /v1/sandboxes HTTP/1.0\r\nHost: x\r\n\r\n")
        return s.recv(200).decode(errors="replace")
    except OSError as e:
        return "refused: " + type(e).__name__
    finally:
        s.close()
out["unix"] = talk(socket.AF_UNIX, sock_path)
out["tcp"] = talk(socket.AF_INET, ("127.0.0.1", port))
print(json.dumps(out))
"""


class SandboxReach(SharedCase):
    def test_sandboxed_code_cannot_reach_the_api_socket_or_port(self):
        for network in ("none", "host"):
            with self.subTest(network=network):
                sbx = self.make(body={"network": network})["id"]
                r = self.run_in(sbx, {"argv": ["python3", "-c", REACH_PROBE, self.server.socket_path,
                                               str(self.server.port), self.server.state_dir]})
                self.assertEqual(r["exit_code"], 0, r)
                seen = json.loads(r["stdout"])
                self.assertFalse(seen["socket_visible"], f"the API socket is visible inside: {seen}")
                self.assertFalse(seen["state_visible"], f"the server's state directory is visible inside: {seen}")
                self.assertTrue(seen["unix"].startswith("refused"), f"the socket answered inside: {seen}")
                tcp = seen["tcp"]
                self.assertTrue(tcp.startswith("refused") or tcp.startswith("HTTP/1.1 401"),
                                f"the port answered without a token: {seen}")


class Run(SharedCase):
    def test_run_is_a_one_shot_sandbox_gone_after_the_answer(self):
        before = self.api.call("GET", "/v1/capacity")["sandboxes"]["running"]
        self.seen.merge(Footprint.of(self.server))
        r = self.api.call("POST", "/v1/run", {"cmd": "echo $X", "env": {"X": "one-shot"},
                                              "limits": {"memory": "128M"}, "network": "none"})
        self.assertEqual((r["status"], r["stdout"]), ("ok", "one-shot\n"), r)
        self.assertEqual(r["limits"]["memory_max_bytes"], 128 << 20)
        self.assertEqual(self.api.call("GET", "/v1/sandboxes")["sandboxes"], [])
        self.assertEqual(self.api.call("GET", "/v1/capacity")["sandboxes"]["running"], before)

    def test_run_with_language_and_a_stream(self):
        head, lines = self.api.stream("POST", "/v1/run?stream=true", {"language": "python", "code": "print(7919)"})
        self.assertEqual(head.status, 200, repr(head))
        self.assertEqual([line["type"] for line in lines][-1], "result", lines)
        self.assertEqual(lines[-1]["result"]["stdout"], "7919\n")
        self.assertEqual("".join(line["data"] for line in lines if line["type"] == "stdout"), "7919\n")

    def test_run_timeout_is_a_result(self):
        r = self.api.call("POST", "/v1/run", {"argv": ["sleep", "30"], "timeout": 1})
        self.assertEqual(r["status"], "timeout", r)


class SharedServerShutdown(unittest.TestCase):
    """Last of the shared server's classes: SIGTERM while sandboxes live and an exec streams."""

    def test_sigterm_ends_every_sandbox_exits_0_and_leaves_nothing(self):
        server = shared_server()
        self.addCleanup(server.remove)
        api, alice = server.api(), server.api(token=TOKENS["alice"])
        ids = [api.create(SMALL)["id"], alice.create(SMALL)["id"]]
        streamed = {}
        marker = sleep_marker()

        def long_exec():
            try:
                streamed["answer"] = api.stream("POST", f"/v1/sandboxes/{ids[0]}/exec?stream=true",
                                                {"cmd": f"echo started; exec sleep {marker}", "timeout": 30})
            except Exception as e:  # noqa: BLE001: a closed connection is a fair end here
                streamed["answer"] = e

        t = threading.Thread(target=long_exec)
        t.start()
        self.assertTrue(wait_for(lambda: host_processes_with_argv(["sleep", marker]), 10), "the exec did not start")
        before = Footprint.of(server)
        self.assertGreaterEqual(len(before.procs), 2, f"no sandbox process was found: {before.procs}")
        rc = server.stop(signal.SIGTERM, deadline_s=30)
        _shared["server"] = None
        _shared["error"] = "it was stopped by the SIGTERM test"
        t.join(30)
        self.assertFalse(t.is_alive(), "the streaming client still waits after the server exited")
        answer = streamed.get("answer")
        self.assertIsInstance(answer, tuple, f"the running exec's stream broke off: {answer!r}")
        head, lines = answer
        self.assertEqual(head.status, 200, repr(head))
        self.assertIn(lines[-1].get("type") if lines else None, ("result", "error"),
                      f"the running exec's stream did not end with a result or an error: {lines}")
        if lines[-1]["type"] == "result":
            self.assertIn("the server is shutting down", lines[-1]["result"]["reason"], lines[-1])
        self.assertEqual(rc, 0, f"exit status after SIGTERM: {server.log_tail()}")
        left = wait_clean(before, server, deadline_s=5)
        self.assertEqual(left, [])
        self.assertFalse(os.path.exists(server.socket_path), "the socket file is left")
        self.assertEqual(os.listdir(server.state_dir) if os.path.exists(server.state_dir) else [], [])


CLASSES = [Endpoints, Exec, ConcurrentExecs, Streaming, Files, BadInput, Auth, Isolation, Concurrency, Races, SlowClients,
           SandboxReach, Run, SharedServerShutdown]
