# tests/python-client/test_agents.py: the Anthropic- and OpenAI-shaped loops against the scripted model, with a
# scripted node that runs the code for real (the real-server variants are in test_real_server.py).
import os
import sys
import unittest

import support
from fakenode import FakeNode
from scripted_model import PRIME_PROMPT, ScriptedModel

sys.path.insert(0, os.path.join(support.CLIENT, "examples"))
import agent_loops  # noqa: E402


class AgentLoopsOnAScriptedNodeTest(unittest.TestCase):
    def setUp(self):
        self.node = FakeNode("g")
        self.addCleanup(self.node.stop)
        self.model = ScriptedModel()
        self.addCleanup(self.model.stop)

    def check(self, shape):
        text = agent_loops.answer(PRIME_PROMPT, self.model.url, shape=shape, url=self.node.url)
        self.assertEqual(self.model.problems, [])
        self.assertEqual(text, "The 1000th prime is 7919.")
        self.assertEqual(len(self.model.tool_results), 1)
        self.assertTrue(self.model.tool_results[0].startswith("exit_code: 0\nstdout:\n7919\n"))
        self.assertEqual(len(self.node.requests("POST", "/exec")), 1)
        self.assertEqual(self.node.sandboxes, {})  # terminated in finally

    def test_anthropic_shaped_loop(self):
        self.check("anthropic")

    def test_openai_shaped_loop(self):
        self.check("openai")

    def test_the_sandbox_goes_even_when_the_loop_fails(self):
        with self.assertRaises(Exception):
            agent_loops.answer("a prompt with no script", self.model.url, url=self.node.url)
        self.assertEqual(len(self.node.requests("DELETE")), 1)
        self.assertEqual(self.node.sandboxes, {})


if __name__ == "__main__":
    unittest.main()
