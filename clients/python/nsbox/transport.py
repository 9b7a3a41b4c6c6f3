# nsbox/transport.py: HTTP/1.1 to one nsbox serve endpoint (Unix socket or TCP) with http.client, deadlines, errors.
"""One request per connection (Connection: close): a refused connection then always means nothing was sent,
and a stale kept-alive socket can never turn into an ambiguous failure. The deadline covers the whole
call (connect, send, every read), not each socket operation alone."""

import http.client
import json
import os
import socket
import ssl
import stat
import time
import urllib.parse

from .errors import NsboxError, RequestTimeout, ServerGone, from_response

DEFAULT_REQUEST_TIMEOUT_S = 60.0  # a call that runs no program
EXEC_GRACE_S = 30.0  # an exec's answer may take this long beyond the program's own time-out
# An exec's time-out when the caller gives none: sent to the server explicitly, so that the client's wait and the
# program's time-out never rest on a guess of the server's own default (its --default-timeout).
DEFAULT_EXEC_TIMEOUT_S = 60
# The most of one answer the client holds in memory: a whole answer (a file read included) or one stream line. Over
# it the call fails (NsboxError naming the cap) and the connection is closed, nothing more read. Transport's
# max_response_bytes (and the max_response_bytes= of Sandbox.create, connect, list and run) sets another.
DEFAULT_MAX_RESPONSE_BYTES = 256 << 20
MAX_ERROR_BODY_BYTES = 1 << 20  # of an error answer the first MiB is read, the rest not


def default_socket():
    """The socket `nsbox serve` listens on by default, by the server's own rule: /run/nsbox/api.sock for root, else
    $XDG_RUNTIME_DIR/nsbox/api.sock, or /tmp/nsbox-UID/api.sock without XDG_RUNTIME_DIR."""
    uid = os.geteuid()
    if uid == 0:
        return "/run/nsbox/api.sock"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return os.path.join(runtime_dir, "nsbox", "api.sock")
    directory = f"/tmp/nsbox-{uid}"
    _check_own_directory(directory, uid)
    return directory + "/api.sock"


def _check_own_directory(directory, uid):
    """/tmp is everyone's: another user may have made /tmp/nsbox-UID first and listen there for the user's code and
    secrets. The server refuses such a directory; so does the client (a missing one: no server to talk to yet)."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory"
    elif st.st_uid not in (uid, 0):
        problem = "belongs to uid %d, not to uid %d (another user made it?)" % (st.st_uid, uid)
    elif st.st_mode & 0o022:
        problem = "is writable by other users (mode %04o)" % (st.st_mode & 0o7777)
    if problem:
        raise NsboxError("the default socket's directory %s %s: set NSBOX_URL or XDG_RUNTIME_DIR" % (directory, problem),
                         url="unix://" + directory + "/api.sock", request_sent=False)


def endpoint_urls(url=None):
    """The endpoints: `url` (a string, possibly comma-separated, or a list), else NSBOX_URL, else the default."""
    urls = url if url is not None else os.environ.get("NSBOX_URL", "")
    if isinstance(urls, str):
        urls = urls.split(",")
    urls = [str(u).strip() for u in urls if str(u).strip()]
    return urls or ["unix://" + default_socket()]


class _UnixConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX stream socket."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        # A socket with a time-out is non-blocking inside, and connect() to a Unix socket whose listen backlog is
        # full then fails with EAGAIN at once instead of waiting: wait for room (nothing was sent) until the
        # time-out, as a blocking connect would.
        deadline = time.monotonic() + (self.timeout if self.timeout is not None else 1e9)
        pause = 0.005
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout)
                sock.connect(self._path)
                self.sock = sock
                return
            except BlockingIOError:
                sock.close()
                if time.monotonic() + pause > deadline:
                    raise socket.timeout("the listen backlog of %s stayed full" % self._path) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
            except BaseException:
                sock.close()
                raise


# Errors of the connection itself: the server is not there, or went away.
_GONE = (ConnectionError, FileNotFoundError, NotADirectoryError, PermissionError, http.client.RemoteDisconnected,
         http.client.IncompleteRead, socket.gaierror)


class Transport:
    """One endpoint: `unix:///path/to/api.sock`, `http://host:port` or `https://host:port`."""

    def __init__(self, url, token=None, request_timeout=DEFAULT_REQUEST_TIMEOUT_S,
                 max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
        self.url = url
        self.token = token if token is not None else os.environ.get("NSBOX_TOKEN") or None
        self.request_timeout = request_timeout
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes <= 0:
            raise ValueError("max_response_bytes is a positive number of bytes, not %r" % (max_response_bytes,))
        self.max_response_bytes = max_response_bytes
        if url.startswith("unix://"):
            self._socket_path = url[len("unix://"):]
            if not self._socket_path.startswith("/"):
                raise NsboxError("NSBOX_URL %s: a unix:// URL needs an absolute path" % url, url=url,
                                 request_sent=False)
            self._scheme = "unix"
            self._prefix = ""
        else:
            parsed = urllib.parse.urlsplit(url)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise NsboxError("NSBOX_URL %s: not unix:///path or http://host:port" % url, url=url,
                                 request_sent=False)
            if parsed.query or parsed.fragment:
                raise NsboxError("NSBOX_URL %s: a query or fragment has no place in an endpoint" % url, url=url,
                                 request_sent=False)
            self._scheme = parsed.scheme
            self._host = parsed.hostname
            self._port = parsed.port
            # A path is where the API is mounted behind a proxy (http://host/nsbox): each route goes below it,
            # percent-encoded as the other clients' URL parsers send it (a space or "é" would not go at all).
            self._prefix = urllib.parse.quote(parsed.path.rstrip("/"), safe="/%!$&'()*+,;=:@-._~")

    def _connection(self, timeout):
        if self._scheme == "unix":
            return _UnixConnection(self._socket_path, timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def request(self, method, path, query=None, json_body=None, body=None, timeout=None, raw=False,
                on_line=None):
        """One request. `json_body` is sent as JSON, `body` (bytes or str) as raw bytes. Answers the decoded
        JSON (None for an empty answer), the bytes with raw=True, or with `on_line` (NDJSON) calls it with each
        decoded line and answers None. A 200 answer that is not NDJSON is handed back decoded instead."""
        timeout = self.request_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        target = self._prefix + path
        if query:
            # A str path may carry a file name's non-UTF-8 bytes as surrogates (os.fsdecode's way): sent as those bytes.
            q = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None}, errors="surrogateescape")
            if q:
                target += "?" + q
        headers = {"Connection": "close", "Accept": "application/x-ndjson" if on_line else "application/json"}
        payload = None
        if json_body is not None:
            payload = json.dumps(json_body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        elif body is not None:
            if isinstance(body, str):
                payload = body.encode("utf-8")
            elif isinstance(body, (bytes, bytearray, memoryview)):
                payload = bytes(body)
            else:
                raise TypeError("file contents are str or bytes, not %s" % type(body).__name__)
            headers["Content-Type"] = "application/octet-stream"
        if payload is not None or method in ("POST", "PUT"):
            headers["Content-Length"] = str(len(payload or b""))
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        where = "%s %s at %s" % (method, path, self.url)

        conn = self._connection(timeout)
        sock = resp = None

        def left():
            rest = deadline - time.monotonic()
            if rest <= 0:
                raise socket.timeout("deadline")
            return rest

        try:
            try:
                conn.connect()
            except socket.timeout:
                raise RequestTimeout("%s: cannot connect within %g s" % (where, timeout), url=self.url,
                                     request_sent=False) from None
            except _GONE + (OSError,) as e:
                raise ServerGone("%s: cannot connect: %s" % (where, _describe(e)), url=self.url,
                                 request_sent=False) from e
            sock = conn.sock  # kept: http.client drops conn.sock once a Connection: close answer begins
            try:
                try:
                    conn.request(method, target, body=payload, headers=headers)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server may have answered early (413, 401) and closed: read that answer
                sock.settimeout(left())
                resp = conn.getresponse()
                ctype = resp.getheader("Content-Type", "") or ""
                if on_line is not None and resp.status == 200 and ctype.startswith("application/x-ndjson"):
                    self._read_lines(sock, resp, on_line, left, where)
                    return None
                # At most the cap (and one byte to tell that there is more) is read: a success over it fails, an
                # error answer keeps its first MiB; the connection is then closed with the rest unread.
                ok = 200 <= resp.status <= 299
                cap = self.max_response_bytes if ok else MAX_ERROR_BODY_BYTES
                if ok and resp.length is not None and resp.length > cap:
                    raise self._too_large(where, "the answer (%d bytes)" % resp.length)
                chunks, size = [], 0
                while size <= cap:
                    sock.settimeout(left())
                    chunk = resp.read1(min(65536, cap + 1 - size))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                if ok and size > cap:
                    raise self._too_large(where, "the answer")
                data = b"".join(chunks)[:cap]
                if ok:
                    _check_whole(resp)
            except socket.timeout:
                raise RequestTimeout("%s: no answer within %g s" % (where, timeout), url=self.url,
                                     request_sent=True) from None
            except http.client.IncompleteRead as e:
                owed = " (%d more bytes were expected)" % e.expected if e.expected else ""
                raise ServerGone("%s: the answer was cut short%s" % (where, owed), url=self.url,
                                 request_sent=True) from e
            except _GONE + (http.client.HTTPException,) as e:
                raise ServerGone("%s: the connection failed: %s" % (where, _describe(e)), url=self.url,
                                 request_sent=True) from e
        finally:
            if resp is not None:
                resp.close()
            if sock is not None:
                sock.close()
            conn.close()
        if resp.status < 200 or resp.status > 299:
            raise from_response(resp.status, data, self.url, cut=size > MAX_ERROR_BODY_BYTES)
        if raw:
            return data
        if resp.status == 204 or not data:
            return None
        try:
            return json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise NsboxError("%s: the answer is not JSON: %s" % (where, data[:200].decode("utf-8", "replace")),
                             status=resp.status, url=self.url) from None

    def _read_lines(self, sock, resp, on_line, left, where):
        # Only the new bytes are searched, and a line's pieces are joined once it ends: linear in the answer, however
        # long a line is (the result line can be tens of MB).
        # One line may be max_response_bytes long: a longer one fails the call, the rest unread.
        pieces, pending = [], 0
        while True:
            sock.settimeout(left())
            chunk = resp.read1(65536)
            if not chunk:
                break
            start = 0
            nl = chunk.find(b"\n")
            while nl >= 0:
                if pending + nl - start > self.max_response_bytes:
                    raise self._too_large(where, "a stream line")
                pieces.append(chunk[start:nl])
                line, pieces, pending = b"".join(pieces), [], 0
                self._one_line(line, on_line, where)
                start = nl + 1
                nl = chunk.find(b"\n", start)
            if start < len(chunk):
                pending += len(chunk) - start
                if pending > self.max_response_bytes:
                    raise self._too_large(where, "a stream line")
                pieces.append(chunk[start:])
        _check_whole(resp)
        rest = b"".join(pieces)
        if rest.strip():
            self._one_line(rest, on_line, where)

    def _too_large(self, where, what):
        return NsboxError("%s: %s is over the client's cap of %d bytes (max_response_bytes); the rest was not read"
                          % (where, what, self.max_response_bytes), url=self.url)

    def _one_line(self, line, on_line, where):
        line = line.strip()
        if not line:
            return
        try:
            parsed = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise NsboxError("%s: a stream line is not JSON: %s" % (where, line[:200].decode("utf-8", "replace")),
                             url=self.url) from None
        on_line(parsed)


def _check_whole(resp):
    """Raises IncompleteRead (the server went away) when the body ended before the Content-Length it promised; a
    chunked body cut short raises it inside http.client already. The server frames every answer with a body (a
    Content-Length or chunks): one with neither ended in its headers, which http.client takes for a body "until
    close" that is empty."""
    owed = resp.length  # what http.client still expected of the Content-Length; None for a chunked body
    if owed:
        raise http.client.IncompleteRead(b"", owed)
    if owed is None and not resp.chunked and resp.status not in (204, 304):
        raise http.client.IncompleteRead(b"")


def _describe(e):
    text = str(e) or type(e).__name__
    return "%s: %s" % (type(e).__name__, text) if text != type(e).__name__ else text
