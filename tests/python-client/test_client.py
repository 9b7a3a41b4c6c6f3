# tests/python-client/test_client.py: every client method against a scripted node: bodies sent, answers, errors.
import json
import os
import queue
import shutil
import threading
import unittest
from unittest import mock

import support  # noqa: F401  (puts clients/python on sys.path)
from fakenode import FakeNode, result

import nsbox
from nsbox import errors, sandbox, transport


class NodeCase(unittest.TestCase):
    def setUp(self):
        self.node = FakeNode("a")
        self.addCleanup(self.node.stop)

    def create(self, **kw):
        sbx = nsbox.Sandbox.create(url=self.node.url, **kw)
        self.addCleanup(sbx.terminate)
        return sbx


class TransportTest(unittest.TestCase):
    def test_default_socket_is_run_for_root_and_xdg_runtime_dir_for_a_user(self):
        with mock.patch("os.geteuid", return_value=0):
            self.assertEqual(transport.default_socket(), "/run/nsbox/api.sock")
        with mock.patch("os.geteuid", return_value=1000), mock.patch.dict(os.environ, {"XDG_RUNTIME_DIR": "/run/u"}):
            self.assertEqual(transport.default_socket(), "/run/u/nsbox/api.sock")
        # Without XDG_RUNTIME_DIR (cron, ssh without logind): where the server puts it, not root's socket.
        with mock.patch("os.geteuid", return_value=1000), mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(transport.default_socket(), "/tmp/nsbox-1000/api.sock")

    def test_a_default_socket_directory_another_user_made_in_tmp_is_refused(self):
        uid = 4242
        directory = "/tmp/nsbox-%d" % uid
        shutil.rmtree(directory, ignore_errors=True)
        os.mkdir(directory)
        self.addCleanup(shutil.rmtree, directory, True)
        with mock.patch("os.geteuid", return_value=uid), mock.patch.dict(os.environ, {}, clear=True):
            for owner, mode, problem in ((uid + 1, 0o700, "belongs to uid 4243"), (uid, 0o777, "writable by other")):
                os.chown(directory, owner, owner)
                os.chmod(directory, mode)
                with self.assertRaises(nsbox.NsboxError) as cm:
                    transport.default_socket()
                self.assertIn(problem, str(cm.exception))
                self.assertFalse(cm.exception.request_sent)
            os.chown(directory, uid, uid)
            os.chmod(directory, 0o700)
            self.assertEqual(transport.default_socket(), directory + "/api.sock")
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(transport.endpoint_urls(), ["unix://" + transport.default_socket()])

    def test_a_path_in_the_url_prefixes_every_route_and_a_query_is_refused(self):
        # The path was dropped: the routes, and the token, went to the host's root instead of the API's mount.
        node = FakeNode("prefix", tcp=True)
        self.addCleanup(node.stop)
        node.override = lambda h, req: node._send(h, 200, {"sandboxes": []}) is None
        for suffix in ("/api", "/api/"):
            self.assertEqual(nsbox.Transport(node.url + suffix).request("GET", "/v1/sandboxes"), {"sandboxes": []})
            self.assertEqual(node.seen[-1].path, "/api/v1/sandboxes")
        nsbox.Transport(node.url + "/a b/café").request("GET", "/v1/sandboxes")
        self.assertEqual(node.seen[-1].path, "/a%20b/caf%C3%A9/v1/sandboxes")
        for bad in ("?x=1", "/api#top"):
            with self.assertRaises(nsbox.NsboxError) as cm:
                nsbox.Transport(node.url + bad)
            self.assertIn("a query or fragment has no place", str(cm.exception))
            self.assertFalse(cm.exception.request_sent)

    def test_nsbox_url_may_list_several_nodes(self):
        with mock.patch.dict(os.environ, {"NSBOX_URL": " unix:///a.sock, http://h:1 ,"}):
            self.assertEqual(transport.endpoint_urls(), ["unix:///a.sock", "http://h:1"])
        self.assertEqual(transport.endpoint_urls(["unix:///x"]), ["unix:///x"])

    def test_a_bad_url_is_an_error_naming_it(self):
        for url in ("unix://rel.sock", "ftp://h", "nonsense"):
            with self.assertRaises(nsbox.NsboxError) as cm:
                nsbox.Sandbox.create(url=url)
            self.assertIn(url, str(cm.exception))
            self.assertFalse(cm.exception.request_sent)

    def test_nsbox_url_and_token_from_the_environment_over_tcp(self):
        node = FakeNode("t", tcp=True)
        self.addCleanup(node.stop)
        node.token = "s3cret"
        with mock.patch.dict(os.environ, {"NSBOX_URL": node.url, "NSBOX_TOKEN": "s3cret"}):
            with nsbox.Sandbox.create() as sbx:
                self.assertEqual(sbx.exec("echo hi").stdout, "hi\n")
        self.assertEqual(node.seen[0].headers["Authorization"], "Bearer s3cret")
        with self.assertRaises(nsbox.Refused) as cm:
            nsbox.Sandbox.create(url=node.url, token="wrong")
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
        self.assertEqual(str(cm.exception), "missing or wrong bearer token")

    def test_no_server_is_server_gone_with_nothing_sent(self):
        with self.assertRaises(nsbox.ServerGone) as cm:
            nsbox.Sandbox.create(url="unix:///nonexistent/nsbox/api.sock")
        self.assertFalse(cm.exception.request_sent)
        self.assertIn("cannot connect", str(cm.exception))


class SandboxTest(NodeCase):
    def test_create_sends_the_options_and_timeout_is_the_lifetime(self):
        sbx = self.create(template="python", network={"allow": ["pypi.org"]}, timeout=120,
                          limits={"memory": "256M", "pids": 64}, env={"K": "V"}, labels={"who": "me"})
        body = self.node.requests("POST", "/v1/sandboxes")[0].json()
        self.assertEqual(body, {"template": "python", "network": {"allow": ["pypi.org"]}, "max_lifetime": 120,
                                "limits": {"memory": "256M", "pids": 64}, "env": {"K": "V"},
                                "labels": {"who": "me"}})
        self.assertRegex(sbx.id, r"^sb-[0-9a-f0-9]{24}$")
        self.assertEqual(sbx.info["max_lifetime"], 120)
        self.assertEqual(sbx.url, self.node.url)
        self.assertEqual(self.create().info["template"], "host")
        self.assertEqual(self.node.requests("POST", "/v1/sandboxes")[1].json(), {})

    def test_create_refuses_both_max_lifetime_and_its_other_name_timeout(self):
        with self.assertRaisesRegex(TypeError, "max_lifetime or as timeout .its other name., not both"):
            nsbox.Sandbox.create(url=self.node.url, max_lifetime=60, timeout=120)
        self.assertEqual(self.node.requests("POST", "/v1/sandboxes"), [])
        self.create(max_lifetime=60)
        self.assertEqual(self.node.requests("POST", "/v1/sandboxes")[0].json(), {"max_lifetime": 60})

    def test_the_printed_forms_never_show_the_token(self):
        node = FakeNode("p", tcp=True)
        self.addCleanup(node.stop)
        sbx = nsbox.Sandbox.create(url=node.url, token="tok-hidden-123")
        self.addCleanup(sbx.terminate)
        for printed in (repr(sbx), str(sbx), repr(sbx._transport), str(sbx.files)):
            self.assertNotIn("tok-hidden-123", printed)

    def test_connect_list_refresh_and_terminate(self):
        sbx = self.create()
        again = nsbox.Sandbox.connect(sbx.id, url=self.node.url)
        self.assertEqual(again.id, sbx.id)
        self.assertEqual(again.refresh()["state"], "running")
        self.assertEqual([s.id for s in nsbox.Sandbox.list(url=self.node.url)], [sbx.id])
        sbx.terminate()
        sbx.terminate()  # idempotent: the second answer is 404, not an error
        self.assertEqual(nsbox.Sandbox.list(url=self.node.url), [])
        self.assertEqual(len(self.node.requests("DELETE")), 2)
        with self.assertRaises(nsbox.NotFound) as cm:
            nsbox.Sandbox.connect(sbx.id, url=self.node.url)
        self.assertEqual(str(cm.exception), "no sandbox %s" % sbx.id)
        self.assertEqual(cm.exception.code, "not_found")

    def test_context_manager_terminates_even_on_an_exception(self):
        with self.assertRaises(ZeroDivisionError):
            with nsbox.Sandbox.create(url=self.node.url) as sbx:
                1 / 0
        self.assertEqual(self.node.sandboxes, {})
        self.assertTrue(self.node.requests("DELETE", sbx.id))

    def test_exec_a_string_runs_by_sh_and_a_list_is_argv(self):
        sbx = self.create()
        sbx.files.write("sub/.keep", "")
        r = sbx.exec("echo $((6*7)); echo oops >&2; exit 3", timeout=5, env={"A": "1"}, cwd="sub", stdin="in")
        self.assertEqual(self.node.requests("POST", "/exec")[0].json(),
                         {"cmd": "echo $((6*7)); echo oops >&2; exit 3", "timeout": 5, "env": {"A": "1"},
                          "cwd": "sub", "stdin": "in"})
        r = sbx.exec(["sh", "-c", 'read x; echo "$x $A"; echo oops >&2; exit 3'], stdin=b"in\n", env={"A": "1"})
        self.assertEqual(self.node.requests("POST", "/exec")[1].json()["argv"][0], "sh")
        self.assertEqual((r.status, r.exit_code, r.stdout, r.stderr, r.ok), ("exit", 3, "in 1\n", "oops\n", False))
        self.assertEqual(r.raw["stdout_bytes"], 5)
        self.assertEqual(r["exit_code"], 3)
        self.assertGreaterEqual(r.wall_ms, 0)
        self.assertTrue(sbx.exec("true").ok)
        with self.assertRaisesRegex(ValueError, "stdin must be UTF-8 text .byte 1 is not.; write binary input"):
            sbx.exec("wc -c", stdin=b"\x00\xff" * 10)
        with self.assertRaises(TypeError):
            sbx.exec([])

    def test_a_program_time_out_is_a_result_not_an_exception(self):
        r = self.create().exec("sleep 5", timeout=0.3)
        self.assertEqual(r.status, "timeout")
        self.assertIn("wall time", r.reason)

    def test_the_client_deadline_is_the_exec_time_out_plus_a_grace(self):
        sbx = self.create()
        self.node.exec_mode = "silent"
        with mock.patch.object(sandbox, "EXEC_GRACE_S", 0.2):
            with self.assertRaises(nsbox.RequestTimeout) as cm:
                sbx.exec("sleep 100", timeout=0.1)
        self.assertTrue(cm.exception.request_sent)
        self.assertIn("no answer within 0.3 s", str(cm.exception))

    def test_an_exec_without_a_timeout_sends_the_default_and_waits_for_it_alone(self):
        # The server's own default (its --default-timeout) may be anything: the client sends the time-out it waits
        # for, and never counts on a guess of the server's.
        sbx = self.create()
        sbx.exec("true")
        nsbox.Sandbox.run(cmd="true", url=self.node.url)
        self.assertEqual(self.node.requests("POST", "/exec")[0].json(), {"cmd": "true", "timeout": 60})
        self.assertEqual(self.node.requests("POST", "/v1/run")[0].json(), {"cmd": "true", "timeout": 60})
        self.node.exec_mode = "silent"
        with mock.patch.object(sandbox, "EXEC_GRACE_S", 0.2), mock.patch.object(sandbox, "DEFAULT_EXEC_TIMEOUT_S", 0.1):
            with self.assertRaises(nsbox.RequestTimeout) as cm:
                sbx.exec("sleep 100")
        self.assertIn("no answer within 0.3 s", str(cm.exception))

    def test_the_client_deadline_includes_a_compiled_languages_compile_step(self):
        # The compile runs before the program, under its own time-out: a deadline of the program's time-out alone
        # would give up while the server is still compiling.
        sbx = self.create()
        self.node.exec_mode = "silent"
        with mock.patch.object(sandbox, "EXEC_GRACE_S", 0.2), \
                mock.patch.object(sandbox, "DEFAULT_COMPILE_TIMEOUT_S", 0.4):
            with self.assertRaises(nsbox.RequestTimeout) as cm:
                sbx.run_code("int main(void) { return 0; }", language="c", timeout=0.1, compile_timeout=0.3)
            self.assertIn("no answer within 0.6 s", str(cm.exception))
            with self.assertRaises(nsbox.RequestTimeout) as cm:  # no compile_timeout: the language table's bound
                sbx.run_code("fn main() {}", language="rust", timeout=0.1)
            self.assertIn("no answer within 0.7 s", str(cm.exception))
            with self.assertRaises(nsbox.RequestTimeout) as cm:  # an interpreted language compiles nothing
                sbx.run_code("print(1)", language="python", timeout=0.1)
            self.assertIn("no answer within 0.3 s", str(cm.exception))

    def test_run_code_sends_language_code_and_repl(self):
        sbx = self.create()
        r = sbx.run_code("print(2 ** 10)")
        self.assertEqual(r.stdout, "1024\n")
        sbx.run_code("x = 1", repl=True, timeout=9)
        bodies = [q.json() for q in self.node.requests("POST", "/exec")]
        self.assertEqual(bodies, [{"language": "python", "code": "print(2 ** 10)", "timeout": 60},
                                  {"language": "python", "code": "x = 1", "timeout": 9, "repl": True}])

    def test_run_code_sends_a_compiled_languages_compile_limits(self):
        sbx = self.create()
        sbx.run_code("int main(void) { return 0; }", language="c", compile_timeout=20, compile_memory="256M")
        nsbox.Sandbox.run(code="int main(){}", language="cpp", compile_memory=1 << 28, url=self.node.url)
        self.assertEqual(self.node.requests("POST", "/exec")[0].json(),
                         {"language": "c", "code": "int main(void) { return 0; }", "timeout": 60,
                          "compile_timeout": 20, "compile_memory": "256M"})
        self.assertEqual(self.node.requests("POST", "/v1/run")[0].json(),
                         {"language": "cpp", "code": "int main(){}", "timeout": 60, "compile_memory": 1 << 28})

    def test_one_shot_run(self):
        r = nsbox.Sandbox.run(code="print('once')", timeout=10, network="none", url=self.node.url)
        self.assertEqual(r.stdout, "once\n")
        self.assertEqual(self.node.requests("POST", "/v1/run")[0].json(),
                         {"network": "none", "language": "python", "code": "print('once')", "timeout": 10})

    def test_exec_on_a_dropped_connection_is_server_gone(self):
        sbx = self.create()
        self.node.exec_mode = "reset"
        with self.assertRaises(nsbox.ServerGone) as cm:
            sbx.exec("true")
        self.assertTrue(cm.exception.request_sent)


class CutShortTest(NodeCase):
    """An answer that ends before the Content-Length it promised is the server gone, never a shorter answer."""

    def test_a_file_cut_short_is_server_gone_not_a_shorter_file(self):
        sbx = self.create()
        sbx.files.write("data.bin", bytes(range(256)) * 64)
        self.node.cut_answers = True
        with self.assertRaises(nsbox.ServerGone) as cm:
            sbx.files.read("data.bin")
        self.assertTrue(cm.exception.request_sent)
        self.assertIn("the answer was cut short", str(cm.exception))

    def test_a_json_answer_cut_short_is_server_gone(self):
        sbx = self.create()
        self.node.cut_answers = True
        calls = {"exec": lambda: sbx.exec("echo hi"), "refresh": sbx.refresh, "files.list": sbx.files.list,
                 "list": lambda: nsbox.Sandbox.list(url=self.node.url),
                 "connect": lambda: nsbox.Sandbox.connect(sbx.id, url=self.node.url)}
        for name, call in calls.items():
            with self.assertRaises(nsbox.ServerGone, msg=name) as cm:
                call()
            self.assertIn("the answer was cut short", str(cm.exception), name)


    def test_an_answer_cut_in_its_headers_is_server_gone_not_an_empty_success(self):
        sbx = self.create()
        sbx.files.write("a.txt", "x")
        self.node.cut_headers = True
        calls = {"files.read": lambda: sbx.files.read("a.txt"), "files.list": sbx.files.list,
                 "files.write": lambda: sbx.files.write("b.txt", "y"), "exec": lambda: sbx.exec("echo hi")}
        for name, call in calls.items():
            with self.assertRaises(nsbox.ServerGone, msg=name) as cm:
                call()
            self.assertIn("the answer was cut short", str(cm.exception), name)
        # A 204 has no body to cut: its status line alone says the removal was done.
        self.assertIsNone(sbx.files.remove("a.txt"))


class FilesTest(NodeCase):
    def test_write_read_list_remove(self):
        files = self.create().files
        self.assertEqual(files.write("a/b.txt", "héllo"), {"path": "/workspace/a/b.txt", "size": 6})
        every_byte = bytes(range(256))
        files.write("/workspace/bin.dat", every_byte)
        self.assertEqual(files.read("bin.dat"), every_byte)
        self.assertEqual(files.read_text("a/b.txt"), "héllo")
        self.assertEqual(self.node.requests("PUT")[0].headers["Content-Type"], "application/octet-stream")
        entries = files.list()
        self.assertEqual([(e["name"], e["type"]) for e in entries], [("a", "dir"), ("bin.dat", "file")])
        self.assertEqual(files.list("a")[0], {"name": "b.txt", "path": "/workspace/a/b.txt", "type": "file",
                                              "size": 6})
        files.remove("a")
        self.assertEqual([e["name"] for e in files.list()], ["bin.dat"])
        self.assertEqual(self.node.requests("GET", "/files")[-1].query, {"path": ".", "list": "true"})

    def test_missing_file_escape_and_too_large_are_typed(self):
        files = self.create().files
        with self.assertRaises(nsbox.NotFound) as cm:
            files.read("missing.txt")
        self.assertEqual(str(cm.exception), "no file /workspace/missing.txt")
        for bad in ("../x", "/etc/passwd"):
            with self.assertRaises(nsbox.Refused) as cm:
                files.write(bad, "x")
            self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
            self.assertIn(bad, str(cm.exception))
        with self.assertRaises(nsbox.Refused) as cm:
            files.write("big", b"x" * (2 << 20))
        self.assertEqual(cm.exception.status, 413)
        with self.assertRaises(TypeError):
            files.write("n", 5)


class StreamingTest(NodeCase):
    def test_callbacks_get_each_chunk_and_the_result_comes_last(self):
        sbx = self.create()
        out, err = [], []
        r = sbx.exec("echo one; echo two >&2", on_stdout=out.append, on_stderr=err.append)
        req = self.node.requests("POST", "/exec")[0]
        self.assertEqual(req.query, {"stream": "true"})
        self.assertEqual(req.headers["Accept"], "application/x-ndjson")
        self.assertEqual((out, err, r.stdout, r.exit_code), (["one\n"], ["two\n"], "one\n", 0))

    def test_chunks_arrive_while_the_program_still_runs(self):
        got_first = threading.Event()

        def script(write, spec):
            write({"type": "stdout", "data": "first\n"})
            # The next line is sent only once the client has handed the first one to its callback.
            write({"type": "stdout", "data": "second\n" if got_first.wait(10) else "late\n"})
            write({"type": "stderr", "data": "e"})
            write(b'\n{"type": "result", "result": {"status": "ok", "exit_code": 0, "stdout": "first\\nsecond\\n"}}')

        self.node.stream_script = script
        chunks = []

        def on_stdout(chunk):
            chunks.append(chunk)
            got_first.set()
        r = self.create().exec("x", on_stdout=on_stdout)
        self.assertEqual(chunks, ["first\n", "second\n"])
        self.assertEqual(r.stdout, "first\nsecond\n")

    def test_an_error_line_is_a_typed_exception(self):
        self.node.stream_script = lambda write, spec: (
            write({"type": "stdout", "data": "partial"}),
            write({"type": "error", "error": {"code": "conflict", "message": "the sandbox ended"}}))
        with self.assertRaises(nsbox.Conflict) as cm:
            self.create().exec("x", on_stdout=lambda c: None)
        self.assertEqual(str(cm.exception), "the sandbox ended")

    def test_a_broken_stream_is_an_error(self):
        self.node.stream_script = lambda write, spec: write(b"not json\n")
        with self.assertRaises(nsbox.NsboxError) as cm:
            self.create().exec("x", on_stderr=lambda c: None)
        self.assertIn("not JSON", str(cm.exception))
        self.node.stream_script = lambda write, spec: write({"type": "stdout", "data": "x"})
        with self.assertRaises(nsbox.ServerGone) as cm:
            self.create().exec("x", on_stdout=lambda c: None)
        self.assertIn("without a result", str(cm.exception))

    def test_a_server_answering_the_whole_result_at_once_still_feeds_the_callbacks(self):
        self.node.ignore_stream = True
        out, err = [], []
        r = self.create().exec("echo o; echo e >&2", on_stdout=out.append, on_stderr=err.append)
        self.assertEqual((out, err, r.exit_code), (["o\n"], ["e\n"], 0))

    def test_a_repl_cell_answered_by_its_result_alone_still_feeds_the_callbacks(self):
        out, err = [], []
        r = self.create().run_code("import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)", repl=True,
                                   on_stdout=out.append, on_stderr=err.append)
        self.assertEqual(self.node.requests("POST", "/exec")[0].query, {"stream": "true"})
        self.assertEqual((out, err, r.stdout), (["42\n"], ["warn\n"], "42\n"))

    def test_the_result_feeds_only_the_streams_of_which_no_chunk_came_and_once(self):
        self.node.stream_script = lambda write, spec: (
            write({"type": "stdout", "data": "streamed\n"}),
            write({"type": "result", "result": result(stdout="streamed\n", stderr="only in the result\n")}))
        out, err = [], []
        self.create().exec("x", on_stdout=out.append, on_stderr=err.append)
        self.assertEqual((out, err), (["streamed\n"], ["only in the result\n"]))

    def test_a_result_line_of_32_mib_in_1_kib_pieces_arrives_whole(self):
        # Each piece is searched once: a client that copied or searched the whole pending line for every piece would
        # move some 500 GB here and not be done within the exec's deadline (its 1 s time-out and the 30 s grace).
        big = "0123456789abcde\n" * (2 << 20)
        line = json.dumps({"type": "result", "result": result(stdout=big)}).encode() + b"\n"
        self.node.stream_script = lambda write, spec: [write(line[i:i + 1024]) for i in range(0, len(line), 1024)]
        out = []
        r = self.create().exec("x", timeout=1, on_stdout=out.append)
        self.assertEqual((r.stdout_bytes, r.stdout == big, len(out), out[0] == big), (len(big), True, 1, True))

    def test_a_callback_that_raises_ends_the_call_with_its_exception(self):
        def boom(chunk):
            raise KeyError(chunk)
        with self.assertRaises(KeyError):
            self.create().exec("echo x", on_stdout=boom)


def flood(h, status, ctype, size, chunked=False, head=b""):
    """Answers `head` and then x's, `size` bytes in all, announced by its Content-Length or chunked; answers whether
    the client closed the connection before taking it all (a write failed)."""
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Transfer-Encoding", "chunked") if chunked else h.send_header("Content-Length", str(size))
    h.send_header("Connection", "close")
    h.end_headers()
    h.close_connection = True
    piece = b"x" * 65536
    try:
        for i in range(0, size, len(piece)):
            data = (head + piece)[:min(len(piece), size - i)] if i == 0 else piece[:size - i]
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n" if chunked else b"")
        h.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        return True
    return False


class HostileAnswerTest(NodeCase):
    """Answers no real server gives: too large for memory, or of the wrong shape. Each is the client's NsboxError."""

    def flood_on(self, suffix, *args, **kw):
        """The node answers the first request whose path ends with `suffix` by flood(); answers a queue that gets
        whether the client left the rest unread."""
        cut = queue.Queue()

        def override(h, req):
            if not req.path.endswith(suffix) or self.node.override is None:
                return False
            self.node.override = None
            cut.put(flood(h, *args, **kw))
            return True
        self.node.override = override
        return cut

    def test_an_answer_over_max_response_bytes_fails_naming_the_cap_with_the_rest_unread(self):
        self.assertEqual(nsbox.Transport(self.node.url).max_response_bytes, 256 << 20)
        with self.assertRaises(ValueError):
            nsbox.Transport(self.node.url, max_response_bytes=0)
        sbx = self.create(max_response_bytes=1 << 20)
        four_mib = 4 << 20
        calls = {
            "a file read, chunked": ("/files", ("application/octet-stream", four_mib, True),
                                     lambda: sbx.files.read("big")),
            "an exec's answer, by its Content-Length": ("/exec", ("application/json", four_mib),
                                                        lambda: sbx.exec("x")),
            "a stream line": ("/exec", ("application/x-ndjson", four_mib, True, b'{"type": "stdout", "data": "'),
                              lambda: sbx.exec("x", on_stdout=lambda c: None)),
        }
        for name, (suffix, args, call) in calls.items():
            cut = self.flood_on(suffix, 200, *args)
            with self.assertRaises(nsbox.NsboxError, msg=name) as cm:
                call()
            self.assertIn("over the client's cap of 1048576 bytes (max_response_bytes)", str(cm.exception), name)
            # A watchdog: the client closes at once; only a hung one leaves the flood unfinished for a minute.
            self.assertTrue(cut.get(timeout=60), "%s: the client read on past its cap" % name)

    def test_an_error_body_over_1_mib_is_cut_there_and_still_typed(self):
        cut = self.flood_on("/v1/sandboxes", 500, "text/plain", 4 << 20)
        with self.assertRaises(nsbox.InternalError) as cm:
            nsbox.Sandbox.create(url=self.node.url)
        self.assertEqual(cm.exception.status, 500)
        self.assertIn("over the client's cap of 1 MiB", str(cm.exception))
        self.assertTrue(cut.get(timeout=60), "the client read the error body on past 1 MiB")  # a watchdog

    def answer_with(self, suffix, raw, ctype="application/json"):
        self.node.override = lambda h, req: req.path.endswith(suffix) and self.node._send(
            h, 200, raw=raw, ctype=ctype) is None

    def test_answers_of_the_wrong_shape_are_nsbox_errors_not_type_errors(self):
        sbx = self.create()
        odd = {
            "/v1/sandboxes": ([b"null", b"[]", b"{}", b'"str"', b'{"id": 123}', b'{"id": ""}'],
                              lambda: nsbox.Sandbox.create(url=self.node.url)),
            "/v1/sandboxes/" + sbx.id: ([b"null", b'{"id": 5}'], sbx.refresh),
            "/exec": ([b"null", b'{"stdout": 7}', b'{"status": "ok", "stdout": 7}', b'{"id": "sb-1"}',
                       b'{"status": "ok", "changed_files": [null]}'], lambda: sbx.exec("x")),
            # A listing: null was an empty one, [1, 2] an AttributeError, {"entries": 5} a TypeError.
            "/files": ([b"null", b"[]", b'{"entries": 5}', b'{"entries": [1, 2]}', b'{"entries": null}'],
                          lambda: sbx.files.list(".")),
        }
        for suffix, (answers, call) in odd.items():
            for raw in answers:
                self.answer_with(suffix, raw)
                with self.assertRaises(nsbox.NsboxError, msg=raw) as cm:
                    call()
                self.assertIs(type(cm.exception), nsbox.NsboxError, raw)
        for raw in (b"null", b"{}", b'{"sandboxes": null}', b'{"sandboxes": [null]}', b'{"sandboxes": [{}]}'):
            self.node.override = lambda h, req: (req.method == "GET" and req.path == "/v1/sandboxes"
                                                 and self.node._send(h, 200, raw=raw) is None)
            with self.assertRaises(nsbox.NsboxError, msg=raw):
                nsbox.Sandbox.list(url=self.node.url)
        # A stream line that is not a JSON object is a malformed answer; an object of a type unknown here is skipped.
        for bad in ([None], [[1]], [{"type": "stdout", "data": 7}], [{"type": "error", "error": "x"}],
                    [{"type": "result", "result": {"status": 1}}]):
            self.node.stream_script = lambda write, spec: [write(json.dumps(x).encode() + b"\n") for x in bad]
            self.node.override = None
            with self.assertRaises(nsbox.NsboxError, msg=bad) as cm:
                sbx.exec("x", on_stdout=lambda c: None)
            self.assertIs(type(cm.exception), nsbox.NsboxError, bad)
        self.node.stream_script = lambda write, spec: (write({"type": "progress", "data": 7}), write({"x": 1}),
                                                       write({"type": "result", "result": result(stdout="s")}))
        self.assertEqual(sbx.exec("x", on_stdout=lambda c: None).stdout, "s")


class ErrorMappingTest(unittest.TestCase):
    def test_each_status_maps_to_its_class_with_the_server_message(self):
        table = {400: nsbox.Refused, 401: nsbox.Refused, 403: nsbox.Refused, 404: nsbox.NotFound, 405: nsbox.Refused,
                 409: nsbox.Conflict, 413: nsbox.Refused, 429: nsbox.CapacityFull, 500: nsbox.InternalError,
                 503: nsbox.ServerGone, 418: nsbox.NsboxError}
        for status, cls in table.items():
            e = errors.from_response(status, b'{"error": {"code": "c", "message": "one line"}, "capacity": {"x": 1}}',
                                     "unix:///s")
            self.assertIs(type(e), cls, status)
            self.assertEqual((str(e), e.status, e.code, e.url), ("one line", status, "c", "unix:///s"))
        self.assertEqual(errors.from_response(429, b'{"error": {}, "capacity": {"x": 1}}', "u").capacity, {"x": 1})
        self.assertTrue(issubclass(nsbox.CapacityFull, nsbox.Refused))
        for code, cls in (("setup_failed", nsbox.SetupFailed), ("internal", nsbox.InternalError)):
            self.assertIs(type(errors.from_response(500, b'{"error": {"code": "%s", "message": "m"}}' % code.encode(),
                                                    "u")), cls)
            self.assertIs(type(errors.from_stream_error({"code": code, "message": "m"}, "u")), cls)
        # A stream's "unavailable" (nothing ran, try again) has the status it has as an answer, as in TS and Go: the
        # placement over several nodes retries it on the next.
        gone = errors.from_stream_error({"code": "unavailable", "message": "m"}, "u")
        self.assertEqual((type(gone), gone.status), (nsbox.ServerGone, 503))

    def test_the_servers_internal_fault_is_one_kind_answered_or_streamed(self):
        node = FakeNode("i")
        self.addCleanup(node.stop)
        node.create_status, node.create_error_code = 500, "internal"
        with self.assertRaises(nsbox.InternalError) as cm:
            nsbox.Sandbox.create(url=node.url)
        self.assertEqual((cm.exception.status, cm.exception.code, str(cm.exception)),
                         (500, "internal", "i cannot make sandboxes"))
        node.create_status = 201
        sbx = nsbox.Sandbox.create(url=node.url)
        self.addCleanup(sbx.terminate)
        node.stream_script = lambda write, spec: write({"type": "error", "error": {"code": "internal",
                                                                                   "message": "engine fault"}})
        with self.assertRaises(nsbox.InternalError) as cm:
            sbx.exec("true", on_stdout=lambda chunk: None)
        self.assertEqual((cm.exception.code, str(cm.exception)), ("internal", "engine fault"))

    def test_a_body_that_is_not_the_error_shape_still_says_what_came(self):
        e = errors.from_response(502, b"<html>Bad Gateway</html>\nmore", "http://h:1")
        self.assertEqual(str(e), "HTTP 502 from http://h:1: <html>Bad Gateway</html>")
        self.assertIsNone(e.body)

    def test_server_answers_reach_the_caller_typed(self):
        node = FakeNode("e")
        self.addCleanup(node.stop)
        node.create_status = 500
        with self.assertRaises(nsbox.SetupFailed) as cm:
            nsbox.Sandbox.create(url=node.url)
        self.assertEqual(str(cm.exception), "e cannot make sandboxes")
        node.create_status = 201
        with self.assertRaises(nsbox.Refused) as cm:
            nsbox.Sandbox.create(url=node.url, template="python", labels=None, idle_timeout="x", env={})
        node.create_status = 429
        with self.assertRaises(nsbox.CapacityFull) as cm:
            nsbox.Sandbox.create(url=node.url)
        self.assertEqual(cm.exception.capacity["sandboxes"]["max"], 100)


class ResultTest(unittest.TestCase):
    def test_result_attributes_and_defaults(self):
        r = nsbox.ExecResult(result("oom", None, "", "", reason="memory limit"))
        self.assertEqual((r.status, r.exit_code, r.reason, r.ok, r.changed_files), ("oom", None, "memory limit",
                                                                                    False, []))
        r = nsbox.ExecResult({"status": "ok", "exit_code": 0})
        self.assertEqual((r.stdout, r.stderr, r.signal, r.wall_ms, r.repl), ("", "", 0, 0, None))
        self.assertIn("status='ok'", repr(r))
        with self.assertRaises(nsbox.NsboxError):
            nsbox.ExecResult(["not", "a", "dict"])


if __name__ == "__main__":
    unittest.main()
