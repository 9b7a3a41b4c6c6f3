# tests/python-client/test_cluster.py: placement over several scripted nodes: freest node, 429 and vanished nodes
# pass the create on, a sandbox's calls stay on its node, an exec is never retried.
import os
import tempfile
import unittest
from unittest import mock

import support  # noqa: F401
from fakenode import FakeNode

import nsbox
from nsbox import cluster


class PlacementTest(unittest.TestCase):
    def node(self, name, running=0, max_sandboxes=10):
        n = FakeNode(name, running=running, max_sandboxes=max_sandboxes)
        self.addCleanup(n.stop)
        return n

    def test_create_goes_to_the_node_with_the_most_free_slots_and_its_calls_stay_there(self):
        a, b, c = self.node("a", 9), self.node("b", 1), self.node("c", 5)
        sbx = nsbox.Sandbox.create(url=[a.url, b.url, c.url])
        self.assertEqual(sbx.url, b.url)
        self.assertEqual(sbx.exec("echo here").stdout, "here\n")
        sbx.files.write("f", "x")
        sbx.terminate()
        for other in (a, c):
            self.assertEqual(other.requests("POST") + other.requests("PUT") + other.requests("DELETE"), [])
            self.assertEqual(len(other.requests("GET", "/v1/capacity")), 1)
        self.assertEqual([r.method for r in b.seen], ["GET", "POST", "POST", "PUT", "DELETE"])

    def test_the_comma_separated_nsbox_url_is_several_nodes(self):
        a, b = self.node("a", 7), self.node("b", 2)
        with mock.patch.dict(os.environ, {"NSBOX_URL": "%s,%s" % (a.url, b.url)}):
            with nsbox.Sandbox.create() as sbx:
                self.assertEqual(sbx.url, b.url)
                self.assertEqual([s.id for s in nsbox.Sandbox.list()], [sbx.id])
                self.assertEqual(nsbox.Sandbox.connect(sbx.id).url, b.url)

    def test_equal_slots_then_free_memory_then_ready_pool_sandboxes_decide(self):
        a, b = self.node("a", 2), self.node("b", 2)
        a.capacity["memory_bytes"]["free"] = 1 << 30
        self.assertEqual(nsbox.Sandbox.create(url=[a.url, b.url]).url, b.url)
        a.capacity["memory_bytes"]["free"] = b.capacity["memory_bytes"]["free"]
        a.capacity["pool"] = {"python": {"ready": 3, "target": 4}}
        self.assertEqual(nsbox.Sandbox.create(url=[b.url, a.url], template="python").url, a.url)
        self.assertEqual(cluster.score({"sandboxes": {"running": 1, "max": 4}, "pids": {"free": 0}}),
                         (0, 3, 0, 0))
        self.assertIsNone(cluster.score(None))
        # The caller's own share counts too: a node with room whose share for this client is full has none for it.
        own_full = {"sandboxes": {"running": 1, "max": 4}, "memory_bytes": {"free": 1 << 30},
                    "client": {"sandboxes": {"running": 2, "max": 2}, "memory_bytes": {"free": 1 << 20}}}
        self.assertEqual(cluster.score(own_full), (0, 0, 1 << 20, 0))

    def test_a_node_without_room_is_tried_after_one_with_room(self):
        full, roomy = self.node("f", 0), self.node("r", 8)
        full.capacity["memory_bytes"]["free"] = 0  # most slots, but no memory left
        self.assertEqual(nsbox.Sandbox.create(url=[full.url, roomy.url]).url, roomy.url)
        self.assertEqual(full.requests("POST"), [])

    def test_a_full_node_429_and_a_vanished_node_pass_the_create_on(self):
        full, ok = self.node("full", 0), self.node("ok", 8)
        full.create_status = 429
        gone = "unix://" + os.path.join(tempfile.gettempdir(), "nsbox-py-no-such-node.sock")
        sbx = nsbox.Sandbox.create(url=[gone, full.url, ok.url])
        self.assertEqual(sbx.url, ok.url)
        self.assertEqual(len(full.requests("POST", "/v1/sandboxes")), 1, "the freest node was tried first")
        with self.assertRaises(nsbox.CapacityFull) as cm:
            nsbox.Sandbox.create(url=[full.url])
        self.assertEqual(cm.exception.capacity["sandboxes"]["max"], 10)
        self.assertEqual(str(cm.exception), "full is full")
        with self.assertRaises(nsbox.ServerGone) as cm:
            nsbox.Sandbox.create(url=[full.url, gone])
        self.assertIn("no node could take the request", str(cm.exception))
        self.assertIn("full is full", str(cm.exception))
        self.assertTrue(cm.exception.request_sent)  # the full node had it
        other_full = self.node("full2", 0)
        other_full.create_status = 429
        with self.assertRaises(nsbox.CapacityFull):
            nsbox.Sandbox.create(url=[full.url, other_full.url])

    def test_a_refusal_that_any_node_would_give_is_not_passed_on(self):
        bad, ok = self.node("bad", 0), self.node("ok", 5)
        bad.create_status = 500
        with self.assertRaises(nsbox.SetupFailed):
            nsbox.Sandbox.create(url=[bad.url, ok.url])
        self.assertEqual(ok.requests("POST"), [])

    def test_an_exec_whose_node_drops_the_connection_is_never_retried(self):
        flaky, other = self.node("flaky", 0), self.node("other", 5)
        sbx = nsbox.Sandbox.create(url=[flaky.url, other.url])
        self.assertEqual(sbx.url, flaky.url)
        flaky.exec_mode = "reset"
        with self.assertRaises(nsbox.ServerGone):
            sbx.exec("echo once")
        with self.assertRaises(nsbox.ServerGone):
            sbx.run_code("print('once')", on_stdout=print)
        self.assertEqual(len(flaky.requests("POST", "/exec")), 2)
        self.assertEqual(other.requests("POST", "/exec"), [])

    def test_a_node_that_never_answers_ends_by_the_client_deadline(self):
        hung = self.node("hung", 0)
        hung.create_status = 0
        with self.assertRaises(nsbox.RequestTimeout) as cm:
            nsbox.Sandbox.create(url=[hung.url], request_timeout=0.3)
        self.assertTrue(cm.exception.request_sent)

    def test_a_one_shot_run_moves_on_only_when_it_cannot_have_started(self):
        full, ok = self.node("full", 0), self.node("ok", 5)
        full.create_status = 429
        r = nsbox.Sandbox.run(cmd="echo ran", url=[full.url, ok.url])
        self.assertEqual(r.stdout, "ran\n")
        self.assertEqual([len(n.requests("POST", "/v1/run")) for n in (full, ok)], [1, 1])


if __name__ == "__main__":
    unittest.main()
