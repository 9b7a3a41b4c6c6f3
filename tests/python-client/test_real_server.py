# tests/python-client/test_real_server.py: the client against a real `nsbox serve` on a private socket: the agent
# loops answer from a real run, state persists in one conversation, nothing is left, errors are typed, 32 threads.
# Every case is skipped (with the reason) when this nsbox has no serve command.
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

import support
from scripted_model import PERSIST_PROMPT, PRIME_PROMPT, ScriptedModel

import nsbox
from nsbox import sandbox

sys.path.insert(0, os.path.join(support.CLIENT, "examples"))
import agent_loops  # noqa: E402

SERVER = None


def setUpModule():
    global SERVER
    SERVER = support.RealServer()


def tearDownModule():
    if SERVER is not None:
        SERVER.stop()


def wait_until(check, seconds=30):
    """Polls `check` until it is true or the wait is over (clean-up may be asynchronous); answers its last value."""
    end = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > end:
            return value
        time.sleep(0.1)


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


class RealServerCase(unittest.TestCase):
    def setUp(self):
        if SERVER.skip_reason:
            self.skipTest(SERVER.skip_reason)
        self.url = SERVER.url
        self.model = ScriptedModel()
        self.addCleanup(self.model.stop)

    def assertNothingLeft(self, snapshot=None):
        """No sandbox listed, no session process of the server left, and none of `snapshot` (processes and
        cgroups of the sandboxes while they ran) left."""
        self.assertTrue(wait_until(lambda: nsbox.Sandbox.list(url=self.url) == []),
                        "sandboxes left: %r" % nsbox.Sandbox.list(url=self.url))
        self.assertTrue(wait_until(lambda: SERVER.sandbox_processes() == {}),
                        "processes left: %r" % SERVER.sandbox_processes())
        if snapshot is not None:
            self.assertTrue(wait_until(lambda: SERVER.still_there(snapshot) == []),
                            "left: %r" % SERVER.still_there(snapshot))


class AgentLoopsTest(RealServerCase):
    def test_anthropic_shaped_loop_answers_7919_from_a_real_run(self):
        text = agent_loops.answer(PRIME_PROMPT, self.model.url, shape="anthropic", url=self.url)
        self.assertEqual((self.model.problems, text), ([], "The 1000th prime is 7919."))
        self.assertTrue(self.model.tool_results[0].startswith("exit_code: 0\nstdout:\n7919\n"))
        self.assertNothingLeft()

    def test_openai_shaped_loop_answers_7919_from_a_real_run(self):
        text = agent_loops.answer(PRIME_PROMPT, self.model.url, shape="openai", url=self.url)
        self.assertEqual((self.model.problems, text), ([], "The 1000th prime is 7919."))
        self.assertNothingLeft()

    def test_files_and_repl_state_persist_between_two_calls_of_one_conversation(self):
        for shape in ("anthropic", "openai"):
            text = agent_loops.answer(PERSIST_PROMPT, self.model.url, shape=shape, repl=True, url=self.url)
            self.assertEqual((self.model.problems, text), ([], "The second run printed: written by call 1 42"),
                             self.model.tool_results)
        self.assertNothingLeft()


class LifecycleTest(RealServerCase):
    def test_terminate_in_finally_leaves_nothing(self):
        self.assertEqual(SERVER.sandbox_processes(), {})
        with self.assertRaises(RuntimeError):
            sbx = nsbox.Sandbox.create(url=self.url, timeout=300)
            try:
                sbx.files.write("data/in.txt", "payload")
                r = sbx.exec("cat data/in.txt; (sleep 300 >/dev/null 2>&1 &); echo started")
                self.assertEqual(r.stdout, "payloadstarted\n")

                def with_the_sleep():  # the exec may answer before the background fork has exec'd the sleep
                    processes = SERVER.sandbox_processes()
                    return processes if any(_cmdline(pid).startswith("sleep 300") for pid in processes) else None
                snapshot = wait_until(with_the_sleep) or SERVER.sandbox_processes()
                running = [pid for pid in snapshot if _cmdline(pid).startswith("sleep 300")]
                self.assertEqual(len(running), 1, "the background sleep is one of the sandbox's processes")
                self.assertTrue(any(groups for _, groups in snapshot.values()), "the sandbox has cgroups")
                raise RuntimeError("the agent failed mid-conversation")
            finally:
                sbx.terminate()
        sbx.terminate()  # idempotent
        self.assertNothingLeft(snapshot)

    def test_files_and_streaming(self):
        with nsbox.Sandbox.create(url=self.url, network="none", limits={"memory": "256M", "pids": 64}) as sbx:
            every_byte = bytes(range(256))
            self.assertEqual(sbx.files.write("sub/bin.dat", every_byte)["size"], 256)
            self.assertEqual(sbx.files.read("sub/bin.dat"), every_byte)
            self.assertIn("bin.dat", [e["name"] for e in sbx.files.list("sub")])
            out, err = [], []
            r = sbx.exec("for i in 1 2 3; do echo line $i; done; echo oops >&2", on_stdout=out.append,
                         on_stderr=err.append)
            self.assertEqual((r.status, r.exit_code, "".join(out), "".join(err)),
                             ("ok", 0, "line 1\nline 2\nline 3\n", "oops\n"))
            self.assertEqual(r.stdout, "".join(out))
            r = sbx.run_code("import time\ntime.sleep(30)", timeout=1)
            self.assertEqual(r.status, "timeout")
            sbx.files.remove("sub")
            with self.assertRaises(nsbox.NotFound):
                sbx.files.read("sub/bin.dat")
        self.assertNothingLeft()


    def test_a_file_name_that_is_not_utf8_is_listed_read_and_removed(self):
        # Sandboxed code can name a file with bytes that are not UTF-8; shown with U+FFFD it would name no file.
        with nsbox.Sandbox.create(url=self.url, network="none") as sbx:
            r = sbx.exec("printf hidden > \"$(printf 'report\\377.csv')\"")
            self.assertEqual(r.status, "ok", r)
            self.assertEqual([f["path"] for f in r.changed_files], ["/workspace/report\udcff.csv"])
            listed = [e for e in sbx.files.list(".") if e["name"].startswith("report")]
            self.assertEqual([e["name"] for e in listed], ["report\udcff.csv"])
            self.assertEqual(sbx.files.read(listed[0]["path"]), b"hidden")
            sbx.files.write("new\udcfe", b"x")
            self.assertEqual(sbx.exec("cat \"$(printf 'new\\376')\"").stdout, "x")
            sbx.files.remove(listed[0]["name"])
            self.assertEqual(sbx.exec("ls /workspace | grep -c report || true").stdout, "0\n")
        self.assertNothingLeft()


    def test_a_listing_cut_short_by_the_server_says_so(self):
        # The server lists 20000 entries at most, then adds "truncated": true.
        with nsbox.Sandbox.create(url=self.url, network="none") as sbx:
            r = sbx.exec("mkdir many && cd many && seq 20005 | xargs touch")
            self.assertEqual(r.status, "ok", r)
            listed = sbx.files.list("many")
            self.assertEqual((len(listed), listed.truncated), (20000, True))
            whole = sbx.files.list(".")
            self.assertEqual(([e["name"] for e in whole], whole.truncated), (["many"], False))
        self.assertNothingLeft()


class StreamingTest(RealServerCase):
    def test_a_compiled_language_with_its_compile_limits(self):
        with nsbox.Sandbox.create(url=self.url, network="none", limits={"memory": "256M", "pids": 64}) as sbx:
            r = sbx.run_code("int main(void) { return 4; }", language="c", compile_timeout=30,
                             compile_memory="128M")
            self.assertEqual((r.status, r.exit_code, r.compile["status"]), ("exit", 4, "ok"))
            # 8M, well under what cc1plus allocates: at 16M it could thrash on its text pages until its time-out.
            r = sbx.run_code("#include <iostream>\nint main() { std::cout << 1; }", language="cpp",
                             compile_memory="8M")
            self.assertEqual((r.status, r.compile["status"]), ("compile_error", "oom"))
            with self.assertRaises(nsbox.Refused) as cm:
                sbx.run_code("print(1)", compile_memory="64M")
            self.assertIn("compile_memory", str(cm.exception))

    def test_a_chunk_reaches_its_callback_while_the_program_still_runs(self):
        # The program prints, then waits for a file that the callback of that first chunk writes: with output
        # held back until the end the file never comes and the run ends as a time-out.
        with nsbox.Sandbox.create(url=self.url) as sbx:
            chunks = []

            def on_stdout(chunk):
                chunks.append(chunk)
                if chunk.startswith("waiting"):
                    sbx.files.write("go", "")
            r = sbx.exec("echo waiting; while [ ! -e go ]; do sleep 0.05; done; echo released", timeout=30,
                         on_stdout=on_stdout)
            self.assertEqual((r.status, "".join(chunks)), ("ok", "waiting\nreleased\n"))

    def test_a_repl_cell_feeds_the_callbacks_and_the_runtimes_output(self):
        # The server answers a REPL cell, streamed or not, with its result alone.
        with nsbox.Sandbox.create(url=self.url) as sbx:
            sbx.run_code("x = 6 * 7", repl=True)
            out, err = [], []
            r = sbx.run_code("import sys\nprint(x)\nprint('w', file=sys.stderr)", repl=True, on_stdout=out.append,
                             on_stderr=err.append)
            self.assertEqual((r.stdout, "".join(out), "".join(err)), ("42\n", "42\n", "w\n"))
        with nsbox.SandboxRuntime(url=self.url, repl=True) as rt:
            rt.execute("python", "x = 6 * 7")
            self.assertEqual(rt.execute("python", "print(x)").output, "42\n")
            failed = rt.execute("python", "x / 0")
            self.assertEqual(failed.exit_code, 1)
            self.assertIn("ZeroDivisionError: division by zero", failed.output)
        self.assertNothingLeft()

    def test_a_runtime_whose_sandbox_ended_runs_the_call_in_a_new_one_and_says_so(self):
        with nsbox.SandboxRuntime(url=self.url) as rt:
            first = rt.execute("python", "open('f', 'w').write('x'); print('one')")
            self.assertEqual((first.output, first.new_sandbox), ("one\n", False))
            rt.sandbox.terminate()  # as its idle time-out or lifetime would end it
            again = rt.execute("python", "import os; print(os.path.exists('f'))")
            self.assertEqual((again.output, again.new_sandbox), ("False\n", True))
            self.assertFalse(rt.execute("python", "print(2)").new_sandbox)
        self.assertNothingLeft()

    def test_one_shot_run_streamed_and_not(self):
        self.assertEqual(nsbox.Sandbox.run(code="print(6 * 7)", url=self.url).stdout, "42\n")
        out = []
        r = nsbox.Sandbox.run(cmd="echo streamed", url=self.url, on_stdout=out.append)
        self.assertEqual((r.stdout, "".join(out)), ("streamed\n", "streamed\n"))
        self.assertNothingLeft()


class TypedErrorsTest(RealServerCase):
    def test_a_full_server_is_capacity_full_with_its_capacity(self):
        boxes = []
        try:
            with self.assertRaises(nsbox.CapacityFull) as cm:
                for _ in range(200):
                    boxes.append(nsbox.Sandbox.create(url=self.url))
            cap = cm.exception.capacity
            self.assertEqual(cm.exception.code, "too_many_requests")
            self.assertIn(len(boxes), (cap["sandboxes"]["per_client_max"], cap["sandboxes"]["max"]))
        finally:
            for b in boxes:
                b.terminate()
        self.assertNothingLeft()

    def test_unknown_id_is_not_found_and_a_bad_path_is_refused(self):
        with self.assertRaises(nsbox.NotFound) as cm:
            nsbox.Sandbox.connect("sb-" + "0" * 24, url=self.url)
        self.assertEqual(cm.exception.code, "not_found")
        self.assertTrue(str(cm.exception))
        with nsbox.Sandbox.create(url=self.url) as sbx:
            for bad in ("../x", "/etc/passwd"):
                with self.assertRaises(nsbox.Refused) as cm:
                    sbx.files.write(bad, "x")
                self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
            with self.assertRaises(nsbox.NotFound):
                sbx.files.read("missing.txt")
        with self.assertRaises((nsbox.NotFound, nsbox.Conflict)):
            sbx.exec("true")
        with self.assertRaises(nsbox.Refused):
            nsbox.Sandbox.create(url=self.url, network="everything")


class ServerDefaultTimeoutTest(RealServerCase):
    def test_an_exec_without_a_timeout_runs_under_the_clients_default_not_the_servers(self):
        # The server's own default (5 s here) is not the client's (60 s): the client sends its default, so that what
        # it waits for is what the program runs under.
        node = support.RealServer("--default-timeout", "5", "--max-timeout", "30")
        self.addCleanup(node.stop)
        with nsbox.Sandbox.create(url=node.url) as sbx:
            r = sbx.exec("sleep 6; echo done")  # 60 s sent, capped at the server's 30 s
            self.assertEqual((r.status, r.stdout), ("ok", "done\n"))
            # A client whose default is 2 s: the server runs the program for 2 s, not for its own 5 s, as its
            # time-out result says. The grace is long: what is checked is the limit, not how soon the answer comes.
            with mock.patch.object(sandbox, "DEFAULT_EXEC_TIMEOUT_S", 2), \
                    mock.patch.object(sandbox, "EXEC_GRACE_S", 30):
                r = sbx.exec("sleep 60; echo done")
            self.assertEqual((r.status, r.stdout), ("timeout", ""), r.reason)
            self.assertIn("time limit of 2000 ms exceeded", r.reason)


class ConcurrencyTest(RealServerCase):
    def test_32_threads_at_once_each_get_their_own_result(self):
        with nsbox.SandboxRuntime(url=self.url, template="python") as rt:
            got, failed = {}, []
            start = threading.Barrier(32)

            def one(i):
                try:
                    start.wait()
                    got[i] = rt.execute("python", "print(%d * 1000 + 7)" % i)
                except Exception as e:  # noqa: BLE001 (reported below with its thread)
                    failed.append((i, e))
            threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(failed, [])
            self.assertEqual({i: (r.output, r.exit_code) for i, r in got.items()},
                             {i: ("%d\n" % (i * 1000 + 7), 0) for i in range(32)})
        self.assertNothingLeft()


class TcpTokenTest(RealServerCase):
    def test_tcp_with_a_bearer_token_from_the_environment(self):
        work = tempfile.mkdtemp(prefix="nsbox-py-tcp-")
        self.addCleanup(shutil.rmtree, work, True)
        tokens = os.path.join(work, "tokens")
        with open(tokens, "w") as f:
            f.write("ci:tok-%s\n" % os.urandom(8).hex())
        with open(tokens) as f:
            token = f.read().strip().split(":", 1)[1]
        with socket.socket() as probe:  # a free port (the OS picks it; the server takes it right after)
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        node = support.RealServer("--listen", "127.0.0.1:%d" % port, "--token-file", tokens)
        self.addCleanup(node.stop)
        url = "http://127.0.0.1:%d" % port
        with mock.patch.dict(os.environ, {"NSBOX_URL": url, "NSBOX_TOKEN": token}):
            with nsbox.Sandbox.create() as sbx:
                self.assertEqual(sbx.exec(["echo", "over tcp"]).stdout, "over tcp\n")
                self.assertEqual(sbx.url, url)
        for wrong in ("nope", None):
            with mock.patch.dict(os.environ, {"NSBOX_TOKEN": ""}):
                with self.assertRaises(nsbox.Refused) as cm:
                    nsbox.Sandbox.create(url=url, token=wrong)
            self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
            self.assertTrue(str(cm.exception))


class MultiNodeTest(RealServerCase):
    """Three real nodes: placement by capacity, a full node passes the create on, a killed node's sandboxes fail
    with ServerGone while the others and new creates carry on."""

    def test_placement_over_three_real_nodes(self):
        small = support.RealServer("--max-sandboxes", "1")
        self.addCleanup(small.stop)
        doomed = support.RealServer()
        self.addCleanup(doomed.stop)
        urls = [small.url, self.url, doomed.url]
        filler = nsbox.Sandbox.create(url=small.url)  # the small node is now full
        self.addCleanup(filler.terminate)
        with self.assertRaises(nsbox.CapacityFull):
            nsbox.Sandbox.create(url=small.url)
        placed = [nsbox.Sandbox.create(url=urls) for _ in range(6)]
        try:
            where = [b.url for b in placed]
            self.assertNotIn(small.url, where)
            self.assertLessEqual(abs(where.count(self.url) - where.count(doomed.url)), 1, where)
            for i, b in enumerate(placed):
                self.assertEqual(b.exec("echo %d" % i).stdout, "%d\n" % i)
            doomed.stop(signal.SIGKILL)
            self.assertEqual(doomed.left, [], "what the killed node's sandboxes left")
            for b in placed:
                if b.url == doomed.url:
                    with self.assertRaises(nsbox.ServerGone):
                        b.exec("echo never")
                else:
                    self.assertEqual(b.exec("echo alive").stdout, "alive\n")
            later = nsbox.Sandbox.create(url=urls)
            placed.append(later)
            self.assertEqual(later.url, self.url)
        finally:
            for b in placed:
                if b.url != doomed.url:
                    b.terminate()
        self.assertNothingLeft()


if __name__ == "__main__":
    unittest.main()
