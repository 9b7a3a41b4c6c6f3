# tests/python-client/test_runtime_clip.py: SandboxRuntime.execute against a scripted node, clip and tool output.
import threading
import unittest

import support  # noqa: F401
from fakenode import FakeNode, result

import nsbox


class ClipTest(unittest.TestCase):
    def test_short_text_is_kept_whole(self):
        self.assertEqual(nsbox.clip("abc", limit=3), "abc")
        self.assertEqual(nsbox.clip(None), "")
        self.assertEqual(nsbox.clip(b"bytes\xff"), "bytes\ufffd")

    def test_long_text_keeps_head_and_tail_with_a_marker_counting_the_cut(self):
        text = "".join("line %04d\n" % i for i in range(1000))  # 10000 characters
        out = nsbox.clip(text, limit=200)
        head, marker, tail = out.partition("[... ")
        self.assertTrue(text.startswith(head) and head.endswith("\n"))
        rest = marker + tail
        note, _, tail = rest.partition("...]\n")
        self.assertTrue(text.endswith(tail) and tail.startswith("line "))
        cut = len(text) - len(head) - len(tail)
        self.assertIn("%d characters of output cut here" % cut, note)
        self.assertIn("of 10000", note)
        self.assertLessEqual(len(head) + len(tail), 200)
        self.assertIn("line 0000", head)
        self.assertIn("line 0999", tail)
        self.assertIn("of stderr cut", nsbox.clip("x" * 50, limit=10, name="stderr"))

    def test_text_without_newlines_is_cut_at_the_limit(self):
        out = nsbox.clip("a" * 100 + "b" * 100, limit=20)
        self.assertTrue(out.startswith("a" * 10 + "\n[... 180 characters"))
        self.assertTrue(out.endswith("...]\n" + "b" * 10))

    def test_tool_output_names_exit_status_and_both_streams_within_the_limit(self):
        r = nsbox.ExecResult(result("exit", 1, "out\n", "Traceback\nValueError: boom\n"))
        self.assertEqual(nsbox.format_tool_output(r),
                         "exit_code: 1\nstdout:\nout\nstderr:\nTraceback\nValueError: boom\n")
        t = nsbox.format_tool_output(result("timeout", None, "", "", reason="wall time limit (1s) reached"))
        self.assertEqual(t, "exit_code: 124\nstatus: timeout (wall time limit (1s) reached)\nstdout: (empty)\n"
                            "stderr: (empty)\n")
        self.assertTrue(nsbox.format_tool_output(result(stdout="7919\n")).startswith("exit_code: 0\nstdout:\n7919"))
        big = nsbox.format_tool_output(result(stdout="o" * 5000, stderr="e" * 5000), limit=1000)
        self.assertLess(len(big), 1400)
        self.assertIn("of stdout cut", big)
        self.assertIn("of stderr cut", big)
        small_err = nsbox.format_tool_output(result(stdout="o" * 5000, stderr="err\n"), limit=1000)
        self.assertIn("stderr:\nerr\n", small_err)


class RuntimeTest(unittest.TestCase):
    def setUp(self):
        self.node = FakeNode("r")
        self.addCleanup(self.node.stop)

    def test_one_sandbox_per_runtime_keeps_files_and_close_ends_it(self):
        with nsbox.SandboxRuntime(url=self.node.url) as rt:
            self.assertEqual(rt.execute("python", "open('s.txt', 'w').write('kept')").exit_code, 0)
            r = rt.execute("python", "import sys\nprint(open('s.txt').read())\nprint('err', file=sys.stderr)")
            self.assertEqual((r.output, r.exit_code, r.status), ("kept\nerr\n", 0, "ok"))
            self.assertEqual(r.result.stdout, "kept\n")
            self.assertEqual(len(self.node.sandboxes), 1)
        self.assertEqual(self.node.sandboxes, {})
        self.assertEqual(self.node.requests("POST", "/v1/sandboxes")[0].json(), {"template": "python"})

    def test_a_repl_runtimes_output_is_its_cells_stdout_and_stderr(self):
        # The server answers a REPL cell with its result alone: the output comes from there.
        with nsbox.SandboxRuntime(url=self.node.url, repl=True) as rt:
            r = rt.execute("python", "import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)")
            self.assertEqual((r.output, r.exit_code, r.status), ("42\nwarn\n", 0, "ok"))
        self.assertTrue(self.node.requests("POST", "/exec")[0].json()["repl"])

    def test_fresh_sandbox_per_call_keeps_nothing_and_leaves_nothing(self):
        rt = nsbox.SandboxRuntime(url=self.node.url, fresh_sandbox_per_call=True)
        rt.execute("python", "open('s.txt', 'w').write('kept')")
        r = rt.execute("python", "import os\nprint(os.path.exists('s.txt'))")
        self.assertEqual(r.output, "False\n")
        self.assertEqual(len(self.node.requests("DELETE")), 2)
        self.assertEqual(self.node.sandboxes, {})

    def test_failure_and_time_out_are_results(self):
        rt = nsbox.SandboxRuntime(url=self.node.url, fresh_sandbox_per_call=True)
        r = rt.execute("python", "raise ValueError('boom')")
        self.assertEqual(r.exit_code, 1)
        self.assertIn("ValueError: boom", r.output)
        r = rt.execute("python", "import time\nprint('start', flush=True)\ntime.sleep(30)", timeout=0.5)
        self.assertEqual((r.exit_code, r.status), (124, "timeout"))
        self.assertEqual(self.node.sandboxes, {})

    def test_32_threads_each_get_their_own_result(self):
        rt = nsbox.SandboxRuntime(url=self.node.url)
        self.addCleanup(rt.close)
        got = {}

        def one(i):
            got[i] = rt.execute("python", "print(%d * 1000 + 7)" % i)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual({i: r.output for i, r in got.items()}, {i: "%d\n" % (i * 1000 + 7) for i in range(32)})
        self.assertEqual(len(self.node.requests("POST", "/v1/sandboxes")), 1)

    def test_api_failures_raise(self):
        self.node.create_status = 429
        with self.assertRaises(nsbox.CapacityFull):
            nsbox.SandboxRuntime(url=self.node.url).execute("python", "print(1)")


if __name__ == "__main__":
    unittest.main()
