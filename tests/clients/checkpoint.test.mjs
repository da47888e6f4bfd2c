// Consistent snapshots and checkpoints (docs/design.md section 9) through
// the official MCP SDK client after listTools, against the real server:
// sandbox_snapshot says how long the sandbox's processes were frozen
// (frozen_ms, freeze) and its result passes the output schema; a sandbox in
// use gets checkpoints (snapshot_list reason "checkpoint") every
// --checkpoint-interval, an unused one none.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { serveListed, tail, sleep } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 90_000 }, fn);
const CALL = { timeout: 30_000 };

async function serve(t, extraArgs) {
  const server = await serveListed(t, { extraArgs });
  return server;
}

async function call(server, name, args = {}) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
  return r;
}

const reasons = async (server) =>
  (await call(server, 'snapshot_list')).structuredContent.snapshots.map((s) => s.reason);

describe('snapshots of a running sandbox', () => {
  test('sandbox_snapshot freezes the processes and says for how long', async (t) => {
    const server = await serve(t, []);
    await call(server, 'process_start', { command: 'while :; do date +%s%N > /workspace/now; done' });
    const r = await call(server, 'sandbox_snapshot', { label: 'busy' });
    const s = r.structuredContent;
    assert.equal(typeof s.frozen_ms, 'number', `frozen_ms: ${JSON.stringify(s)}`);
    assert.ok(s.frozen_ms >= 0 && s.frozen_ms < 60_000);
    assert.match(s.freeze, /^(cgroup freezer|SIGSTOP)$/);
    assert.match(r.content[0].text, /Processes frozen \d+ ms/);
  });

  test('a sandbox in use is checkpointed every --checkpoint-interval, an unused one is not', async (t) => {
    const server = await serve(t, ['--checkpoint-interval', '1s']);
    await call(server, 'exec', { command: 'echo 1 > /workspace/a' });
    const deadline = Date.now() + 20_000;
    let got = [];
    while (Date.now() < deadline) {
      await call(server, 'exec', { command: 'date >> /workspace/a' });
      got = await reasons(server);
      if (got.filter((r) => r === 'checkpoint').length >= 2) break;
      await sleep(300);
    }
    assert.ok(got.filter((r) => r === 'checkpoint').length >= 2, `two checkpoints while in use: ${got}`);
    // Unused from now on: after the checkpoint of its last use (up to one
    // interval and one idle tick later), no more.
    await sleep(2500);
    const settled = (await reasons(server)).length;
    await sleep(3000);
    assert.equal((await reasons(server)).length, settled, 'no checkpoint of a sandbox nobody used');
  });
});
