// Incremental snapshots (docs/design.md section 9) through the official MCP
// SDK client after listTools (every result checked against its output
// schema), against the real server and sandboxes: a snapshot after a small
// change holds only that change (its `parent`, its own `bytes` against the
// chain's `total_bytes`), restores of either snapshot give back exactly
// their files, and pruning (--keep-snapshots) merges what it removes into
// what is kept, so every kept snapshot still restores.
import { test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, tail } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function serve(t, extraArgs = []) {
  const server = await startServer({ testTools: false, extraArgs });
  t.after(() => server.close());
  await server.client.listTools();
  return server;
}

async function call(server, name, args = {}) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
  return r.structuredContent;
}

const sh = async (server, command) => (await call(server, 'exec', { command })).stdout;
// What the workspace holds: each file's checksum, in order.
const sums = (server) => sh(server, 'find . -type f | sort | xargs sha256sum');

test('a snapshot after a small change holds only the change and both restore exactly', async (t) => {
  const server = await serve(t);
  await sh(server, 'mkdir -p data && for i in $(seq 1 40); do head -c 65536 /dev/urandom > data/f$i; done; sleep 0.1');
  const first = await call(server, 'sandbox_snapshot');
  assert.equal(first.parent, null);
  const atFirst = await sums(server);
  await sh(server, 'sleep 0.1; head -c 65536 /dev/urandom > data/f7; rm data/f8; echo new > added');
  const second = await call(server, 'sandbox_snapshot');
  assert.equal(second.parent, first.snapshot);
  assert.ok(second.bytes * 10 < first.bytes, `the second holds only the change: ${second.bytes} vs ${first.bytes} bytes`);
  const atSecond = await sums(server);
  const listed = (await call(server, 'snapshot_list')).snapshots;
  const row = listed.find((s) => s.snapshot === second.snapshot);
  assert.equal(row.parent, first.snapshot);
  assert.equal(row.total_bytes, first.bytes + second.bytes);
  await call(server, 'sandbox_restore', { snapshot: first.snapshot });
  assert.equal(await sums(server), atFirst);
  await call(server, 'sandbox_restore', { snapshot: second.snapshot });
  assert.equal(await sums(server), atSecond);
});

test('pruning merges what it removes: the kept snapshots still restore', async (t) => {
  const server = await serve(t, ['--keep-snapshots', '2']);
  await sh(server, 'for i in $(seq 1 20); do head -c 32768 /dev/urandom > f$i; done');
  const states = {};
  for (let round = 0; round < 4; round++) {
    await sh(server, `sleep 0.1; head -c 32768 /dev/urandom > f${round + 1}; echo ${round} > round`);
    const s = await call(server, 'sandbox_snapshot');
    states[s.snapshot] = await sums(server);
  }
  const kept = (await call(server, 'snapshot_list')).snapshots;
  assert.equal(kept.length, 2);
  assert.equal(kept[1].parent, null, 'the oldest kept one took in what it inherited');
  assert.equal(kept[0].parent, kept[1].snapshot);
  for (const s of kept) {
    await call(server, 'sandbox_restore', { snapshot: s.snapshot });
    assert.equal(await sums(server), states[s.snapshot], `snapshot ${s.snapshot} restores as it was taken`);
  }
});
