// tests/typescript-client/cluster.test.mjs: the client against scripted nodes on Unix sockets: placement, odd answers.
// The nodes answer /v1/capacity, create and exec from a script, so each placement rule is forced and checked:
// the freest node gets the sandbox, a full (429) or vanished node passes the create on, an exec is never retried.
// Scripted answers also check what no real server does on demand: answers cut short, huge lines, deadlines, 500s,
// and what the client sends (bodies, headers).
import { test, after, mock } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import util from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  Sandbox, Transport, CapacityFullError, ConflictError, ServerGoneError, RequestTimeoutError, InternalError, SetupFailedError,
  NotFoundError, NsboxError,
} from 'nsbox';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nsbox-ts-cluster-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

// A scripted node. `exec(req, res)` answers the execs when given; `ctl.cut` (set on the answer) makes every answer a
// 200 that ends half-way through the Content-Length it promised; `ctl.answer(req, res)`, when set, answers any request
// for which it returns true; `ctl.requests` has each request's method, url, headers and body.
function node(name, { running, max, createStatus = 201, execReset = false, execSilent = false, streamError = null,
  exec = null, client = undefined }) {
  const sock = path.join(dir, `${name}.sock`);
  const seen = [];
  const ctl = { seen, cut: false, requests: [], answer: null };
  const server = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url.split('?')[0]}`);
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      ctl.requests.push({ method: req.method, url: req.url, headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8') });
      if (ctl.answer?.(req, res)) return undefined;
      if (ctl.cut) {
        const data = Buffer.from(JSON.stringify({ id: `sb-${name}`, sandboxes: [], entries: [], status: 'ok',
          padding: 'x'.repeat(4096) }));
        res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': data.length });
        return res.write(data.subarray(0, data.length >> 1), () => res.socket.destroy());
      }
      const capacity = { sandboxes: { running, max, per_client_max: max }, pool: {}, client };
      if (req.url === '/v1/capacity') return res.end(JSON.stringify(capacity));
      if (req.method === 'POST' && req.url === '/v1/sandboxes') {
        if (createStatus === 0) return undefined; // never answers
        if (createStatus === 429) {
          res.writeHead(429, { 'Content-Type': 'application/json' });
          return res.end(JSON.stringify({ error: { code: 'too_many_requests', message: `${name} is full` },
            capacity }));
        }
        res.writeHead(201, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ id: `sb-${name}`, state: 'running' }));
      }
      if (req.url.split('?')[0].endsWith('/exec')) {
        if (execReset) return req.socket.destroy();
        if (execSilent) return undefined; // never answers
        if (exec) return exec(req, res);
        if (streamError && req.url.includes('stream=true')) { // the 200 is sent; the error comes as a line
          res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
          return res.end(`${JSON.stringify({ type: 'error', error: streamError })}\n`);
        }
        return res.end(JSON.stringify({ status: 'ok', exit_code: 0, stdout: name, stderr: '' }));
      }
      res.writeHead(404);
      res.end(JSON.stringify({ error: { code: 'not_found', message: 'no route' } }));
    });
  });
  return new Promise((resolve) => server.listen(sock, () => resolve(Object.assign(ctl, { url: `unix://${sock}`,
    server }))));
}

const ndjson = (res, lines) => {
  res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
  res.end(lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
};

test('create goes to the node with the most free sandbox slots, and its calls stay there', async () => {
  const nodes = [await node('a', { running: 9, max: 10 }), await node('b', { running: 1, max: 10 }),
    await node('c', { running: 5, max: 10 })];
  const sbx = await Sandbox.create({ url: nodes.map((n) => n.url) });
  assert.equal(sbx.id, 'sb-b');
  assert.equal(sbx.url, nodes[1].url);
  assert.equal((await sbx.exec('true')).stdout, 'b');
  assert.ok(!nodes[0].seen.some((s) => s.startsWith('POST')) && !nodes[2].seen.some((s) => s.startsWith('POST')));
  for (const n of nodes) n.server.close();
});

test('a node whose share for this client is full is tried after one with room for it', async () => {
  const roomyButNotForMe = await node('share', { running: 0, max: 10,
    client: { sandboxes: { running: 2, max: 2 }, memory_bytes: { free: 0 } } });
  const busier = await node('busy', { running: 7, max: 10, client: { sandboxes: { running: 0, max: 2 } } });
  const sbx = await Sandbox.create({ url: [roomyButNotForMe.url, busier.url] });
  assert.equal(sbx.id, 'sb-busy');
  assert.ok(!roomyButNotForMe.seen.includes('POST /v1/sandboxes'), 'the node with no room for this client was asked');
  roomyButNotForMe.server.close();
  busier.server.close();
});

test('a full node (429) and a vanished node pass the create on to the next', async () => {
  const full = await node('full', { running: 0, max: 10, createStatus: 429 });
  const ok = await node('ok', { running: 8, max: 10 });
  const gone = `unix://${path.join(dir, 'gone.sock')}`;
  const sbx = await Sandbox.create({ url: [gone, full.url, ok.url] });
  assert.equal(sbx.id, 'sb-ok');
  assert.ok(full.seen.includes('POST /v1/sandboxes'), 'the freest node was tried first');
  const allFull = await Sandbox.create({ url: [full.url, gone] }).catch((e) => e);
  assert.ok(allFull instanceof ServerGoneError || allFull instanceof CapacityFullError, String(allFull));
  const onlyFull = await Sandbox.create({ url: [full.url] }).catch((e) => e);
  assert.ok(onlyFull instanceof CapacityFullError);
  assert.equal(onlyFull.capacity.sandboxes.max, 10);
  full.server.close();
  ok.server.close();
});

test('an exec whose node drops the connection is never retried elsewhere', async () => {
  const flaky = await node('flaky', { running: 0, max: 10, execReset: true });
  const other = await node('other', { running: 5, max: 10 });
  const sbx = await Sandbox.create({ url: [flaky.url, other.url] });
  assert.equal(sbx.id, 'sb-flaky');
  await assert.rejects(sbx.exec('echo once'), ServerGoneError);
  assert.equal(flaky.seen.filter((s) => s.endsWith('/exec')).length, 1);
  assert.ok(!other.seen.some((s) => s.endsWith('/exec')));
  flaky.server.close();
  other.server.close();
});

test('a call without an answer ends by the caller signal, or by the client deadline', async () => {
  const silent = await node('silent', { running: 0, max: 10, execSilent: true });
  const sbx = await Sandbox.create({ url: [silent.url] });
  const aborted = await sbx.exec('sleep 1', { signal: AbortSignal.timeout(200) }).catch((e) => e);
  assert.equal(aborted.name, 'AbortError', String(aborted));
  const hung = await node('hung', { running: 0, max: 10, createStatus: 0 });
  const late = await Sandbox.create({ url: [hung.url], requestTimeoutMs: 300 }).catch((e) => e);
  assert.ok(late instanceof RequestTimeoutError, String(late));
  assert.equal(late.requestSent, true);
  silent.server.close();
  hung.server.close();
});

test('an error line in a streamed answer is the typed error its code stands for', async () => {
  const ended = await node('ended', { running: 0, max: 10,
    streamError: { code: 'conflict', message: 'sandbox sb-ended has ended' } });
  try {
    const sbx = await Sandbox.create({ url: ended.url });
    await assert.rejects(sbx.exec('true', { onStdout: () => {} }), (err) =>
      err instanceof ConflictError && err.status === 409 && err.code === 'conflict' && /has ended/.test(err.message));
  } finally {
    ended.server.close();
  }
});

test('connect: a sandbox unknown to one node while another is gone is ServerGoneError, in either order', async () => {
  const live = await node('live', { running: 0, max: 10 });  // 404s the GET: it does not have the sandbox
  const dead = `unix://${path.join(dir, 'dead.sock')}`;
  try {
    for (const url of [[dead, live.url], [live.url, dead]]) {
      await assert.rejects(Sandbox.connect('sb-x', { url }), ServerGoneError, url.join(','));
    }
    await assert.rejects(Sandbox.connect('sb-x', { url: [live.url] }), NotFoundError);
  } finally {
    live.server.close();
  }
});

test('a stream that ends without its result is ServerGoneError; an empty answer is an NsboxError', async () => {
  const n = await node('odd', { running: 0, max: 10, exec: (req, res) => {
    if (req.url.includes('stream=true')) return ndjson(res, [{ type: 'stdout', data: 'x' }]);
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end('null');
  } });
  try {
    const sbx = await Sandbox.create({ url: n.url });
    await assert.rejects(sbx.exec('true', { onStdout: () => {} }), (err) =>
      err instanceof ServerGoneError && /ended without a result/.test(err.message));
    await assert.rejects(sbx.exec('true'), (err) =>
      err instanceof NsboxError && !(err instanceof TypeError) && /not a result object/.test(err.message));
  } finally {
    n.server.close();
  }
});

test('an answer cut short of its Content-Length is ServerGoneError, never a shorter answer', async () => {
  const n = await node('cut', { running: 0, max: 10 });
  try {
    const sbx = await Sandbox.create({ url: n.url });
    n.cut = true;
    const calls = { 'files.read': () => sbx.files.read('f'), exec: () => sbx.exec('true'), refresh: () => sbx.refresh(),
      list: () => Sandbox.list({ url: n.url }), connect: () => Sandbox.connect(sbx.id, { url: n.url }) };
    for (const [name, call] of Object.entries(calls)) {
      await assert.rejects(call(), (err) => err instanceof ServerGoneError && /cut short/.test(err.message), name);
    }
  } finally {
    n.server.close();
  }
});

test('the result feeds the callback of each stream none of whose chunks came, once', async () => {
  const result = { status: 'ok', exit_code: 0, stdout: 'streamed\n', stderr: 'only in the result\n' };
  let answer = 'stream';
  const n = await node('partial', { running: 0, max: 10, exec: (req, res) => {
    if (answer === 'whole') return res.end(JSON.stringify(result)); // a server that does not stream
    ndjson(res, [...(answer === 'stream' ? [{ type: 'stdout', data: 'streamed\n' }] : []), { type: 'result', result }]);
  } });
  try {
    const sbx = await Sandbox.create({ url: n.url });
    // A stdout chunk then the result; the result alone (as a REPL cell's); the whole result as plain JSON.
    for (const mode of ['stream', 'result alone', 'whole']) {
      answer = mode;
      const out = [];
      const err = [];
      const r = await sbx.exec('x', { onStdout: (c) => out.push(c), onStderr: (c) => err.push(c) });
      assert.deepEqual([out, err, r.stderr], [['streamed\n'], ['only in the result\n'], 'only in the result\n'], mode);
    }
  } finally {
    n.server.close();
  }
});

test('a result line of 32 MiB in 1 KiB pieces arrives whole', async () => {
  // Each piece is searched once: a client that searched (or copied) the whole pending line for every piece would
  // do some 500 G character steps here and not be done within the exec's deadline (its 1 s time-out and the grace).
  const big = '0123456789abcde\n'.repeat(2 << 20);
  const result = { status: 'ok', exit_code: 0, stdout: big };
  const line = Buffer.from(`${JSON.stringify({ type: 'result', result })}\n`);
  const n = await node('big', { running: 0, max: 10, exec: (req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
    for (let i = 0; i < line.length; i += 1024) res.write(line.subarray(i, i + 1024));
    res.end();
  } });
  try {
    const sbx = await Sandbox.create({ url: n.url });
    const out = [];
    const r = await sbx.exec('x', { timeout: 1, onStdout: (c) => out.push(c) });
    assert.deepEqual([r.stdout.length, r.stdout === big, out.length, out[0] === big], [big.length, true, 1, true]);
  } finally {
    n.server.close();
  }
});

test('an exec waits for a compiled language\'s compile step as well as for its program', async () => {
  // The compile runs before the program under its own time-out: a deadline of the program's alone would give up
  // while the server is still compiling. The node never answers; the mocked clock runs the client's deadline out.
  const silent = await node('compiling', { running: 0, max: 10, execSilent: true });
  const sbx = await Sandbox.create({ url: silent.url });
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    const waited = {};
    const runs = { c: { language: 'c', timeout: 10, compileTimeout: 20 }, rust: { language: 'rust', timeout: 10 },
      python: { language: 'python', timeout: 10 } };
    for (const [name, opts] of Object.entries(runs)) {
      const pending = sbx.runCode('code', opts).catch((e) => e);
      mock.timers.tick(2 ** 31);
      const err = await pending;
      assert.ok(err instanceof RequestTimeoutError, String(err));
      waited[name] = Number(/no answer within (\d+) ms/.exec(err.message)[1]);
    }
    // c: 10 s + its 20 s compile + 30 s; rust: 10 s + 60 s (no compileTimeout: the bound) + 30 s; python: no compile.
    assert.deepEqual(waited, { c: 60_000, rust: 100_000, python: 40_000 });
  } finally {
    mock.timers.reset();
    silent.server.close();
  }
});

test('an exec without a timeout sends 60 s and waits for that, not for the server\'s default', async () => {
  const silent = await node('defaults', { running: 0, max: 10, execSilent: true });
  const sbx = await Sandbox.create({ url: silent.url });
  mock.timers.enable({ apis: ['setTimeout'] });
  try {
    const waited = [];
    const runs = [() => sbx.exec('sleep 100'), () => sbx.runCode('x'), () => sbx.exec('x', { onStdout() {} })];
    for (const [i, run] of runs.entries()) {
      const pending = run().catch((e) => e);
      while (silent.requests.length < i + 2) await new Promise((resolve) => setImmediate(resolve)); // the body came
      mock.timers.tick(2 ** 31);
      const err = await pending;
      assert.ok(err instanceof RequestTimeoutError, String(err));
      waited.push(Number(/no answer within (\d+) ms/.exec(err.message)[1]));
    }
    assert.deepEqual(waited, [90_000, 90_000, 90_000]);
    const sent = silent.requests.filter((r) => r.url.includes('/exec')).map((r) => JSON.parse(r.body).timeout);
    assert.deepEqual(sent, [60, 60, 60]);
  } finally {
    mock.timers.reset();
    silent.server.close();
  }
});

test('the token never shows when a sandbox or its transport is printed, and is still sent', async () => {
  const n = await node('printed', { running: 0, max: 10 });
  try {
    const sbx = await Sandbox.create({ url: n.url, token: 'tok-hidden-123' });
    await sbx.exec('true');
    for (const printed of [util.inspect(sbx, { depth: Infinity, showHidden: true }), util.format('%o', sbx),
      util.format('%j', sbx._transport), util.inspect(sbx._transport, { depth: Infinity })]) {
      assert.ok(!printed.includes('tok-hidden-123'), printed.slice(0, 400));
    }
    assert.deepEqual(n.requests.map((r) => r.headers.authorization), Array(2).fill('Bearer tok-hidden-123'));
  } finally {
    n.server.close();
  }
});

test('the server\'s internal fault is InternalError, answered or as a stream\'s error line', async () => {
  let error = { code: 'internal', message: 'engine fault' };
  const n = await node('faulty', { running: 0, max: 10, exec: (req, res) => {
    if (req.url.includes('stream=true')) return ndjson(res, [{ type: 'error', error }]);
    res.writeHead(500, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ error }));
  } });
  try {
    const sbx = await Sandbox.create({ url: n.url });
    const is = (Cls, code) => (err) => err instanceof Cls && err.status === 500 && err.code === code;
    await assert.rejects(sbx.exec('true'), is(InternalError, 'internal'));
    await assert.rejects(sbx.exec('true', { onStdout() {} }), is(InternalError, 'internal'));
    error = { code: 'setup_failed', message: 'no room for the sandbox' };
    await assert.rejects(sbx.exec('true'), is(SetupFailedError, 'setup_failed'));
    await assert.rejects(sbx.exec('true', { onStdout() {} }), is(SetupFailedError, 'setup_failed'));
  } finally {
    n.server.close();
  }
});

test('create refuses both maxLifetime and its other name timeout, and sends nothing', async () => {
  const n = await node('lifetime', { running: 0, max: 10 });
  try {
    await assert.rejects(Sandbox.create({ url: n.url, maxLifetime: 60, timeout: 120 }),
      (err) => err instanceof TypeError && /maxLifetime or as timeout .its other name., not both/.test(err.message));
    assert.deepEqual(n.requests, []);
    await Sandbox.create({ url: n.url, timeout: 120 });
    assert.deepEqual(JSON.parse(n.requests[0].body), { max_lifetime: 120 });
  } finally {
    n.server.close();
  }
});

// Answers `head` then x's, `size` bytes in all (chunked unless `length`), each piece once the client took the one
// before; resolves whether the client closed the connection before taking them all.
function flood(res, status, contentType, size, { length = false, head = '' } = {}) {
  res.writeHead(status, { 'Content-Type': contentType, ...(length ? { 'Content-Length': size } : {}) });
  const piece = Buffer.alloc(65536, 'x');
  let sent = 0;
  return new Promise((resolve) => {
    res.on('close', () => resolve(sent < size));
    const more = () => {
      while (sent < size) {
        const data = sent === 0 ? Buffer.concat([Buffer.from(head), piece]) : piece;
        const chunk = data.subarray(0, Math.min(piece.length, size - sent));
        sent += chunk.length;
        if (!res.write(chunk)) return res.once('drain', more);
      }
      return res.end();
    };
    more();
  });
}

test('an answer over maxResponseBytes is an NsboxError naming the cap, and the rest is left unread', async () => {
  assert.equal(new Transport('unix:///x').maxResponseBytes, 256 * 1024 * 1024);
  assert.throws(() => new Transport('unix:///x', { maxResponseBytes: 0 }), RangeError);
  const n = await node('flooded', { running: 0, max: 10 });
  try {
    const sbx = await Sandbox.create({ url: n.url, maxResponseBytes: 1 << 20 });
    const fourMiB = 4 << 20;
    const cases = {
      'a file read, chunked': ['/files', [200, 'application/octet-stream', fourMiB], () => sbx.files.read('big')],
      'an exec\'s answer, by its Content-Length': ['/exec', [200, 'application/json', fourMiB, { length: true }],
        () => sbx.exec('x')],
      'a stream line': ['/exec', [200, 'application/x-ndjson', fourMiB, { head: '{"type": "stdout", "data": "' }],
        () => sbx.exec('x', { onStdout() {} })],
      'an error body over 1 MiB': [`/${sbx.id}`, [500, 'text/plain', fourMiB, { length: true }], () => sbx.refresh()],
    };
    for (const [name, [suffix, args, call]] of Object.entries(cases)) {
      let left = null;
      n.answer = (req, res) => req.url.split('?')[0].endsWith(suffix) && (left = flood(res, ...args));
      const err = await call().catch((e) => e);
      n.answer = null;
      if (name === 'an error body over 1 MiB') {
        assert.ok(err instanceof InternalError && err.status === 500, `${name}: ${err}`);
        assert.match(err.message, /over the client's cap of 1 MiB/, name);
      } else {
        assert.equal(err.constructor, NsboxError, `${name}: ${err}`);
        assert.match(err.message, /over the client's cap of 1048576 bytes \(maxResponseBytes\)/, name);
      }
      assert.equal(await left, true, `${name}: the client read on past its cap`);
    }
  } finally {
    n.server.close();
  }
});

test('answers of the wrong shape are NsboxError, never a TypeError or a sandbox without an id', async () => {
  const n = await node('odd-shapes', { running: 0, max: 10 });
  try {
    const sbx = await Sandbox.create({ url: n.url });
    const json = (route, text) => (req, res) => {
      if (!route(req)) return false;
      const ndjson = req.url.includes('stream=true');
      res.writeHead(200, { 'Content-Type': ndjson ? 'application/x-ndjson' : 'application/json' });
      res.end(ndjson ? `${text}\n` : text);
      return true;
    };
    const post = (req) => req.method === 'POST' && req.url === '/v1/sandboxes';
    const list = (req) => req.method === 'GET' && req.url === '/v1/sandboxes';
    const get = (req) => req.method === 'GET' && req.url === `/v1/sandboxes/${sbx.id}`;
    const exec = (req) => req.url.split('?')[0].endsWith('/exec');
    const listing = (req) => req.method === 'GET' && req.url.includes('/files?') && req.url.includes('list=true');
    const cases = [
      ...['null', '[]', '{}', '"str"', '{"id": 123}', '{"id": ""}'].map((t) => [post, t,
        () => Sandbox.create({ url: n.url })]),
      ...['{}', '{"sandboxes": null}', '{"sandboxes": [null]}', '{"sandboxes": [{}]}'].map((t) => [list, t,
        () => Sandbox.list({ url: n.url })]),
      ...['null', '{"id": 5}'].map((t) => [get, t, () => Sandbox.connect(sbx.id, { url: n.url })]),
      ...['null', '{"stdout": 7}', '{"status": "ok", "stdout": 7}', '{"id": "sb-1"}',
        '{"status": "ok", "changed_files": [null]}'].map((t) => [exec, t, () => sbx.exec('x')]),
      // A listing: null was a TypeError, [] answered Array.prototype.entries (a function).
      ...['null', '[]', '{"entries": 5}', '{"entries": [1, 2]}', '{"entries": null}'].map((t) => [listing, t,
        () => sbx.files.list('.')]),
      // A stream line that is not a JSON object is a malformed answer, as is a known line of the wrong shape.
      ...['null', '[1]', '{"type": "stdout", "data": 7}', '{"type": "error", "error": "x"}',
        '{"type": "result", "result": {"status": 1}}', '{"type": "result", "result": null}'].map((t) => [exec, t,
        () => sbx.exec('x', { onStdout() {} })]),
    ];
    for (const [route, text, call] of cases) {
      n.answer = json(route, text);
      const err = await call().catch((e) => e);
      assert.equal(err?.constructor, NsboxError, `${text}: ${err}`);
    }
    // A line that is a JSON object of a type unknown here is skipped.
    n.answer = json(exec, '{"type": "progress", "data": 7}\n{"x": 1}\n{"type": "result", "result": ' +
      '{"status": "ok", "stdout": "s"}}');
    assert.equal((await sbx.exec('x', { onStdout() {} })).stdout, 's');
  } finally {
    n.server.close();
  }
});

test('a path in an http URL prefixes every route; a query or a relative socket is refused, nothing sent', async () => {
  // The path was dropped: the routes, and the token, went to the host's root instead of the API's mount.
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url);
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end('{"sandboxes": []}');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const base = `http://127.0.0.1:${server.address().port}`;
    for (const suffix of ['/api', '/api/']) {
      assert.deepEqual(await new Transport(base + suffix).request('GET', '/v1/sandboxes'), { sandboxes: [] });
      assert.equal(seen.at(-1), '/api/v1/sandboxes');
    }
    for (const bad of [`${base}?x=1`, `${base}/api#top`, 'unix://relative.sock', 'tcp://h:1']) {
      assert.throws(() => new Transport(bad), (e) => e instanceof NsboxError && e.requestSent === false &&
        e.url === bad, bad);
    }
    // A TLS handshake that fails (here: TLS to a plain HTTP port) reached no server: gone, nothing sent, as in Python
    // (a cluster then tries the next node). It was a plain NsboxError with requestSent true.
    const tls = await new Transport(`https://127.0.0.1:${server.address().port}`).request('GET', '/v1/sandboxes')
      .catch((e) => e);
    assert.ok(tls instanceof ServerGoneError && tls.requestSent === false, String(tls));
    assert.equal(seen.length, 2);
  } finally {
    server.close();
  }
});

test('a large body goes out after 10 s without a 100 Continue, as in Go, when the server ignores Expect', async () => {
  // It waited for a go-ahead that never came, and failed with RequestTimeoutError with nothing sent.
  let got = -1;
  const server = http.createServer();
  server.on('checkContinue', (req, res) => { // answered without writeContinue: the body must come on its own
    let n = 0;
    req.on('data', (chunk) => { n += chunk.length; });
    req.on('end', () => {
      got = n;
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{"path": "/workspace/big", "size": 1}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const t = new Transport(`http://127.0.0.1:${server.address().port}`, { requestTimeoutMs: 30_000 });
    // A lower bound only (a busy machine makes the wait longer, never shorter), on the monotonic clock.
    const started = performance.now();
    await t.request('PUT', '/v1/sandboxes/sb-1/files', { query: { path: 'big' }, body: Buffer.alloc(1536 * 1024) });
    assert.equal(got, 1536 * 1024);
    assert.ok(performance.now() - started >= 9_000, 'sent before the wait');
  } finally {
    server.close();
  }
});
