# tests/serve/harness.py: a private `nsbox serve`, an HTTP client for its socket and port, and the leak footprint.
"""What the service tests share.

Server starts `nsbox serve` on a socket and a state directory inside a temp directory of its own (the "root"), with
optional TCP and a token file, and stops it by a signal. Api speaks HTTP/1.1 to it over the Unix socket or TCP.
Footprint is what a server and its sandboxes hold on the host: their processes (found by the root's path in their
command line, environment, open files or bound Unix sockets, and every descendant of those and of the server), the
nsbox cgroups those processes are in, the mounts under the root and the state directory's entries. A leak check
compares two footprints: whatever the earlier one held must be gone.
"""

import http.client
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NSBOX = os.environ.get("NSBOX_BIN", os.path.join(REPO, "build", "src", "nsbox"))
REQUEST_TIMEOUT_S = 60
START_DEADLINE_S = 20


def wait_for(predicate, deadline_s, step_s=0.05):
    """Polls predicate until it returns a true value or deadline_s passes; returns its last value."""
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value or time.monotonic() >= end:
            return value
        time.sleep(step_s)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def content_type(self):
        return self.headers.get("content-type", "")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise AssertionError(f"HTTP {self.status}: the body is not JSON ({e}): {self.body[:300]!r}") from None

    def __repr__(self):
        return f"HTTP {self.status} {self.content_type} {self.body[:400]!r}"


class Api:
    """One client: the Unix socket (identity = our uid) or TCP with a bearer token (identity = the token's name)."""

    def __init__(self, socket_path=None, port=None, token=None, timeout=REQUEST_TIMEOUT_S):
        self.socket_path, self.port, self.token, self.timeout = socket_path, port, token, timeout

    def connection(self):
        if self.socket_path:
            return UnixHTTPConnection(self.socket_path, self.timeout)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def headers(self, extra=None):
        h = {"Connection": "close"}
        if self.token is not None:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, headers=None, raw=None):
        """body: a JSON value; raw: bytes sent as they are. Returns a Response with the whole body read."""
        extra = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            extra.setdefault("Content-Type", "application/json")
        elif raw is not None:
            extra.setdefault("Content-Type", "application/octet-stream")
        conn = self.connection()
        try:
            try:
                conn.request(method, path, body=data, headers=self.headers(extra))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may answer (413) and close before it read the whole body
            resp = conn.getresponse()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def stream(self, method, path, body, headers=None):
        """Sends an exec/run body and returns (Response without body, the decoded NDJSON lines)."""
        conn = self.connection()
        try:
            conn.request(method, path, body=json.dumps(body).encode(),
                         headers=self.headers(dict({"Content-Type": "application/json"}, **(headers or {}))))
            resp = conn.getresponse()
            head = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, b"")
            if resp.status != 200:
                head.body = resp.read()
                return head, []
            lines = []
            while True:
                line = resp.readline()
                if not line:
                    break
                if line.strip():
                    try:
                        lines.append(json.loads(line))
                    except ValueError:
                        raise AssertionError(f"a stream line is not JSON: {line[:300]!r}") from None
            return head, lines
        finally:
            conn.close()

    # Shorthands that return the decoded JSON and assert the status.
    def call(self, method, path, body=None, expect=200, **kw):
        r = self.request(method, path, body, **kw)
        if r.status != expect:
            raise AssertionError(f"{method} {path}: expected HTTP {expect}, got {r!r}")
        return r.json() if r.body else None

    def create(self, body=None, expect=201):
        return self.call("POST", "/v1/sandboxes", body if body is not None else {}, expect=expect)

    def exec(self, sandbox_id, body, expect=200):
        return self.call("POST", f"/v1/sandboxes/{sandbox_id}/exec", body, expect=expect)

    def delete(self, sandbox_id):
        return self.request("DELETE", f"/v1/sandboxes/{sandbox_id}")


def files_path(sandbox_id, path, **query):
    from urllib.parse import urlencode
    return f"/v1/sandboxes/{sandbox_id}/files?" + urlencode(dict({"path": path}, **query))


class Server:
    """A private `nsbox serve`. root holds api.sock, state/, tokens and serve.log."""

    def __init__(self, args=(), tokens=None, tcp=False, root=None, nofile=None):
        self.root = root or tempfile.mkdtemp(prefix="nsbox-serve-test.")
        os.chmod(self.root, 0o755)  # another uid must reach the socket (the wrong-uid test)
        self.socket_path = os.path.join(self.root, "api.sock")
        self.state_dir = os.path.join(self.root, "state")
        self.log_path = os.path.join(self.root, "serve.log")
        self.token_file = os.path.join(self.root, "tokens")
        self.extra_args = list(args)
        self.nofile = nofile  # (soft, hard) RLIMIT_NOFILE to start the server with
        self.port = free_port() if (tcp or tokens is not None) else None
        if tokens is not None:
            with open(self.token_file, "w") as f:
                f.write(tokens if isinstance(tokens, str) else "".join(f"{n}:{t}\n" for n, t in tokens.items()))
            os.chmod(self.token_file, 0o600)
        self.proc = None

    def argv(self):
        argv = [NSBOX, "serve", "--socket", self.socket_path, "--state-dir", self.state_dir]
        if self.port:
            argv += ["--listen", f"127.0.0.1:{self.port}"]
            if os.path.exists(self.token_file):
                argv += ["--token-file", self.token_file]
        return argv + self.extra_args

    def start(self):
        log = open(self.log_path, "ab")
        nofile = self.nofile
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     start_new_session=True,
                                     preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile))
                                     if nofile else None)
        log.close()

        def up():
            if self.proc.poll() is not None:
                return "exited"
            if not os.path.exists(self.socket_path):
                return None
            try:
                return "up" if self.api().request("GET", "/v1/healthz").status == 200 else None
            except OSError:
                return None

        state = wait_for(up, START_DEADLINE_S)
        if state != "up":
            rc = self.proc.poll()
            if rc is None:
                self.proc.kill()
                self.proc.wait()
            raise AssertionError(f"nsbox serve did not come up ({'exit ' + str(rc) if rc is not None else 'no answer'}"
                                 f" in {START_DEADLINE_S}s): {self.log_tail()}")
        return self

    def api(self, token=None, tcp=False, timeout=REQUEST_TIMEOUT_S):
        if tcp or token is not None:
            return Api(port=self.port, token=token, timeout=timeout)
        return Api(socket_path=self.socket_path, timeout=timeout)

    def log_tail(self, lines=6):
        try:
            text = open(self.log_path, errors="replace").read().strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self, sig=signal.SIGTERM, deadline_s=30):
        """Sends sig and waits; returns the exit code (None if it did not end, then it is killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(deadline_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def footprint(self):
        return Footprint.of(self)

    def remove(self):
        """Last resort after a test: kill what is left and remove the root (a leak check has already reported)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        fp = Footprint.of(self)
        victims = {pid for pid, _start in fp.procs}
        for group in fp.cgroups:  # a frozen group's processes die only once thawed
            for dirpath, _dirs, _files in os.walk(group, topdown=False):
                if os.path.exists(os.path.join(dirpath, "freezer.state")):
                    try:
                        with open(os.path.join(dirpath, "freezer.state"), "w") as f:
                            f.write("THAWED")
                    except OSError:
                        pass
                victims |= {int(p) for p in (_read(os.path.join(dirpath, "cgroup.procs")) or "").split()}
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        wait_for(lambda: not still_there(fp, self, check_entries=False), 5)
        for group in fp.cgroups:
            for dirpath, _dirs, _files in os.walk(group, topdown=False):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
        for mount in sorted(fp.mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def _read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def proc_table():
    """pid -> (ppid, start time, state) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _read(f"/proc/{name}/stat")
        if not stat:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(name)] = (int(fields[1]), int(fields[19]), fields[0])
    return table


def _cgroup_dirs(pid):
    text = _read(f"/proc/{pid}/cgroup") or ""
    dirs = set()
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or "nsbox" not in parts[2]:
            continue
        controllers, path = parts[1], parts[2]
        if controllers == "":
            base = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
        elif controllers.startswith("name="):
            base = "/sys/fs/cgroup/" + controllers[len("name="):]
        else:
            base = "/sys/fs/cgroup/" + controllers
        dirs.add(base + path)
    return dirs


def _groups_named_for(pids):
    """v1 groups are nsbox-<supervisor pid>-... in each hierarchy's root."""
    found = set()
    prefixes = tuple(f"nsbox-{pid}-" for pid in pids)
    if not prefixes:
        return found
    for hierarchy in os.listdir("/sys/fs/cgroup"):
        d = os.path.join("/sys/fs/cgroup", hierarchy)
        if os.path.islink(d) or not os.path.isdir(d):
            continue
        try:
            for e in os.listdir(d):
                if e.startswith(prefixes):
                    found.add(os.path.join(d, e))
        except OSError:
            pass
    return found


class Footprint:
    def __init__(self):
        self.procs = {}  # (pid, start time) -> "cmdline"
        self.cgroups = set()
        self.mounts = set()
        self.entries = set()  # names in the state directory
        self.socket = False

    @staticmethod
    def of(server):
        fp = Footprint()
        root = server.root
        server_pid = server.proc.pid if server.proc and server.proc.poll() is None else None
        me = os.getpid()
        table = proc_table()
        inodes = set()
        for line in (_read("/proc/net/unix") or "").splitlines()[1:]:
            cols = line.split()
            if len(cols) >= 8 and cols[7].startswith(root):
                inodes.add(f"socket:[{cols[6]}]")
        marked = set()
        needle = root.encode()
        for pid in table:
            if pid in (me, server_pid):
                continue
            if needle in (_read(f"/proc/{pid}/cmdline", "rb") or b"") or \
                    needle in (_read(f"/proc/{pid}/environ", "rb") or b""):
                marked.add(pid)
                continue
            links = []
            try:
                links.append(os.readlink(f"/proc/{pid}/cwd"))
                fd_dir = f"/proc/{pid}/fd"
                links += [os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir)]
            except OSError:
                pass
            if any(link.startswith(root) or link in inodes for link in links):
                marked.add(pid)

        def owned(pid):
            seen = set()
            while pid in table and pid not in seen:
                seen.add(pid)
                if pid == me:
                    return False  # one of the test's own helpers (a client child), not the server's
                if pid in marked or pid == server_pid:
                    return True
                pid = table[pid][0]
            return False

        for pid, (_ppid, start, _state) in table.items():
            if pid not in (me, server_pid) and owned(pid):
                cmd = (_read(f"/proc/{pid}/cmdline", "rb") or b"").replace(b"\0", b" ").decode(errors="replace")
                fp.procs[(pid, start)] = cmd.strip() or f"[{_read(f'/proc/{pid}/comm') or '?'}]".replace("\n", "")
        pids = [p for p, _ in fp.procs] + ([server_pid] if server_pid else [])
        for pid in pids:
            fp.cgroups |= _cgroup_dirs(pid)
        fp.cgroups |= _groups_named_for(pids)
        for line in (_read("/proc/self/mountinfo") or "").splitlines():
            cols = line.split()
            if len(cols) > 4 and cols[4].startswith(root):
                fp.mounts.add(cols[4])
        try:
            fp.entries = set(os.listdir(server.state_dir))
        except OSError:
            pass
        fp.socket = os.path.exists(server.socket_path)
        return fp

    def merge(self, other):
        self.procs.update(other.procs)
        self.cgroups |= other.cgroups
        self.mounts |= other.mounts
        self.entries |= other.entries
        return self


def still_there(before, server, base=None, check_entries=True):
    """What of `before` (minus `base`, what may stay) is still on the host, as a list of lines."""
    base = base or Footprint()
    now = Footprint.of(server)
    table = proc_table()
    left = []
    for (pid, start), cmd in before.procs.items():
        if (pid, start) in base.procs:
            continue
        info = table.get(pid)
        if not info or info[1] != start:
            continue
        if info[2] == "Z" and info[0] == 1:
            continue  # a zombie of pid 1 holds nothing but its table entry (this host's init reaps late)
        left.append(f"process {pid} ({info[2]}): {cmd[:160]}")
    for (pid, start), cmd in now.procs.items():
        if (pid, start) not in base.procs and (pid, start) not in before.procs:
            left.append(f"new process {pid}: {cmd[:160]}")
    for group in sorted((before.cgroups | now.cgroups) - base.cgroups):
        if os.path.isdir(group):
            left.append(f"cgroup {group}")
    for mount in sorted((before.mounts | now.mounts) - base.mounts):
        if mount in now.mounts:
            left.append(f"mount {mount}")
    if check_entries:
        for entry in sorted(now.entries - base.entries):
            left.append(f"state dir entry {os.path.join(server.state_dir, entry)}")
    return left


def wait_clean(before, server, base=None, deadline_s=15, check_entries=True):
    """Polls until nothing of `before` beyond `base` is left; returns what is left at the deadline."""
    last = []

    def clean():
        nonlocal last
        last = still_there(before, server, base, check_entries)
        return not last

    wait_for(clean, deadline_s, 0.1)
    return last
