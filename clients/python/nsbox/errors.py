# nsbox/errors.py: the typed exceptions of the Python client; each carries the server's one-line message and code.
"""Failures of an API call. A program's own failure (non-zero exit, time-out, oom) is never an exception:
it is an ExecResult with a status."""

import json


class NsboxError(Exception):
    """Every failure of the client. `status` is the HTTP status (None when no answer came), `code` the
    server's error code ("not_found", ...), `body` the decoded error body, `url` the endpoint and
    `request_sent` False when nothing reached a server (safe to send elsewhere)."""

    def __init__(self, message, status=None, code=None, body=None, url=None, request_sent=True):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.body = body
        self.url = url
        self.request_sent = request_sent


class NotFound(NsboxError):
    """404: unknown sandbox (or another client's), missing file, unknown route."""


class Refused(NsboxError):
    """400, 401, 403, 405, 413: the server refused the request."""


class CapacityFull(Refused):
    """429: the node has no room; `capacity` is its capacity document (as GET /v1/capacity)."""

    @property
    def capacity(self):
        return self.body.get("capacity") if isinstance(self.body, dict) else None


class Conflict(NsboxError):
    """409: the sandbox was ending (or a file changed while it was read). A sandbox the server has already removed
    (its lifetime or idle time-out passed, or it was deleted) is NotFound: take both as "ended"."""


class SetupFailed(NsboxError):
    """500: the sandbox could not be made; the message is the engine's reason."""


class InternalError(NsboxError):
    """500 (code "internal", or a 500 that is not setup_failed): a fault of the server itself, also as a stream's
    error line."""


class ServerGone(NsboxError):
    """No server: connection refused or reset, the answer cut short, or 503 (shutting down)."""


class RequestTimeout(NsboxError):
    """No answer within the client's deadline. For an exec, the program may have run."""


# A 500 is SetupFailed with the code setup_failed, else InternalError (from_response).
_BY_STATUS = {400: Refused, 401: Refused, 403: Refused, 404: NotFound, 405: Refused, 409: Conflict, 413: Refused,
              429: CapacityFull, 503: ServerGone}
_BY_CODE = {"bad_request": Refused, "unauthorized": Refused, "forbidden": Refused, "not_found": NotFound,
            "method_not_allowed": Refused, "conflict": Conflict, "payload_too_large": Refused,
            "too_many_requests": CapacityFull,
            "setup_failed": SetupFailed, "internal": InternalError, "unavailable": ServerGone}


def from_response(status, data, url, cut=False):
    """The exception for a non-2xx answer; `data` is the raw body (bytes), its first MiB when `cut` (the rest was not
    read: the message says so)."""
    decoded = None
    try:
        decoded = json.loads(data.decode("utf-8")) if data else None
    except (ValueError, UnicodeDecodeError):
        decoded = None
    err = decoded.get("error") if isinstance(decoded, dict) else None
    err = err if isinstance(err, dict) else {}
    message = err.get("message")
    code = err.get("code") if isinstance(err.get("code"), str) else None
    if not isinstance(message, str) or not message:
        first = data.decode("utf-8", "replace").strip().split("\n")[0][:200] if data else ""
        message = "HTTP %d from %s%s" % (status, url or "the server", ": " + first if first else "")
    if cut:
        message += " (the error body is over the client's cap of 1 MiB; the rest was not read)"
    if status == 500:
        cls = SetupFailed if code == "setup_failed" else InternalError
    else:
        cls = _BY_STATUS.get(status, NsboxError)
    return cls(message, status=status, code=code, body=decoded if isinstance(decoded, dict) else None, url=url)


# The HTTP status each code has when it is the answer's own (docs/api.md): a stream's error line carries the code
# alone, and is given that status, as the TypeScript and Go clients give it.
_STATUS_OF_CODE = {"bad_request": 400, "unauthorized": 401, "forbidden": 403, "not_found": 404,
                   "method_not_allowed": 405, "conflict": 409,
                   "payload_too_large": 413, "too_many_requests": 429, "internal": 500, "setup_failed": 500,
                   "unavailable": 503}


def from_stream_error(err, url):
    """The exception for a `{"type": "error", "error": {...}}` line of a streamed answer."""
    err = err if isinstance(err, dict) else {}
    message = err.get("message") or "the server reported an error mid-stream"
    code = err.get("code") if isinstance(err.get("code"), str) else None
    cls = _BY_CODE.get(code, NsboxError)
    return cls(str(message), status=_STATUS_OF_CODE.get(code), code=code, body={"error": err}, url=url)
