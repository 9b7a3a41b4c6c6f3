// tests/typescript-client/multinode.test.mjs: three real `nsbox serve` nodes (NSBOX_NODES, NSBOX_NODE_PIDS).
// 300 sandboxes spread by the client's placement (each node within ±20 % of 100); one node killed: its sandboxes
// fail with ServerGoneError, the others still run, and new creates go to the survivors.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox, ServerGoneError } from 'nsbox';

const urls = (process.env.NSBOX_NODES ?? '').split(',').filter(Boolean);
const pids = (process.env.NSBOX_NODE_PIDS ?? '').split(',').filter(Boolean).map(Number);
const COUNT = 300;
const made = [];
after(async () => {
  await Promise.all(made.map((s) => s.terminate().catch(() => {})));
});

test('sandboxes spread over three nodes; a killed node fails only its own sandboxes', async () => {
  assert.equal(urls.length, 3, 'NSBOX_NODES names three nodes');
  // In sequence: each create sees the capacity the previous ones left.
  for (let i = 0; i < COUNT; i++) made.push(await Sandbox.create({ url: urls, maxLifetime: 300 }));
  const perNode = urls.map((u) => made.filter((s) => s.url === u).length);
  for (const n of perNode) assert.ok(Math.abs(n - COUNT / 3) <= COUNT / 3 * 0.2, `balanced: ${perNode}`);

  process.kill(pids[0], 'SIGKILL');
  // 200 execs at once on a busy machine: a time-out that only catches a hang (echo ends at once).
  const results = await Promise.allSettled(made.map((s) => s.exec(['echo', s.id], { timeout: 60 })));
  results.forEach((r, i) => {
    if (made[i].url === urls[0]) {
      assert.equal(r.status, 'rejected');
      assert.ok(r.reason instanceof ServerGoneError, String(r.reason));
    } else {
      assert.equal(r.status, 'fulfilled', String(r.reason));
      assert.equal(r.value.stdout, `${made[i].id}\n`);
    }
  });
  for (let i = 0; i < 6; i++) {
    const sbx = await Sandbox.create({ url: urls, maxLifetime: 300 });
    made.push(sbx);
    assert.notEqual(sbx.url, urls[0]);
  }
});
