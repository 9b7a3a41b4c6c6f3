# tests/python-client/support.py: what the test modules share: the package on sys.path, a real nsbox serve.
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLIENT = os.path.join(REPO, "clients", "python")
if CLIENT not in sys.path:
    sys.path.insert(0, CLIENT)

import nsbox  # noqa: E402

PRIME_CODE = """def nth_prime(n):
    count, candidate = 0, 1
    while count < n:
        candidate += 1
        if all(candidate % d for d in range(2, int(candidate ** 0.5) + 1)):
            count += 1
    return candidate
print(nth_prime(1000))
"""


def nsbox_bin():
    return os.environ.get("NSBOX_BIN") or os.path.join(REPO, "build", "src", "nsbox")


class RealServer:
    """`$NSBOX_BIN serve --socket S --state-dir D` on a private socket, as clients/go's startServe runs it.
    `skip_reason` is set (and nothing started) when this nsbox has no serve command."""

    def __init__(self, *extra_args):
        self.skip_reason = None
        self.proc = None
        self.left = []
        binary = nsbox_bin()
        try:
            probe = subprocess.run([binary, "serve", "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   timeout=30)
            if probe.returncode != 0:
                tail = probe.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
                self.skip_reason = "this nsbox (%s) has no serve command: exit %d %s" % (
                    binary, probe.returncode, tail[0])
        except (OSError, subprocess.TimeoutExpired) as e:
            self.skip_reason = "this nsbox (%s) has no serve command: %s" % (binary, e)
        if self.skip_reason:
            return
        self.dir = tempfile.mkdtemp(prefix="nsbox-py-serve-")
        self.socket = os.path.join(self.dir, "api.sock")
        self.state = os.path.join(self.dir, "state")
        self.log = open(os.path.join(self.dir, "serve.log"), "wb")
        self.proc = subprocess.Popen([binary, "serve", "--socket", self.socket, "--state-dir", self.state,
                                      *extra_args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = "unix://" + self.socket
        t = nsbox.Transport(self.url, request_timeout=2)
        for _ in range(100):
            try:
                if t.request("GET", "/v1/healthz") is not None:
                    return
            except nsbox.NsboxError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("nsbox serve did not answer on %s: %s" % (self.socket, self.log_tail()))

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "serve.log"), "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def sandbox_processes(self):
        """{pid: (start time, [(controller, cgroup)])} of the processes that make up the server's sandboxes: those
        whose command line or environment names the state dir (a session's supervisor), every process below
        them, and every process below the server."""
        state = os.path.realpath(self.state).encode()
        table = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    names = state in f.read()
                with open("/proc/%s/environ" % entry, "rb") as f:
                    names = names or state in f.read()
                with open("/proc/%s/cgroup" % entry) as f:
                    groups = [tuple(line.strip().split(":", 2)[1:]) for line in f if line.strip()]
            except OSError:
                continue
            table[int(entry)] = (int(fields[1]), fields[19], names, groups)
        # The cgroups the server itself is in are not the sandboxes'.
        own = set(table[self.proc.pid][3]) if self.proc.pid in table else set()
        for pid, row in table.items():
            table[pid] = row[:3] + ([g for g in row[3] if g[1] != "/" and g not in own],)
        roots = {pid for pid, row in table.items() if row[2] and pid != self.proc.pid} | {self.proc.pid}
        out, todo = {}, list(roots)
        while todo:
            pid = todo.pop()
            for child, row in table.items():
                if row[0] == pid and child not in out:
                    out[child] = (row[1], row[3])
                    todo.append(child)
            if pid != self.proc.pid and pid in table:
                out[pid] = (table[pid][1], table[pid][3])
        return out

    @staticmethod
    def still_there(snapshot):
        """What of a sandbox_processes() snapshot is left: its processes still alive (same start time) and its
        cgroups still holding a process (a cgroup directory itself may linger until the kernel frees it)."""
        left = []
        for pid, (start, groups) in snapshot.items():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if fields[19] == start and fields[0] != "Z":  # a zombie holds nothing; its reaper may be slow
                    left.append("process %d" % pid)
            except OSError:
                pass
            for controller, path in groups:
                name = controller.split(",")[0] if controller else "unified"
                name = controller if name in ("cpu", "cpuacct", "net_cls", "net_prio") else name
                procs = os.path.join("/sys/fs/cgroup", name.replace("name=", ""), path.lstrip("/"), "cgroup.procs")
                try:
                    with open(procs) as f:
                        if f.read().strip():
                            left.append("cgroup %s:%s" % (controller, path))
                except OSError:
                    pass
        return sorted(set(left))

    def stop(self, sig=signal.SIGTERM):
        if self.proc is None:
            return
        snapshot = self.sandbox_processes()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        end = time.monotonic() + 30  # the sessions end when their server is gone: wait for that, then look
        while self.still_there(snapshot) and time.monotonic() < end:
            time.sleep(0.1)
        self.left = self.still_there(snapshot)
        self.log.close()
        if not mounts_under(self.dir):  # never remove through a mount a leaking server left behind
            shutil.rmtree(self.dir, ignore_errors=True)


def mounts_under(path):
    """The mount points at or below `path` (from /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    return [p for p in points if p == path or p.startswith(path + "/")]


def decode(data):
    return json.loads(data.decode("utf-8"))
