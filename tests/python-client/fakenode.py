# tests/python-client/fakenode.py: a scripted nsbox serve for the client's unit tests (http.server on a Unix socket).
"""FakeNode answers the docs/api.md routes from memory and runs exec requests for real (sh -c, argv or
python3 -c) in a private workspace directory, so README examples and agent loops get true output. Tests
script it: `capacity`, `create_status` (with `create_error_code`), `token`, `exec_mode` ("run", "reset",
"silent"), `stream_script` (a function writing NDJSON lines), `ignore_stream`, `cut_answers`, `override` (a
function (handler, request) that answers a request itself and returns True, or leaves it to the node), and read
back `seen` (every request). As nsbox serve does, a streamed REPL cell ("repl": true) is answered with its result
line alone."""

import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _quiet_errors(server_class):
    """A client that went away mid-answer is part of what the tests script, not a fault to print."""
    class Quiet(server_class):
        daemon_threads = True

        def handle_error(self, request, client_address):
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                super().handle_error(request, client_address)
    return Quiet


@_quiet_errors
class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    pass


class _Request:
    def __init__(self, method, path, query, headers, body):
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "%s %s" % (self.method, self.path)


def result(status="ok", exit_code=0, stdout="", stderr="", reason="", signal=0, wall_ms=5):
    return {"status": status, "exit_code": exit_code, "signal": signal, "reason": reason, "stdout": stdout,
            "stderr": stderr, "stdout_bytes": len(stdout.encode()), "stderr_bytes": len(stderr.encode()),
            "stdout_truncated": False, "stderr_truncated": False, "wall_ms": wall_ms, "cpu_ms": 1,
            "peak_memory_bytes": 1 << 20, "denied_syscalls": [], "denied_hosts": [], "changed_files": []}


class FakeNode:
    def __init__(self, name="node", tcp=False, running=0, max_sandboxes=100):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="nsbox-py-fake-%s-" % name)
        self.capacity = {"sandboxes": {"running": running, "max": max_sandboxes, "per_client_max": max_sandboxes},
                         "pool": {}, "memory_bytes": {"budget": 1 << 33, "committed": 0, "free": 1 << 33},
                         "pids": {"budget": 4096, "committed": 0, "free": 4096}}
        self.create_status = 201
        self.create_error_code = "setup_failed"  # the code of a create_status other than 201 and 429
        self.token = None
        self.exec_mode = "run"
        self.stream_script = None
        self.ignore_stream = False  # answer the whole result as JSON even when a stream is asked for
        self.cut_answers = False  # a 2xx answer promises its whole Content-Length, sends half and closes
        self.cut_headers = False  # a 2xx answer stops in its headers (before Content-Length) and closes
        self.override = None  # (handler, request) -> True when it answered the request itself
        self.seen = []
        self.sandboxes = {}
        self.lock = threading.Lock()
        self.release = threading.Event()  # set at stop: ends the "silent" answers
        self._counter = 0
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                node._handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        if tcp:
            self.server = _quiet_errors(ThreadingHTTPServer)(("127.0.0.1", 0), Handler)
            self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        else:
            self.socket = os.path.join(self.dir, "api.sock")
            self.server = _UnixHTTPServer(self.socket, Handler)
            self.url = "unix://" + self.socket
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        for sbx in self.sandboxes.values():
            shutil.rmtree(sbx["_dir"], ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def requests(self, method=None, suffix=""):
        return [r for r in self.seen if (method is None or r.method == method) and r.path.endswith(suffix)]

    # The answers.
    def _send(self, h, status, obj=None, raw=None, ctype="application/json"):
        data = raw if raw is not None else (b"" if obj is None else json.dumps(obj).encode())
        if self.cut_headers and 200 <= status <= 299:
            h.wfile.write(b"HTTP/1.1 %d OK\r\nConnection: close\r\n" % status)
            h.wfile.flush()
            h.connection.shutdown(socket.SHUT_WR)
            h.close_connection = True
            return
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.send_header("Connection", "close")
        h.end_headers()
        if self.cut_answers and 200 <= status <= 299 and data:
            h.wfile.write(data[:len(data) // 2])
            h.wfile.flush()
            h.connection.shutdown(socket.SHUT_WR)
        else:
            h.wfile.write(data)
        h.close_connection = True

    def _error(self, h, status, code, message, **extra):
        body = {"error": {"code": code, "message": message}}
        body.update(extra)
        self._send(h, status, body)

    def _handle(self, h):
        parsed = urllib.parse.urlsplit(h.path)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        req = _Request(h.command, parsed.path, query, dict(h.headers), body)
        with self.lock:
            self.seen.append(req)
        if self.token is not None and h.headers.get("Authorization") != "Bearer " + self.token:
            return self._error(h, 401, "unauthorized", "missing or wrong bearer token")
        if self.override is not None and self.override(h, req):
            return None
        parts = parsed.path.strip("/").split("/")
        if parsed.path == "/v1/healthz":
            return self._send(h, 200, {"status": "ok"})
        if parsed.path == "/v1/capacity":
            return self._send(h, 200, self.capacity)
        if parsed.path == "/v1/sandboxes" and h.command == "POST":
            return self._create(h, req)
        if parsed.path == "/v1/run" and h.command == "POST":
            return self._one_shot(h, req)
        if parsed.path == "/v1/sandboxes" and h.command == "GET":
            return self._send(h, 200, {"sandboxes": [self._public(s) for s in self.sandboxes.values()]})
        if len(parts) >= 3 and parts[:2] == ["v1", "sandboxes"]:
            sbx = self.sandboxes.get(parts[2])
            if sbx is None:
                return self._error(h, 404, "not_found", "no sandbox %s" % parts[2])
            rest = parts[3:]
            if not rest and h.command == "GET":
                return self._send(h, 200, self._public(sbx))
            if not rest and h.command == "DELETE":
                with self.lock:
                    self.sandboxes.pop(parts[2], None)
                shutil.rmtree(sbx["_dir"], ignore_errors=True)
                return self._send(h, 204)
            if rest == ["exec"] and h.command == "POST":
                return self._exec(h, req, sbx)
            if rest == ["files"]:
                return self._files(h, req, sbx)
        return self._error(h, 404, "not_found", "no route %s %s" % (h.command, parsed.path))

    def _one_shot(self, h, req):
        if self.create_status == 429:
            return self._error(h, 429, "too_many_requests", "%s is full" % self.name, capacity=self.capacity)
        spec = req.json()
        workdir = tempfile.mkdtemp(prefix="run-", dir=self.dir)
        try:
            res = self._run({"_dir": workdir, "_env": {}}, spec)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        self._send(h, 200, res)

    def _public(self, sbx):
        return {k: v for k, v in sbx.items() if not k.startswith("_")}

    def _create(self, h, req):
        if self.create_status == 0:  # never answers (until the node stops)
            self.release.wait(30)
            return None
        if self.create_status == 429:
            return self._error(h, 429, "too_many_requests", "%s is full" % self.name, capacity=self.capacity)
        if self.create_status != 201:
            return self._error(h, self.create_status, self.create_error_code, "%s cannot make sandboxes" % self.name)
        try:
            spec = req.json() if req.body else {}
        except ValueError:
            return self._error(h, 400, "bad_request", "the body is not JSON")
        unknown = set(spec) - {"template", "network", "limits", "env", "idle_timeout", "max_lifetime", "labels"}
        if unknown:
            return self._error(h, 400, "bad_request", "unknown field %s" % sorted(unknown)[0])
        for key in ("idle_timeout", "max_lifetime"):
            if key in spec and not isinstance(spec[key], (int, float)):
                return self._error(h, 400, "bad_request", "%s must be a number of seconds" % key)
        with self.lock:
            self._counter += 1
            sid = "sb-%s%06d" % (self.name[:1].encode().hex(), self._counter)
            sid = (sid + "0" * 27)[:27]
        workdir = tempfile.mkdtemp(prefix="ws-", dir=self.dir)
        sbx = {"id": sid, "template": spec.get("template", "host"), "network": spec.get("network", "none"),
               "limits": spec.get("limits", {}), "labels": spec.get("labels", {}), "created_at_ms": 1,
               "idle_timeout": spec.get("idle_timeout", 600), "max_lifetime": spec.get("max_lifetime", 3600),
               "from_pool": False, "state": "running", "_dir": workdir, "_env": spec.get("env", {})}
        with self.lock:
            self.sandboxes[sid] = sbx
        self._send(h, 201, self._public(sbx))

    def _workspace_path(self, sbx, path):
        if path is None or path == "":
            return None
        rel = path[len("/workspace"):].lstrip("/") if path == "/workspace" or path.startswith("/workspace/") \
            else path
        if rel.startswith("/") or ".." in rel.split("/"):
            return None
        return os.path.join(sbx["_dir"], rel) if rel else sbx["_dir"]

    def _files(self, h, req, sbx):
        target = self._workspace_path(sbx, req.query.get("path"))
        if target is None:
            return self._error(h, 400, "bad_request", "path %r is outside /workspace" % req.query.get("path"))
        shown = "/workspace" if target == sbx["_dir"] else "/workspace/" + os.path.relpath(target, sbx["_dir"])
        if h.command == "PUT":
            if len(req.body) > 1 << 20:
                return self._error(h, 413, "payload_too_large", "the file is over the 1 MiB cap")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(req.body)
            return self._send(h, 200, {"path": shown, "size": len(req.body)})
        if h.command == "GET" and req.query.get("list") == "true":
            if not os.path.isdir(target):
                return self._error(h, 404, "not_found", "no directory %s" % shown)
            entries = []
            for name in sorted(os.listdir(target)):
                full = os.path.join(target, name)
                kind = "symlink" if os.path.islink(full) else "dir" if os.path.isdir(full) else "file"
                entries.append({"name": name, "path": shown.rstrip("/") + "/" + name, "type": kind,
                                "size": os.lstat(full).st_size})
            return self._send(h, 200, {"entries": entries})
        if h.command == "GET":
            if not os.path.isfile(target):
                return self._error(h, 404, "not_found", "no file %s" % shown)
            with open(target, "rb") as f:
                return self._send(h, 200, raw=f.read(), ctype="application/octet-stream")
        if h.command == "DELETE":
            if not os.path.lexists(target):
                return self._error(h, 404, "not_found", "no file %s" % shown)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            else:
                os.remove(target)
            return self._send(h, 204)
        return self._error(h, 404, "not_found", "no route")

    def _exec(self, h, req, sbx):
        if self.exec_mode == "reset":
            h.connection.shutdown(socket.SHUT_RDWR)
            h.close_connection = True
            return None
        if self.exec_mode == "silent":
            self.release.wait(30)
            return None
        try:
            spec = req.json()
        except ValueError:
            return self._error(h, 400, "bad_request", "the body is not JSON")
        given = [k for k in ("argv", "cmd", "code") if k in spec]
        if len(given) != 1:
            return self._error(h, 400, "bad_request", "exactly one of argv, cmd or language+code")
        stream = req.query.get("stream") == "true" or "application/x-ndjson" in h.headers.get("Accept", "")
        stream = stream and not self.ignore_stream
        if stream and self.stream_script is not None:
            return self._stream(h, lambda write: self.stream_script(write, spec))
        res = self._run(sbx, spec)
        if not stream:
            return self._send(h, 200, res)

        def lines(write):
            if res["stdout"] and not spec.get("repl"):
                write({"type": "stdout", "data": res["stdout"]})
            if res["stderr"] and not spec.get("repl"):
                write({"type": "stderr", "data": res["stderr"]})
            write({"type": "result", "result": res})
        return self._stream(h, lines)

    def _stream(self, h, script):
        """Chunked NDJSON: each line is sent (and flushed) when the script writes it."""
        h.send_response(200)
        h.send_header("Content-Type", "application/x-ndjson")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")
        h.end_headers()

        def write(obj):
            data = (json.dumps(obj) + "\n").encode() if not isinstance(obj, bytes) else obj
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()
        script(write)
        h.wfile.write(b"0\r\n\r\n")
        h.close_connection = True

    def _run(self, sbx, spec):
        # The code runs on the host: its /workspace is the sandbox's directory here.
        here = lambda text: text.replace("/workspace", sbx["_dir"])  # noqa: E731
        if "argv" in spec:
            argv = [here(a) for a in spec["argv"]]
        elif "cmd" in spec:
            argv = ["/bin/sh", "-c", here(spec["cmd"])]
        else:
            argv = ["python3", "-c", here(spec["code"])]
        env = dict(os.environ, PATH="/usr/bin:/bin", **sbx["_env"], **spec.get("env", {}))
        cwd = self._workspace_path(sbx, spec.get("cwd", "")) or sbx["_dir"]
        start = time.monotonic()
        try:
            p = subprocess.run(argv, input=spec.get("stdin", ""), capture_output=True, text=True, cwd=cwd, env=env,
                               timeout=spec.get("timeout", 60))
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return result("timeout", None, out, "", reason="wall time limit (%ss) reached" % spec.get("timeout"))
        wall = int((time.monotonic() - start) * 1000)
        if p.returncode < 0:
            return result("signal", None, p.stdout, p.stderr, reason="killed by signal", signal=-p.returncode,
                          wall_ms=wall)
        status = "ok" if p.returncode == 0 else "exit"
        return result(status, p.returncode, p.stdout, p.stderr, wall_ms=wall)
