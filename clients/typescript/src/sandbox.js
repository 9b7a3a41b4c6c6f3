// clients/typescript/src/sandbox.js: Sandbox (create, connect, list, exec, runCode, terminate), its files, results.
import { NsboxError, NotFoundError, ServerGoneError, fromStreamError } from './errors.js';
import { endpointUrls, Transport, DEFAULT_EXEC_TIMEOUT_S, EXEC_GRACE_MS } from './transport.js';
import { tryEach } from './cluster.js';

function transportsFor(opts = {}) {
  return endpointUrls(opts.url).map((u) => new Transport(u, { token: opts.token,
    requestTimeoutMs: opts.requestTimeoutMs, maxResponseBytes: opts.maxResponseBytes }));
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const isNumber = (v) => typeof v === 'number';
const isString = (v) => typeof v === 'string';

// The JSON type of each result field ExecResult gives (absent or null: its default); status must be a non-empty
// string. Another type is a malformed answer (NsboxError), never a wrong property.
const RESULT_FIELDS = {
  exit_code: ['a number', isNumber], signal: ['a number', isNumber], reason: ['a string', isString],
  stdout: ['a string', isString], stderr: ['a string', isString], stdout_bytes: ['a number', isNumber],
  stderr_bytes: ['a number', isNumber], stdout_truncated: ['a boolean', (v) => typeof v === 'boolean'],
  stderr_truncated: ['a boolean', (v) => typeof v === 'boolean'], wall_ms: ['a number', isNumber],
  cpu_ms: ['a number', isNumber], peak_memory_bytes: ['a number', isNumber],
  changed_files: ['an array of objects', (v) => Array.isArray(v) && v.every(isObject)],
  repl: ['an object', isObject],
};

// A value of an answer, shortly: what it is, never all of a large one.
function shown(v) {
  if (isObject(v)) return `an object with keys ${Object.keys(v).slice(0, 10).join(', ') || '(none)'}`;
  if (Array.isArray(v)) return `an array of ${v.length}`;
  return String(JSON.stringify(typeof v === 'string' ? v.slice(0, 200) : v));
}

function checkResult(raw, where, url) {
  if (!isObject(raw)) throw new NsboxError(`${where}: the answer is not a result object: ${shown(raw)}`, { url });
  if (!isString(raw.status) || !raw.status) {
    throw new NsboxError(`${where}: the result has no status (a string): ${shown(raw.status)}`, { url });
  }
  for (const [key, [kind, fits]] of Object.entries(RESULT_FIELDS)) {
    if (raw[key] != null && !fits(raw[key])) {
      throw new NsboxError(`${where}: the result has a ${key} that is not ${kind}: ${shown(raw[key])}`, { url });
    }
  }
  return raw;
}

/** The server's description of a sandbox, checked: an object whose id is a non-empty string. */
function sandboxInfo(info, where, url) {
  if (!isObject(info) || !isString(info.id) || !info.id) {
    throw new NsboxError(`${where} at ${url}: the answer has no sandbox id: ${shown(info)}`, { url });
  }
  return info;
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
    // A wrong-shaped answer is the server's fault, said as one: not a TypeError, nor a function for an array.
    if (!isObject(answer) || !Array.isArray(answer.entries) || !answer.entries.every(isObject)) {
      throw new NsboxError(`GET files?list at ${this._sbx.url}: the answer has no array of entries (objects): ` +
        shown(answer), { url: this._sbx.url });
    }
    const entries = answer.entries;
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
    return new ExecResult(checkResult(answer, `${urlPath} at ${transport.url}`, transport.url));
  }
  let result = null;
  let failure = null;
  const delivered = new Set();
  const where = `${urlPath} at ${transport.url}`;
  const answer = await transport.request('POST', urlPath, {
    json: body, timeoutMs, signal, query: { stream: 'true' },
    onLine: (line) => {
      // A line is a JSON object; one of a type this client does not know is skipped (docs/clients.md).
      const bad = (what) => new NsboxError(`${where}: ${what}: ${shown(line)}`, { url: transport.url });
      if (!isObject(line)) throw bad('a stream line is not a JSON object');
      if (line.type === 'stdout' || line.type === 'stderr') {
        if (line.data != null && !isString(line.data)) throw bad(`a ${line.type} line's data is not a string`);
        delivered.add(line.type);
      }
      if (line.type === 'stdout') onStdout?.(line.data ?? '');
      else if (line.type === 'stderr') onStderr?.(line.data ?? '');
      else if (line.type === 'result') result = checkResult(line.result, where, transport.url);
      else if (line.type === 'error') {
        const e = line.error;
        if (!isObject(e) || ['code', 'message'].some((k) => e[k] != null && !isString(e[k]))) {
          throw bad("an error line's error is not {code, message}");
        }
        failure = e;
      }
    },
  });
  if (failure) throw fromStreamError(failure, transport.url);
  // A server that answered the whole result at once.
  if (!result && isObject(answer) && 'status' in answer) result = checkResult(answer, where, transport.url);
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
    return new Sandbox(t, sandboxInfo(info, 'POST /v1/sandboxes', t.url));
  }

  /** A handle on an existing sandbox; looks for it on each endpoint. */
  static async connect(id, opts = {}) {
    let notFound = null;
    let other = null;
    for (const t of transportsFor(opts)) {
      try {
        const info = await t.request('GET', `/v1/sandboxes/${enc(id)}`, { signal: opts.signal });
        return new Sandbox(t, sandboxInfo(info, 'GET /v1/sandboxes/{id}', t.url));
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
    const all = await Promise.all(transportsFor(opts).map(async (t) => {
      const answer = await t.request('GET', '/v1/sandboxes', { signal: opts.signal });
      if (!isObject(answer) || !Array.isArray(answer.sandboxes)) {
        throw new NsboxError(`GET /v1/sandboxes at ${t.url}: the answer has no sandboxes array: ${shown(answer)}`,
          { url: t.url });
      }
      return answer.sandboxes.map((s) => new Sandbox(t, sandboxInfo(s, 'GET /v1/sandboxes', t.url)));
    }));
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
    this.info = sandboxInfo(await this._call('GET', '', { signal }), 'GET /v1/sandboxes/{id}', this.url);
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
