// clients/typescript/src/transport.js: HTTP/1.1 to one nsbox serve endpoint (Unix socket or TCP), deadlines, errors.
// Each request has its own connection (agent: false, Connection: close): a refused connection then always means
// nothing was sent, and a stale kept-alive socket can never turn into an ambiguous failure.
import http from 'node:http';
import { constants as bufferConstants } from 'node:buffer';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { fromResponse, NsboxError, RequestTimeoutError, ServerGoneError } from './errors.js';

export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000; // a call that runs no program
export const EXEC_GRACE_MS = 30_000; // an exec's answer may take this long beyond the program's own time-out
const EXPECT_CONTINUE_BYTES = 1 << 20; // bodies larger than this are sent after the server's 100 Continue
// An exec's time-out when the caller gives none: sent to the server explicitly, so that the client's wait and the
// program's time-out never rest on a guess of the server's own default (its --default-timeout).
export const DEFAULT_EXEC_TIMEOUT_S = 60;
// The most of one answer the client holds in memory: a whole answer (a file read included) or one stream line. Over
// it the call fails (NsboxError naming the cap) and the connection is closed, nothing more read. The maxResponseBytes
// option (of Sandbox.create, connect, list and run, or of a Transport) sets another.
export const DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024;
const MAX_ERROR_BODY_BYTES = 1 << 20; // of an error answer the first MiB is read, the rest not

// A Buffer as text. One longer than a string can be (V8 aborts the process past 2 GiB, throws past about 512 MiB)
// is refused: with a cap raised that far, such an answer is an error, not the end of the process.
function text(buf, where, url) {
  if (buf.length > bufferConstants.MAX_STRING_LENGTH) {
    throw new NsboxError(`${where}: the answer (${buf.length} bytes) is longer than a string can be`, { url });
  }
  return buf.toString('utf8');
}

/**
 * The socket `nsbox serve` listens on by default, by the server's own rule: /run/nsbox/api.sock for root, else
 * $XDG_RUNTIME_DIR/nsbox/api.sock, or /tmp/nsbox-UID/api.sock without XDG_RUNTIME_DIR.
 */
export function defaultSocket() {
  const uid = typeof process.geteuid === 'function' ? process.geteuid() : 0;
  if (uid === 0) return '/run/nsbox/api.sock';
  if (process.env.XDG_RUNTIME_DIR) return path.join(process.env.XDG_RUNTIME_DIR, 'nsbox', 'api.sock');
  const dir = `/tmp/nsbox-${uid}`;
  checkOwnDirectory(dir, uid);
  return `${dir}/api.sock`;
}

// /tmp is everyone's: another user may have made /tmp/nsbox-UID first and listen there for the user's code and
// secrets. The server refuses such a directory; so does the client (a missing one: no server to talk to yet).
function checkOwnDirectory(dir, uid) {
  let st;
  try {
    st = fs.lstatSync(dir);
  } catch {
    return;
  }
  let problem = null;
  if (!st.isDirectory()) problem = 'is not a directory';
  else if (st.uid !== uid && st.uid !== 0) problem = `belongs to uid ${st.uid}, not to uid ${uid} (another user made it?)`;
  else if (st.mode & 0o022) problem = `is writable by other users (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`;
  if (problem) {
    throw new NsboxError(`the default socket's directory ${dir} ${problem}: set NSBOX_URL or XDG_RUNTIME_DIR`,
      { url: `unix://${dir}/api.sock`, requestSent: false });
  }
}

/** The endpoints: `url` (a string, possibly comma-separated, or an array), else NSBOX_URL, else the default socket. */
export function endpointUrls(url) {
  let list = url ?? process.env.NSBOX_URL ?? '';
  if (typeof list === 'string') list = list.split(',');
  list = list.map((u) => String(u).trim()).filter(Boolean);
  return list.length ? list : ['unix://' + defaultSocket()];
}

// How long a body waits for the server's 100 Continue before it is sent anyway (the Go client's wait).
const EXPECT_CONTINUE_WAIT_MS = 10_000;

const GONE_CODES = new Set(['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EPIPE', 'ECONNABORTED', 'EHOSTUNREACH',
  'ENETUNREACH', 'ENOTSOCK', 'EACCES', 'ENOTCONN', 'EAI_AGAIN', 'ENOTFOUND']);

export class Transport {
  // Private: a printed (console.log, util.inspect) or JSON-encoded transport, or a sandbox holding one, never shows it.
  #token;

  /** url: `unix:///path/to/api.sock`, `http://host:port` or `https://host:port`. */
  constructor(url, { token, requestTimeoutMs = DEFAULT_REQUEST_TIMEOUT_MS,
    maxResponseBytes = DEFAULT_MAX_RESPONSE_BYTES } = {}) {
    this.url = url;
    this.#token = token ?? process.env.NSBOX_TOKEN ?? null;
    this.requestTimeoutMs = requestTimeoutMs;
    if (!Number.isSafeInteger(maxResponseBytes) || maxResponseBytes <= 0) {
      throw new RangeError(`maxResponseBytes is a positive whole number of bytes, not ${maxResponseBytes}`);
    }
    this.maxResponseBytes = maxResponseBytes;
    if (url.startsWith('unix://')) {
      const socketPath = url.slice('unix://'.length);
      // Nothing was sent: a bad endpoint is the caller's to fix, not a server that went away mid-request.
      const bad = (why) => new NsboxError(`NSBOX_URL ${url}: ${why}`, { url, requestSent: false });
      if (!socketPath.startsWith('/')) throw bad('a unix:// URL needs an absolute path');
      this.base = { socketPath };
      this.prefix = '';
      this.lib = http;
    } else {
      const bad = (why) => new NsboxError(`NSBOX_URL ${url}: ${why}`, { url, requestSent: false });
      let parsed;
      try {
        parsed = new URL(url);
      } catch {
        throw bad('not unix:///path or http://host:port');
      }
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
        throw bad('the scheme must be unix, http or https');
      }
      if (parsed.search || parsed.hash) throw bad('a query or fragment has no place in an endpoint');
      this.base = { hostname: parsed.hostname.replace(/^\[|\]$/g, ''), port: parsed.port || undefined };
      // A path is where the API is mounted behind a proxy (http://host/nsbox): each route goes below it.
      this.prefix = parsed.pathname.replace(/\/+$/, '');
      this.lib = parsed.protocol === 'https:' ? https : http;
    }
  }

  /**
   * One request. Options: query (object), encodedQuery (a query string already percent-encoded, sent as it is),
   * json (a body to send as JSON), body (raw bytes), timeoutMs, signal, raw (answer the bytes), onLine (NDJSON:
   * called with each decoded line; the answer is then undefined).
   */
  async request(method, urlPath, opts = {}) {
    const { query, encodedQuery, json, body, timeoutMs = this.requestTimeoutMs, signal, raw = false, onLine } = opts;
    const params = encodedQuery ? [encodedQuery] : [];
    if (query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) q.set(k, String(v));
      const s = q.toString();
      if (s) params.push(s);
    }
    const target = this.prefix + (params.length ? `${urlPath}?${params.join('&')}` : urlPath);
    const headers = { Connection: 'close', Accept: onLine ? 'application/x-ndjson' : 'application/json' };
    let payload = null;
    if (json !== undefined) {
      payload = Buffer.from(JSON.stringify(json));
      headers['Content-Type'] = 'application/json';
    } else if (body !== undefined) {
      if (typeof body === 'string') payload = Buffer.from(body, 'utf8');
      else if (body instanceof ArrayBuffer) payload = Buffer.from(body);
      else if (ArrayBuffer.isView(body)) payload = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      else throw new TypeError('file contents are a string, a Uint8Array (or other typed view) or an ArrayBuffer');
      headers['Content-Type'] = 'application/octet-stream';
    }
    if (payload) headers['Content-Length'] = String(payload.length);
    // A large body waits for the server's go-ahead: one over its --max-body is answered 413 before any of it is sent,
    // where writing it all would end in EPIPE once the server has answered and closed.
    const waitForContinue = payload !== null && payload.length > EXPECT_CONTINUE_BYTES;
    if (waitForContinue) headers.Expect = '100-continue';
    if (this.#token) headers.Authorization = `Bearer ${this.#token}`;
    const where = `${method} ${urlPath} at ${this.url}`;

    return new Promise((resolve, reject) => {
      let connected = false;
      let settled = false;
      const finish = (fn, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        fn(value);
      };
      const req = this.lib.request({ ...this.base, method, path: target, headers, agent: false });
      const timer = setTimeout(() => {
        finish(reject, new RequestTimeoutError(`${where}: no answer within ${timeoutMs} ms`,
          { url: this.url, requestSent: connected }));
        req.destroy();
      }, timeoutMs);
      const onAbort = () => {
        const reason = signal.reason instanceof Error ? signal.reason : new Error('aborted');
        finish(reject, Object.assign(new NsboxError(`${where}: aborted by the caller`,
          { url: this.url, requestSent: connected, cause: reason }), { name: 'AbortError' }));
        req.destroy();
      };
      if (signal) {
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
      }
      // Over TLS the request goes out once the handshake is done: a certificate refused is a server not reached.
      const up = this.lib === https ? 'secureConnect' : 'connect';
      req.on('socket', (sock) => sock.once(up, () => { connected = true; }));
      req.on('error', (err) => {
        // Not reached (refused, unresolvable, a TLS handshake that failed): gone, with nothing sent, as in Python.
        const gone = GONE_CODES.has(err.code) || !connected;
        const sent = connected && err.code !== 'ECONNREFUSED' && err.code !== 'ENOENT';
        const Cls = gone ? ServerGoneError : NsboxError;
        const what = connected ? 'the connection failed' : 'cannot connect';
        finish(reject, new Cls(`${where}: ${what}: ${err.code ?? ''} ${err.message}`.replace(/\s+/g, ' '),
          { url: this.url, requestSent: sent, cause: err }));
      });
      req.on('response', (res) => {
        const ok = res.statusCode >= 200 && res.statusCode <= 299;
        const ndjson = onLine && res.statusCode === 200 &&
          String(res.headers['content-type'] ?? '').startsWith('application/x-ndjson');
        // At most the cap is held: a success over it (or a stream line over it) fails, an error answer keeps its
        // first MiB; the connection is then closed with the rest unread.
        const cap = ok ? this.maxResponseBytes : MAX_ERROR_BODY_BYTES;
        const fail = (err) => {
          finish(reject, err);
          req.destroy();
        };
        const tooLarge = (what) => fail(new NsboxError(`${where}: ${what} is over the client's cap of ` +
          `${this.maxResponseBytes} bytes (maxResponseBytes); the rest was not read`, { url: this.url }));
        const failed = (err) => fail(err instanceof NsboxError ? err : new NsboxError(`${where}: ${err.message}`,
          { url: this.url, status: res.statusCode, cause: err }));
        const errorAnswer = (data, cut) => fail(fromResponse(res.statusCode, data, this.url, { cut }));
        const chunks = [];
        let size = 0;
        let pieces = []; // the bytes of the NDJSON line not ended yet
        let pending = 0; // their length
        res.on('data', (chunk) => {
          if (settled) return undefined;
          if (!ndjson) {
            if (size + chunk.length <= cap) {
              size += chunk.length;
              return chunks.push(chunk);
            }
            if (ok) return tooLarge('the answer');
            chunks.push(chunk.subarray(0, cap - size));
            return errorAnswer(Buffer.concat(chunks), true);
          }
          try {
            // Only the new bytes are searched, and a line's pieces are joined once it ends: linear in the answer,
            // however long a line is (the result line can be tens of MB). A newline byte is never part of a UTF-8
            // sequence, so a line is decoded whole.
            let start = 0;
            let nl;
            while ((nl = chunk.indexOf(10, start)) >= 0) {
              if (pending + nl - start > cap) return tooLarge('a stream line');
              pieces.push(chunk.subarray(start, nl));
              const line = text(Buffer.concat(pieces), where, this.url).trim();
              pieces = [];
              pending = 0;
              start = nl + 1;
              if (!line) continue;
              let parsed;
              try {
                parsed = JSON.parse(line);
              } catch {
                return fail(new NsboxError(`${where}: a stream line is not JSON: ${line.slice(0, 200)}`,
                  { url: this.url }));
              }
              try {
                onLine(parsed);
              } catch (err) {
                return fail(err);
              }
            }
            if (start < chunk.length) {
              pending += chunk.length - start;
              if (pending > cap) return tooLarge('a stream line');
              pieces.push(chunk.subarray(start));
            }
          } catch (err) {
            return failed(err);
          }
          return undefined;
        });
        res.on('aborted', () => finish(reject, new ServerGoneError(`${where}: the answer was cut short`,
          { url: this.url })));
        res.on('error', (err) => finish(reject, new ServerGoneError(`${where}: the answer was cut short: ` +
          err.message, { url: this.url, cause: err })));
        res.on('end', () => {
          if (settled) return undefined;
          try {
            if (ndjson) {
              const rest = text(Buffer.concat(pieces), where, this.url).trim();
              if (rest) onLine(JSON.parse(rest));
              return finish(resolve, undefined);
            }
            const data = Buffer.concat(chunks);
            if (!ok) return errorAnswer(data, false);
            if (raw) return finish(resolve, data);
            if (res.statusCode === 204 || data.length === 0) return finish(resolve, null);
            let decoded;
            try {
              decoded = JSON.parse(text(data, where, this.url));
            } catch (err) {
              if (err instanceof NsboxError) throw err;
              throw new NsboxError(`${where}: the answer is not JSON: ${data.toString('utf8', 0, 200)}`,
                { url: this.url, status: res.statusCode });
            }
            return finish(resolve, decoded);
          } catch (err) {
            return failed(err);
          }
        });
        const length = Number(res.headers['content-length']);
        if (ok && !ndjson && length > cap) tooLarge(`the answer (${length} bytes)`);
      });
      if (waitForContinue) {
        // A server (or proxy) that ignores Expect gets the body after EXPECT_CONTINUE_WAIT_MS without a go-ahead, as
        // RFC 9110 10.1.1 lets a client, and as the Go client does; an answer meanwhile (413, 401) ends the request.
        let sent = false;
        const send = () => {
          if (sent) return;
          sent = true;
          clearTimeout(wait);
          req.end(payload);
        };
        const wait = setTimeout(send, EXPECT_CONTINUE_WAIT_MS);
        req.on('continue', send);
        req.on('response', () => clearTimeout(wait));
        req.on('close', () => clearTimeout(wait));
      } else {
        req.end(payload ?? undefined);
      }
    });
  }
}

