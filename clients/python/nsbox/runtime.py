# nsbox/runtime.py: SandboxRuntime, the reference agent pattern's execute(language, code) -> ExecutionResult.
import threading
from dataclasses import dataclass, field
from typing import Optional

from .errors import Conflict, NotFound
from .sandbox import ExecResult, Sandbox
from .transport import DEFAULT_MAX_RESPONSE_BYTES


@dataclass
class ExecutionResult:
    """What the reference pattern's SandboxRuntime answers. `output` is stdout and stderr together in the order
    they came (a REPL cell, which the server answers whole: its stdout, then its stderr); `exit_code` the
    program's, 124 when it ran out of time, 128+N when signal N ended it. `status` and `result` (the whole
    ExecResult) say more. `new_sandbox`: the runtime's sandbox had ended (its lifetime or idle time-out passed, or
    it was deleted) and this call ran in a new one: the files and REPL state of earlier calls are gone."""
    output: str
    exit_code: int
    status: str = "ok"
    result: Optional[ExecResult] = field(default=None, repr=False)
    new_sandbox: bool = False


class SandboxRuntime:
    """Runs code in nsbox sandboxes. One sandbox for the runtime's life (files, installed packages and REPL
    state persist, as one per conversation), or fresh_sandbox_per_call=True for a new one each call. Safe
    for concurrent use; close() (or `with`) ends the sandbox."""

    def __init__(self, template="python", network=None, limits=None, env=None, lifetime=None,
                 fresh_sandbox_per_call=False, timeout=None, output_limit=None, repl=False, url=None,
                 token=None, max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
        self._create = dict(template=template, network=network, limits=limits, env=env, timeout=lifetime,
                            url=url, token=token, max_response_bytes=max_response_bytes)
        self.fresh_sandbox_per_call = fresh_sandbox_per_call
        self.timeout = timeout
        self.output_limit = output_limit
        self.repl = repl
        self._lock = threading.Lock()
        self._sandbox = None

    @property
    def sandbox(self):
        """The runtime's sandbox (one-sandbox mode), made at the first call."""
        with self._lock:
            if self._sandbox is None:
                self._sandbox = Sandbox.create(**self._create)
            return self._sandbox

    def execute(self, language, code, timeout=None):
        """Runs `code` in `language`. A program's failure or time-out is a result (exit_code 124 for a
        time-out); an API failure raises the client's NsboxError subclasses."""
        pieces = []
        lock = threading.Lock()
        replaced = False

        def collect(chunk):
            with lock:
                pieces.append(chunk)

        kw = dict(language=language, timeout=timeout if timeout is not None else self.timeout,
                  output_limit=self.output_limit, repl=self.repl and language == "python",
                  on_stdout=collect, on_stderr=collect)
        if self.fresh_sandbox_per_call:
            sbx = Sandbox.create(**self._create)
            try:
                res = sbx.run_code(code, **kw)
            finally:
                sbx.terminate()
        else:
            sbx = self.sandbox
            try:
                res = sbx.run_code(code, **kw)
            except (NotFound, Conflict):
                # The sandbox ended (404 or 409 before the program ran): the call runs once more, in a new one.
                with self._lock:
                    if self._sandbox is sbx:
                        self._sandbox = None
                replaced = True
                res = self.sandbox.run_code(code, **kw)
        if res.status == "timeout":
            exit_code = 124
        elif res.signal:
            exit_code = 128 + res.signal
        else:
            exit_code = res.exit_code if isinstance(res.exit_code, int) else -1
        with lock:
            output = "".join(pieces)
        return ExecutionResult(output=output, exit_code=exit_code, status=res.status or "", result=res,
                               new_sandbox=replaced)

    def close(self):
        """Ends the runtime's sandbox, if it made one."""
        with self._lock:
            sbx, self._sandbox = self._sandbox, None
        if sbx is not None:
            sbx.terminate()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
