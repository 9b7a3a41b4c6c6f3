# nsbox/sandbox.py: Sandbox (create, connect, list, run, exec, run_code, terminate), its files, ExecResult.
import reprlib
import urllib.parse

from .cluster import try_each
from .errors import NotFound, NsboxError, ServerGone, from_stream_error
from .transport import (DEFAULT_EXEC_TIMEOUT_S, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_REQUEST_TIMEOUT_S, EXEC_GRACE_S,
                        Transport, endpoint_urls)

# A compiled language's compile step runs before its program, under its own time-out: compile_timeout, or the
# language table's (rootfs/languages.json: 30 s for c, 60 s for the others). The client waits the longest of
# those for any language but the interpreted ones, a bound that is never too short.
DEFAULT_COMPILE_TIMEOUT_S = 60.0
INTERPRETED_LANGUAGES = frozenset(("python", "python3", "bash", "sh", "node", "javascript"))


def _transports(url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT_S,
                max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
    return [Transport(u, token=token, request_timeout=request_timeout, max_response_bytes=max_response_bytes)
            for u in endpoint_urls(url)]


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_list_of_objects(v):
    return isinstance(v, list) and all(isinstance(e, dict) for e in v)


# The JSON type of each result field ExecResult gives (absent or null: its default); status must be a non-empty
# string. Another type is a malformed answer (NsboxError), never a wrong attribute.
_RESULT_FIELDS = {
    "exit_code": ("a number", _is_number), "signal": ("a number", _is_number),
    "reason": ("a string", lambda v: isinstance(v, str)), "stdout": ("a string", lambda v: isinstance(v, str)),
    "stderr": ("a string", lambda v: isinstance(v, str)), "stdout_bytes": ("a number", _is_number),
    "stderr_bytes": ("a number", _is_number), "stdout_truncated": ("a boolean", lambda v: isinstance(v, bool)),
    "stderr_truncated": ("a boolean", lambda v: isinstance(v, bool)), "wall_ms": ("a number", _is_number),
    "cpu_ms": ("a number", _is_number), "peak_memory_bytes": ("a number", _is_number),
    "denied_syscalls": ("an array", lambda v: isinstance(v, list)),
    "denied_hosts": ("an array", lambda v: isinstance(v, list)),
    "changed_files": ("an array of objects", _is_list_of_objects), "repl": ("an object", lambda v: isinstance(v, dict)),
    "compile": ("an object", lambda v: isinstance(v, dict)),
}


def _shown(value):
    """A value of an answer, shortly (reprlib's bounds): never all of a large one."""
    return reprlib.repr(value)


def _check_result(raw):
    if not isinstance(raw, dict):
        raise NsboxError("the server's result is not an object: %s" % _shown(raw))
    if not isinstance(raw.get("status"), str) or not raw["status"]:
        raise NsboxError("the server's result has no status (a string): %s" % _shown(raw.get("status")))
    for key, (kind, fits) in _RESULT_FIELDS.items():
        value = raw.get(key)
        if value is not None and not fits(value):
            raise NsboxError("the server's result has a %s that is not %s: %s" % (key, kind, _shown(value)))


def _sandbox_info(info, where, url):
    """The server's description of a sandbox, checked: an object whose id is a non-empty string."""
    if not isinstance(info, dict) or not isinstance(info.get("id"), str) or not info["id"]:
        raise NsboxError("%s at %s: the answer has no sandbox id: %s" % (where, url, _shown(info)), url=url)
    return info


class ExecResult:
    """One run's outcome: the server's result object (docs/result.md) as attributes; `raw` is the whole dict.
    A program's own failure (exit, timeout, oom, signal, violation) is a status here, never an exception."""

    def __init__(self, raw):
        _check_result(raw)
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
        entries = answer.get("entries") if isinstance(answer, dict) else None
        # A wrong-shaped answer is the server's fault, said as one: not an empty listing, nor a TypeError.
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise NsboxError("GET files?list at %s: the answer has no array of entries (objects): %s"
                             % (self._sbx.url, _shown(answer)), url=self._sbx.url)
        return Listing((_exact_path(e) for e in entries), truncated=answer.get("truncated") is True)

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
        # A line is a JSON object; one of a type this client does not know is skipped (docs/clients.md).
        if not isinstance(obj, dict):
            raise NsboxError("POST %s at %s: a stream line is not a JSON object: %s"
                             % (path, transport.url, _shown(obj)), url=transport.url)
        kind = obj.get("type")
        data = obj.get("data")
        if kind in ("stdout", "stderr"):
            if data is not None and not isinstance(data, str):
                raise NsboxError("POST %s at %s: a %s line's data is not a string" % (path, transport.url, kind),
                                 url=transport.url)
            delivered.add(kind)
        if kind == "stdout" and on_stdout is not None:
            on_stdout(data or "")
        elif kind == "stderr" and on_stderr is not None:
            on_stderr(data or "")
        elif kind == "result":
            got["result"] = obj.get("result")
        elif kind == "error":
            err = obj.get("error")
            if not isinstance(err, dict) or any(err.get(k) is not None and not isinstance(err[k], str)
                                                for k in ("code", "message")):
                raise NsboxError("POST %s at %s: an error line's error is not {code, message}: %s"
                                 % (path, transport.url, _shown(err)), url=transport.url)
            got["error"] = err

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
               request_timeout=DEFAULT_REQUEST_TIMEOUT_S, max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
        """Makes a sandbox. `timeout` is its lifetime in seconds, another name of max_lifetime: give one of them,
        not both (TypeError). With several endpoints (`url` a list or comma-separated, or NSBOX_URL so), on the
        node with the most free capacity, passing on to the next when one is full or gone. max_response_bytes:
        the most of one answer (a file read too) or stream line the sandbox's calls hold (default 256 MiB)."""
        if max_lifetime is not None and timeout is not None:
            raise TypeError("give the sandbox's lifetime as max_lifetime or as timeout (its other name), not both")
        body = _create_body(template, network, limits, env, labels, idle_timeout,
                            max_lifetime if max_lifetime is not None else timeout)
        transport, info = try_each(_transports(url, token, request_timeout, max_response_bytes), body.get("template"),
                                   lambda t: t.request("POST", "/v1/sandboxes", json_body=body), False)
        return cls(transport, _sandbox_info(info, "POST /v1/sandboxes", transport.url))

    @classmethod
    def connect(cls, sandbox_id, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT_S,
                max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
        """A handle on an existing sandbox; looks for it on each endpoint."""
        errors = []
        for t in _transports(url, token, request_timeout, max_response_bytes):
            try:
                return cls(t, _sandbox_info(t.request("GET", "/v1/sandboxes/" + _quote(sandbox_id)),
                                            "GET /v1/sandboxes/{id}", t.url))
            except NsboxError as err:
                errors.append(err)
        other = [e for e in errors if not isinstance(e, NotFound)]
        raise other[0] if other else errors[-1]

    @classmethod
    def list(cls, url=None, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT_S,
             max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
        """The caller's sandboxes on every endpoint."""
        out = []
        for t in _transports(url, token, request_timeout, max_response_bytes):
            answer = t.request("GET", "/v1/sandboxes")
            listed = answer.get("sandboxes") if isinstance(answer, dict) else None
            if not isinstance(listed, list):
                raise NsboxError("GET /v1/sandboxes at %s: the answer has no sandboxes array: %s"
                                 % (t.url, _shown(answer)), url=t.url)
            out.extend(cls(t, _sandbox_info(s, "GET /v1/sandboxes", t.url)) for s in listed)
        return out

    @staticmethod
    def run(cmd=None, code=None, language="python", template=None, network=None, limits=None, env=None,
            stdin=None, timeout=None, cwd=None, output_limit=None, on_stdout=None, on_stderr=None, url=None,
            token=None, compile_timeout=None, compile_memory=None, max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
        """A one-shot run in a fresh sandbox (POST /v1/run), gone when the answer comes. Sent to another node
        only when it cannot have started there. compile_timeout (seconds) and compile_memory ("256M" or bytes):
        a compiled language's compile step's own limits."""
        body = _create_body(template, network, limits)
        body.update(_exec_body(cmd, language, code, stdin, timeout, env, cwd, False, output_limit, compile_timeout,
                               compile_memory))
        _, result = try_each(_transports(url, token, max_response_bytes=max_response_bytes), body.get("template"),
                             lambda t: _run_on(t, "/v1/run", body, on_stdout, on_stderr), True)
        return result

    def _call(self, method, sub, **kw):
        return self._transport.request(method, "/v1/sandboxes/" + _quote(self.id) + sub, **kw)

    def refresh(self):
        """The sandbox's current state from the server."""
        self.info = _sandbox_info(self._call("GET", ""), "GET /v1/sandboxes/{id}", self.url)
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
