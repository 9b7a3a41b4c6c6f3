// tests/typescript-client/cluster.test.mjs: multi-node placement against three scripted nodes on Unix sockets.
// The nodes answer /v1/capacity, create and exec from a script, so each placement rule is forced and checked:
// the freest node gets the sandbox, a full (429) or vanished node passes the create on, an exec is never retried.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Sandbox, CapacityFullError, ConflictError, ServerGoneError, RequestTimeoutError } from 'nsbox';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nsbox-ts-cluster-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function node(name, { running, max, createStatus = 201, execReset = false, execSilent = false, streamError = null }) {
  const sock = path.join(dir, `${name}.sock`);
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url.split('?')[0]}`);
    req.resume();
    req.on('end', () => {
      const capacity = { sandboxes: { running, max, per_client_max: max }, pool: {} };
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
  return new Promise((resolve) => server.listen(sock, () => resolve({ url: `unix://${sock}`, seen, server })));
}

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
