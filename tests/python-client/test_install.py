# tests/python-client/test_install.py: `pip install ./clients/python` works offline (no index, no build isolation).
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import support


class InstallTest(unittest.TestCase):
    def test_pip_installs_the_package_offline_into_a_target(self):
        work = tempfile.mkdtemp(prefix="nsbox-py-install-")
        self.addCleanup(shutil.rmtree, work, True)
        src = os.path.join(work, "src")  # a copy: an in-tree build would leave build/ and egg-info behind
        shutil.copytree(support.CLIENT, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        target = os.path.join(work, "site")
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONPATH="")
        p = subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "--break-system-packages", "--no-deps",
                            "--no-build-isolation", "--no-index", "--target", target, src],
                           capture_output=True, text=True, env=env, cwd=work, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        code = ("import nsbox, sys; print(nsbox.__file__); print(nsbox.__version__); "
                "print(sorted(set(nsbox.__all__) - set(dir(nsbox))))")
        q = subprocess.run(["/usr/bin/python3", "-I", "-c", "import sys; sys.path.insert(0, %r); %s" % (target, code)],
                           capture_output=True, text=True, cwd=work, timeout=60)
        self.assertEqual(q.returncode, 0, q.stderr)
        where, version, missing = q.stdout.splitlines()
        self.assertTrue(where.startswith(target + "/nsbox/"), where)
        self.assertEqual((version, missing), ("0.1.0", "[]"))
        self.assertTrue(os.path.isdir(os.path.join(target, "nsbox-0.1.0.dist-info")))

    def test_the_package_imports_nothing_outside_the_standard_library(self):
        code = ("import sys; before = set(sys.modules); import nsbox; "
                "print(sorted(m for m in set(sys.modules) - before if not m.startswith('nsbox') and "
                "m.split('.')[0] not in sys.stdlib_module_names))")
        q = subprocess.run(["/usr/bin/python3", "-I", "-c", "import sys; sys.path.insert(0, %r); %s" % (
            support.CLIENT, code)], capture_output=True, text=True, timeout=60)
        self.assertEqual((q.returncode, q.stdout.strip()), (0, "[]"), q.stderr)


if __name__ == "__main__":
    unittest.main()
