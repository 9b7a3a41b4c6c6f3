// clients/typescript/src/sandbox.js: Sandbox (create, connect, list, exec, runCode, terminate), its files, results.
import { NsboxError, NotFoundError, ServerGoneError, fromStreamError } from './errors.js';
import { endpointUrls, Transport, DEFAULT_EXEC_TIMEOUT_S, EXEC_GRACE_MS } from './transport.js';
import { tryEach } from './cluster.js';

function transportsFor(opts = {}) {
  return endpointUrls(opts.url).map((u) => new Transport(u, { token: opts.token,
    requestTimeoutMs: opts.requestTimeoutMs }));
}

const enc = encodeURIComponent;

/** One run's outcome: the server's result object, with camelCase accessors; `raw` is the whole object. */
export class ExecResult {
  constructor(raw) {
    this.raw = raw;
    this.status = raw.status;
    this.exitCode = raw.exit_code;
    this.signal = raw.signal ?? 0;
    this.reason = raw.reason ?? '';
    this.stdout = raw.stdout ?? '';
    this.stderr = raw.stderr ?? '';
    this.stdoutBytes = raw.stdout_bytes ?? 0;
    this.stderrBytes = raw.stderr_bytes ?? 0;
    this.stdoutTruncated = !!raw.stdout_truncated;
    this.stderrTruncated = !!raw.stderr_truncated;
    this.wallMs = raw.wall_ms ?? 0;
    this.cpuMs = raw.cpu_ms ?? 0;
    this.peakMemoryBytes = raw.peak_memory_bytes ?? 0;
    this.changedFiles = raw.changed_files ?? [];
    this.repl = raw.repl ?? null;
  }

  /** True when the program exited 0. */
  get ok() {
    return this.status === 'ok';
  }
}

/**
 * The query naming a file: `path` is a string, or an entry of a listing or of a result's changedFiles. Such an entry
 * for a name that is not UTF-8 has path_encoded, the name's bytes percent-encoded, sent back unchanged (its `path`
 * shows U+FFFD, which names no file; a string would be encoded again).
 */
function pathQuery(path, extra = {}) {
  if (path === null || typeof path !== 'object') return { query: { path, ...extra } };
  const encoded = path.path_encoded;
  if (encoded === undefined) return { query: { path: path.path, ...extra } };
  if (typeof encoded !== 'string' || /[&#\s]/.test(encoded)) {
    throw new TypeError(`path_encoded ${JSON.stringify(encoded)} is not a percent-encoded path`);
  }
  return { encodedQuery: `path=${encoded}`, query: extra };
}

/**
 * Files under the sandbox's /workspace. Every path is a string (relative to /workspace or absolute under it) or an
 * entry of list() (or of a result's changedFiles), which also reaches a name that is not UTF-8.
 */
export class Files {
  constructor(sandbox) {
    this._sbx = sandbox;
  }

  /** Writes `data` (a string as UTF-8, or bytes) to `path`, creating parents. Answers {path, size}. */
  async write(path, data, { signal } = {}) {
    return this._sbx._call('PUT', '/files', { ...pathQuery(path), body: data ?? '', signal });
  }

  /** The bytes of `path`. */
  async read(path, { signal } = {}) {
    return this._sbx._call('GET', '/files', { ...pathQuery(path), raw: true, signal });
  }

  /** The text of `path`, decoded as UTF-8. */
  async readText(path, opts) {
    return (await this.read(path, opts)).toString('utf8');
  }

  /**
   * The entries of directory `path` (default the workspace): [{name, path, type, size}, with path_encoded for a name
   * that is not UTF-8]. The array's `truncated` (not enumerable) is true when the server listed only some of them.
   */
  async list(path = '.', { signal } = {}) {
    const answer = await this._sbx._call('GET', '/files', { ...pathQuery(path, { list: 'true' }), signal });
    const entries = answer.entries ?? [];
    Object.defineProperty(entries, 'truncated', { value: answer.truncated === true });
    return entries;
  }

  /** Removes `path` (a directory recursively). */
  async remove(path, { signal } = {}) {
    await this._sbx._call('DELETE', '/files', { ...pathQuery(path), signal });
  }
}

function createBody(opts, { timeoutIsLifetime = true } = {}) {
  if (timeoutIsLifetime && opts.maxLifetime != null && opts.timeout != null) {
    throw new TypeError("give the sandbox's lifetime as maxLifetime or as timeout (its other name), not both");
  }
  const body = {};
  for (const [from, to] of [['template', 'template'], ['network', 'network'], ['limits', 'limits'], ['env', 'env'],
    ['idleTimeout', 'idle_timeout'], ['maxLifetime', 'max_lifetime'], ['timeout', 'max_lifetime'],
    ['labels', 'labels']]) {
    if (from === 'timeout' && !timeoutIsLifetime) continue;
    if (opts[from] !== undefined) body[to] = opts[from];
  }
  return body;
}

function execBody(opts) {
  // The time-out is always sent (DEFAULT_EXEC_TIMEOUT_S when not given): the program then runs under what the client
  // waits for, whatever the server's own default.
  const body = { timeout: opts.timeout ?? DEFAULT_EXEC_TIMEOUT_S };
  for (const [from, to] of [['stdin', 'stdin'], ['env', 'env'], ['cwd', 'cwd'],
    ['repl', 'repl'], ['outputLimit', 'output_limit'], ['compileTimeout', 'compile_timeout'],
    ['compileMemory', 'compile_memory']]) {
    if (opts[from] !== undefined) body[to] = opts[from];
  }
  return body;
}

// A compiled language's compile step runs before its program, under its own time-out: compileTimeout, or the
// language table's (rootfs/languages.json: 30 s for c, 60 s for the others). The client waits the longest of those
// for any language but the interpreted ones, a bound that is never too short.
const DEFAULT_COMPILE_TIMEOUT_S = 60;
const INTERPRETED_LANGUAGES = new Set(['python', 'python3', 'bash', 'sh', 'node', 'javascript']);

const seconds = (value, fallback) => {
  const n = Number(value ?? fallback);
  return Number.isFinite(n) && n > 0 ? n : fallback;
};

/**
 * How long to wait for an exec's answer: its own time-out (always in the body; the server caps it, and a value it
 * refuses is its 400), a compiled language's compile step before it, and the grace; no more than a timer holds
 * (2^31 - 1 ms; larger, Node fires it at once).
 */
function execWaitMs(body) {
  let wait = seconds(body.timeout, DEFAULT_EXEC_TIMEOUT_S);
  const compiled = typeof body.language === 'string' && !INTERPRETED_LANGUAGES.has(body.language.toLowerCase());
  if (body.compile_timeout !== undefined || compiled) wait += seconds(body.compile_timeout, DEFAULT_COMPILE_TIMEOUT_S);
  return Math.min(wait * 1000 + EXEC_GRACE_MS, 2 ** 31 - 1);
}

/** Sends an exec or run body, streaming when a callback is given. Never retried. */
async function runOn(transport, urlPath, body, opts) {
  const timeoutMs = execWaitMs(body);
  const { onStdout, onStderr, signal } = opts;
  if (!onStdout && !onStderr) {
    const answer = await transport.request('POST', urlPath, { json: body, timeoutMs, signal });
    if (!answer || typeof answer !== 'object' || Array.isArray(answer)) {
      throw new NsboxError(`${urlPath} at ${transport.url}: the answer is not a result object`, { url: transport.url });
    }
    return new ExecResult(answer);
  }
  let result = null;
  let failure = null;
  const delivered = new Set();
  const answer = await transport.request('POST', urlPath, {
    json: body, timeoutMs, signal, query: { stream: 'true' },
    onLine: (line) => {
      if (line.type === 'stdout' || line.type === 'stderr') delivered.add(line.type);
      if (line.type === 'stdout') onStdout?.(line.data);
      else if (line.type === 'stderr') onStderr?.(line.data);
      else if (line.type === 'result') result = line.result;
      else if (line.type === 'error') failure = line.error;
    },
  });
  if (failure) throw fromStreamError(failure, transport.url);
  // A server that answered the whole result at once.
  if (!result && answer && typeof answer === 'object' && 'status' in answer) result = answer;
  // The connection ended cleanly before the result line: the server went away (as Python's and Go's clients say).
  if (!result) throw new ServerGoneError(`${urlPath} at ${transport.url}: the stream ended without a result`,
    { url: transport.url });
  // Each stream none of whose chunks came gets the result's output once, in one piece: a REPL cell is answered with
  // its result alone, and no output is lost.
  const out = new ExecResult(result);
  if (onStdout && out.stdout && !delivered.has('stdout')) onStdout(out.stdout);
  if (onStderr && out.stderr && !delivered.has('stderr')) onStderr(out.stderr);
  return out;
}

export class Sandbox {
  constructor(transport, info) {
    this._transport = transport;
    this.info = info;
    this.id = info.id;
    this.files = new Files(this);
  }

  /** The endpoint this sandbox lives on; every call of it goes there. */
  get url() {
    return this._transport.url;
  }

  /**
   * Makes a sandbox. With several endpoints (`url` an array or comma-separated, or NSBOX_URL so), on the node
   * with the most free capacity, trying the next when one is full or gone.
   */
  static async create(opts = {}) {
    const body = createBody(opts);
    const [t, info] = await tryEach(transportsFor(opts), body.template, (tr) =>
      tr.request('POST', '/v1/sandboxes', { json: body, signal: opts.signal }), false);
    return new Sandbox(t, info);
  }

  /** A handle on an existing sandbox; looks for it on each endpoint. */
  static async connect(id, opts = {}) {
    let notFound = null;
    let other = null;
    for (const t of transportsFor(opts)) {
      try {
        return new Sandbox(t, await t.request('GET', `/v1/sandboxes/${enc(id)}`, { signal: opts.signal }));
      } catch (err) {
        if (err instanceof NotFoundError) notFound ??= err;
        else other ??= err;
      }
    }
    // Unknown to the nodes that answered is not gone when a node did not answer: it may live there.
    throw other ?? notFound;
  }

  /** The caller's sandboxes on every endpoint. */
  static async list(opts = {}) {
    const all = await Promise.all(transportsFor(opts).map(async (t) =>
      (await t.request('GET', '/v1/sandboxes', { signal: opts.signal })).sandboxes.map((s) => new Sandbox(t, s))));
    return all.flat();
  }

  /** A one-shot run in a fresh sandbox (POST /v1/run); sent elsewhere only if it cannot have started. */
  static async run(opts = {}) {
    const body = { ...createBody(opts, { timeoutIsLifetime: false }), ...execBody(opts),
      ...commandFields(opts.cmd, opts) };
    const [, result] = await tryEach(transportsFor(opts), body.template, (tr) => runOn(tr, '/v1/run', body, opts),
      true);
    return result;
  }

  _call(method, sub, opts) {
    return this._transport.request(method, `/v1/sandboxes/${enc(this.id)}${sub}`, opts);
  }

  /** The sandbox's current state from the server. */
  async refresh({ signal } = {}) {
    this.info = await this._call('GET', '', { signal });
    return this.info;
  }

  /** Runs `cmd` (a string for /bin/sh -c, or an argv array). Streams to onStdout/onStderr when given. */
  exec(cmd, opts = {}) {
    return runOn(this._transport, `/v1/sandboxes/${enc(this.id)}/exec`,
      { ...execBody(opts), ...commandFields(cmd) }, opts);
  }

  /** Runs `code` in `language` (default python); `repl: true` keeps the interpreter's state between calls. */
  runCode(code, opts = {}) {
    return runOn(this._transport, `/v1/sandboxes/${enc(this.id)}/exec`,
      { ...execBody(opts), language: opts.language ?? 'python', code }, opts);
  }

  /** Ends the sandbox; nothing of it is left. Ending one already gone is not an error. */
  async terminate({ signal } = {}) {
    try {
      await this._call('DELETE', '', { signal });
    } catch (err) {
      if (err.status !== 404) throw err;
    }
  }

  async [Symbol.asyncDispose ?? Symbol.for('Symbol.asyncDispose')]() {
    await this.terminate();
  }
}

function commandFields(cmd, opts = {}) {
  if (Array.isArray(cmd)) return { argv: cmd.map(String) };
  if (typeof cmd === 'string') return { cmd };
  if (opts.code !== undefined) return { language: opts.language ?? 'python', code: opts.code };
  throw new TypeError('a command is a string (run by /bin/sh -c) or an argv array');
}
