# tests/python-client/test_readme.py: every python example of clients/python/README.md runs, and prints what its
# `# prints:` comments say: against a scripted node (which runs the code for real), and against a real server.
import os
import re
import subprocess
import tempfile
import unittest

import support
from fakenode import FakeNode

README = os.path.join(support.CLIENT, "README.md")
REAL_ONLY = "<!-- needs a real server"


def examples():
    """[(first line number, code, needs a real server)] of the README's ```python blocks."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    out = []
    for m in re.finditer(r"```python\n(.*?)```", text, re.S):
        before = text[:m.start()].rstrip().splitlines()
        out.append((text[:m.start()].count("\n") + 2, m.group(1), bool(before) and before[-1].startswith(REAL_ONLY)))
    return out


def run_example(test, code, url):
    with tempfile.TemporaryDirectory() as cwd:
        env = dict(os.environ, NSBOX_URL=url, PYTHONPATH=support.CLIENT)
        env.pop("NSBOX_TOKEN", None)
        p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, cwd=cwd, env=env,
                           timeout=120)
    test.assertEqual(p.returncode, 0, p.stdout + p.stderr)
    for expected in re.findall(r"# prints: (.*)$", code, re.M):
        test.assertIn(expected.strip(), p.stdout)
    return p.stdout


class ReadmeExamplesTest(unittest.TestCase):
    def test_the_readme_has_examples_with_expected_output(self):
        found = examples()
        self.assertGreaterEqual(len(found), 6)
        self.assertTrue(all("# prints:" in code for _, code, _ in found))
        self.assertTrue(any(real for _, _, real in found))

    def test_each_example_against_a_scripted_node(self):
        nodes = [FakeNode("x"), FakeNode("y", running=5)]
        try:
            for line, code, real_only in examples():
                if real_only:
                    continue
                with self.subTest(readme_line=line):
                    url = ",".join(n.url for n in nodes) if "NSBOX_URL=" in code else nodes[0].url
                    run_example(self, code, url)
                    self.assertEqual([s for n in nodes for s in n.sandboxes], [], "the example left a sandbox")
        finally:
            for n in nodes:
                n.stop()

    def test_each_example_against_a_real_server(self):
        server = support.RealServer()
        if server.skip_reason:
            self.skipTest(server.skip_reason)
        try:
            for line, code, _ in examples():
                with self.subTest(readme_line=line):
                    run_example(self, code, server.url)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
