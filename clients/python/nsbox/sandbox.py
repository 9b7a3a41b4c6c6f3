# nsbox/sandbox.py: Sandbox (create, connect, list, run, exec, run_code, terminate), its files, ExecResult.
import urllib.parse

from .cluster import try_each
from .errors import NotFound, NsboxError, ServerGone, from_stream_error
from .transport import DEFAULT_EXEC_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S, EXEC_GRACE_S, Transport, endpoint_urls

# A compiled language's compile step runs before its program, under its own time-out: compile_timeout, or the
# language table's (rootfs/languages.json: 30 s for c, 60 s for the others). The client waits the longest of
# those for any language but the interpreted ones, a bound that is never too short.
DEFAULT_COMPILE_TIMEOUT_S = 60.0
INTERPRETED_LANGUAGES = frozenset(("python", "python3", "bash", "sh", "node", "javascript"))


def _transports(url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT_S):
    return [Transport(u, token=token, request_timeout=request_timeout) for u in endpoint_urls(url)]


class ExecResult:
    """One run's outcome: the server's result object (docs/result.md) as attributes; `raw` is the whole dict.
    A program's own failure (exit, timeout, oom, signal, violation) is a status here, never an exception."""

    def __init__(self, raw):
        if not isinstance(raw, dict):
            raise NsboxError("the server's result is not an object: %r" % (raw,))
        self.raw = raw
        self.status = raw.get("status")
        self.exit_code = raw.get("exit_code")
        self.signal = raw.get("signal") or 0
        self.reason = raw.get("reason") or ""
        self.stdout = raw.get("stdout") or ""
        self.stderr = raw.get("stderr") or ""
        self.stdout_bytes = raw.get("stdout_bytes") or 0
        self.stderr_bytes = raw.get("stderr_bytes") or 0
        self.stdout_truncated = bool(raw.get("stdout_truncated"))
        self.stderr_truncated = bool(raw.get("stderr_truncated"))
        self.wall_ms = raw.get("wall_ms") or 0
        self.cpu_ms = raw.get("cpu_ms") or 0
        self.peak_memory_bytes = raw.get("peak_memory_bytes") or 0
        self.denied_syscalls = raw.get("denied_syscalls") or []
        self.denied_hosts = raw.get("denied_hosts") or []
        self.changed_files = [_exact_path(f) for f in raw.get("changed_files") or []]
        self.repl = raw.get("repl")
        self.compile = raw.get("compile")  # a compiled language's compile step: status, exit_code, wall_ms...

    @property
    def ok(self):
        """True when the program exited 0."""
        return self.status == "ok"

    def __getitem__(self, key):
        return self.raw[key]

    def __repr__(self):
        return "ExecResult(status=%r, exit_code=%r, stdout=%r, stderr=%r)" % (
            self.status, self.exit_code, self.stdout[:80], self.stderr[:80])


class Listing(list):
    """A directory's entries (a list of dicts), with `truncated`: True when the server cut the listing short at its
    cap (20000 entries or 8 MiB), so some entries are missing."""

    def __init__(self, entries=(), truncated=False):
        super().__init__(entries)
        self.truncated = truncated


class Files:
    """Files under the sandbox's /workspace (paths relative to it, or absolute under it)."""

    def __init__(self, sandbox):
        self._sbx = sandbox

    def write(self, path, data):
        """Writes `data` (str as UTF-8, or bytes) to `path`, creating parents. Answers {"path", "size"}."""
        if not isinstance(data, (str, bytes, bytearray, memoryview)):
            raise TypeError("file contents are str or bytes, not %s" % type(data).__name__)
        return self._sbx._call("PUT", "/files", query={"path": path}, body=data)

    def read(self, path):
        """The bytes of `path`."""
        return self._sbx._call("GET", "/files", query={"path": path}, raw=True)

    def read_text(self, path, encoding="utf-8"):
        """The text of `path`."""
        return self.read(path).decode(encoding)

    def list(self, path="."):
        """The entries of directory `path` (default the workspace): a Listing of {"name", "path", "type", "size"};
        its `truncated` is True when the server listed only some of them."""
        answer = self._sbx._call("GET", "/files", query={"path": path, "list": "true"})
        if not isinstance(answer, dict):
            return Listing()
        return Listing((_exact_path(e) for e in answer.get("entries", [])), truncated=bool(answer.get("truncated")))

    def remove(self, path):
        """Removes `path` (a directory recursively)."""
        self._sbx._call("DELETE", "/files", query={"path": path})


def _create_body(template=None, network=None, limits=None, env=None, labels=None, idle_timeout=None,
                 max_lifetime=None):
    fields = {"template": template, "network": network, "limits": limits, "env": env, "labels": labels,
              "idle_timeout": idle_timeout, "max_lifetime": max_lifetime}
    return {k: v for k, v in fields.items() if v is not None}


def _exec_body(cmd=None, language=None, code=None, stdin=None, timeout=None, env=None, cwd=None, repl=False,
               output_limit=None, compile_timeout=None, compile_memory=None):
    if code is not None:
        body = {"language": language or "python", "code": code}
    elif isinstance(cmd, str):
        body = {"cmd": cmd}
    elif isinstance(cmd, (list, tuple)) and cmd:
        body = {"argv": [str(a) for a in cmd]}
    else:
        raise TypeError("a command is a str (run by /bin/sh -c) or a non-empty argv list")
    if timeout is None:
        timeout = DEFAULT_EXEC_TIMEOUT_S  # sent, so that the server runs under what the client waits for
    if isinstance(stdin, (bytes, bytearray)):
        try:
            stdin = bytes(stdin).decode("utf-8")
        except UnicodeDecodeError as e:
            # The API carries stdin as JSON text: write binary input as a file (files.write) and read it from there.
            raise ValueError(f"stdin must be UTF-8 text (byte {e.start} is not); write binary input with "
                             f"files.write and read the file instead") from None
    for key, value in (("stdin", stdin), ("timeout", timeout), ("env", env), ("cwd", cwd),
                       ("output_limit", output_limit), ("compile_timeout", compile_timeout),
                       ("compile_memory", compile_memory)):
        if value is not None:
            body[key] = value
    if repl:
        body["repl"] = True
    return body


def _seconds(value, default):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else default


def _deadline(body):
    """How long to wait for an exec's answer: the program's time-out (_exec_body always sends one), a compiled
    language's compile step before it (compile_timeout, else DEFAULT_COMPILE_TIMEOUT_S for any language not known
    to be interpreted), and the grace."""
    wait = _seconds(body.get("timeout"), DEFAULT_EXEC_TIMEOUT_S) + EXEC_GRACE_S
    language = body.get("language")
    if "compile_timeout" in body or (isinstance(language, str) and language.lower() not in INTERPRETED_LANGUAGES):
        wait += _seconds(body.get("compile_timeout"), DEFAULT_COMPILE_TIMEOUT_S)
    return wait


def _hand_over(result, on_stdout, on_stderr, delivered=()):
    """Gives the callbacks the result's output of each stream none of whose chunks came (a REPL cell is answered
    with its result alone, and a server may answer the whole result at once), so no output is lost."""
    for name, callback, text in (("stdout", on_stdout, result.stdout), ("stderr", on_stderr, result.stderr)):
        if callback is not None and text and name not in delivered:
            callback(text)


def _run_on(transport, path, body, on_stdout=None, on_stderr=None):
    """Sends an exec or run body, streaming (NDJSON) when a callback is given. Never retried."""
    deadline = _deadline(body)
    if on_stdout is None and on_stderr is None:
        return ExecResult(transport.request("POST", path, json_body=body, timeout=deadline))
    got, delivered = {}, set()

    def line(obj):
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind in ("stdout", "stderr"):
            delivered.add(kind)
        if kind == "stdout" and on_stdout is not None:
            on_stdout(obj.get("data", ""))
        elif kind == "stderr" and on_stderr is not None:
            on_stderr(obj.get("data", ""))
        elif kind == "result":
            got["result"] = obj.get("result")
        elif kind == "error":
            got["error"] = obj.get("error")

    answer = transport.request("POST", path, query={"stream": "true"}, json_body=body, timeout=deadline,
                               on_line=line)
    if "error" in got:
        raise from_stream_error(got["error"], transport.url)
    if "result" not in got and isinstance(answer, dict) and "status" in answer:
        got["result"] = answer  # a server that answered the whole result at once
    if "result" in got:
        result = ExecResult(got["result"])
        _hand_over(result, on_stdout, on_stderr, delivered)
        return result
    raise ServerGone("POST %s at %s: the stream ended without a result" % (path, transport.url),
                     url=transport.url)


class Sandbox:
    """A sandbox on one nsbox serve node; every call of it goes to that node."""

    def __init__(self, transport, info):
        self._transport = transport
        self.info = info
        self.id = info["id"]
        self.files = Files(self)

    @property
    def url(self):
        """The endpoint this sandbox lives on."""
        return self._transport.url

    @classmethod
    def create(cls, template=None, network=None, timeout=None, limits=None, env=None, labels=None,
               idle_timeout=None, max_lifetime=None, url=None, token=None,
               request_timeout=DEFAULT_REQUEST_TIMEOUT_S):
        """Makes a sandbox. `timeout` is its lifetime in seconds, another name of max_lifetime: give one of them,
        not both (TypeError). With several endpoints (`url` a list or comma-separated, or NSBOX_URL so), on the
        node with the most free capacity, passing on to the next when one is full or gone."""
        if max_lifetime is not None and timeout is not None:
            raise TypeError("give the sandbox's lifetime as max_lifetime or as timeout (its other name), not both")
        body = _create_body(template, network, limits, env, labels, idle_timeout,
                            max_lifetime if max_lifetime is not None else timeout)
        transport, info = try_each(_transports(url, token, request_timeout), body.get("template"),
                                   lambda t: t.request("POST", "/v1/sandboxes", json_body=body), False)
        if not isinstance(info, dict) or not isinstance(info.get("id"), str):
            raise NsboxError("POST /v1/sandboxes at %s: the answer has no id" % transport.url, url=transport.url)
        return cls(transport, info)

    @classmethod
    def connect(cls, sandbox_id, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT_S):
        """A handle on an existing sandbox; looks for it on each endpoint."""
        errors = []
        for t in _transports(url, token, request_timeout):
            try:
                return cls(t, t.request("GET", "/v1/sandboxes/" + _quote(sandbox_id)))
            except NsboxError as err:
                errors.append(err)
        other = [e for e in errors if not isinstance(e, NotFound)]
        raise other[0] if other else errors[-1]

    @classmethod
    def list(cls, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT_S):
        """The caller's sandboxes on every endpoint."""
        out = []
        for t in _transports(url, token, request_timeout):
            answer = t.request("GET", "/v1/sandboxes")
            out.extend(cls(t, s) for s in (answer or {}).get("sandboxes", []))
        return out

    @staticmethod
    def run(cmd=None, code=None, language="python", template=None, network=None, limits=None, env=None,
            stdin=None, timeout=None, cwd=None, output_limit=None, on_stdout=None, on_stderr=None, url=None,
            token=None, compile_timeout=None, compile_memory=None):
        """A one-shot run in a fresh sandbox (POST /v1/run), gone when the answer comes. Sent to another node
        only when it cannot have started there. compile_timeout (seconds) and compile_memory ("256M" or bytes):
        a compiled language's compile step's own limits."""
        body = _create_body(template, network, limits)
        body.update(_exec_body(cmd, language, code, stdin, timeout, env, cwd, False, output_limit, compile_timeout,
                               compile_memory))
        _, result = try_each(_transports(url, token), body.get("template"),
                             lambda t: _run_on(t, "/v1/run", body, on_stdout, on_stderr), True)
        return result

    def _call(self, method, sub, **kw):
        return self._transport.request(method, "/v1/sandboxes/" + _quote(self.id) + sub, **kw)

    def refresh(self):
        """The sandbox's current state from the server."""
        self.info = self._call("GET", "")
        return self.info

    def exec(self, cmd, timeout=None, stdin=None, env=None, cwd=None, output_limit=None, on_stdout=None,
             on_stderr=None):
        """Runs `cmd` (a str for /bin/sh -c, or an argv list); `timeout` is the program's, in seconds: None sends
        DEFAULT_EXEC_TIMEOUT_S (60), whatever the server's own default. With on_stdout/on_stderr the answer is
        streamed and each chunk reaches its callback as it comes."""
        body = _exec_body(cmd, stdin=stdin, timeout=timeout, env=env, cwd=cwd, output_limit=output_limit)
        return _run_on(self._transport, "/v1/sandboxes/%s/exec" % _quote(self.id), body, on_stdout, on_stderr)

    def run_code(self, code, language="python", repl=False, timeout=None, stdin=None, env=None, cwd=None,
                 output_limit=None, on_stdout=None, on_stderr=None, compile_timeout=None, compile_memory=None):
        """Runs `code` in `language`; repl=True (python) keeps the interpreter's state between calls. For a compiled
        language (c, cpp, go, rust, java, typescript), compile_timeout (seconds) and compile_memory ("256M" or
        bytes) are its compile step's own limits; the result's `compile` has the step's figures. The client waits
        for the compile step too: compile_timeout, or DEFAULT_COMPILE_TIMEOUT_S (60 s) when none is given."""
        body = _exec_body(language=language, code=code, stdin=stdin, timeout=timeout, env=env, cwd=cwd,
                          repl=repl, output_limit=output_limit, compile_timeout=compile_timeout,
                          compile_memory=compile_memory)
        return _run_on(self._transport, "/v1/sandboxes/%s/exec" % _quote(self.id), body, on_stdout, on_stderr)

    def terminate(self):
        """Ends the sandbox; nothing of it is left. Ending one already gone is not an error."""
        try:
            self._call("DELETE", "")
        except NotFound:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.terminate()
        return False

    def __repr__(self):
        return "Sandbox(id=%r, url=%r)" % (self.id, self.url)


def _exact_path(entry):
    """A listed file whose name is not UTF-8 comes with "path_encoded" (its bytes, percent-encoded): its "path" and
    "name" become str with those bytes as surrogates (os.fsdecode's way), which read/write/remove take back."""
    encoded = entry.get("path_encoded")
    if encoded is None:
        return entry
    path = urllib.parse.unquote_to_bytes(encoded).decode("utf-8", "surrogateescape")
    exact = dict(entry, path=path)
    if "name" in entry:
        exact["name"] = path.rsplit("/", 1)[-1]
    return exact


def _quote(part):
    return urllib.parse.quote(str(part), safe="")
