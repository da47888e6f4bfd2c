// Small file calls run on the server's stdin reader (docs/files.md, "Small
// files: the call path"); they must never make it wait on a sandbox. Here the
// sandbox's agent is frozen (SIGSTOP from the host) while 24 file_writes of
// 200 KiB are sent at once: more than the agent's 1 MiB pipe holds, so some
// must fall back to a thread of their own. The server keeps answering pings,
// another conversation's file calls and its own tools/list meanwhile, and
// every write completes once the agent runs again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';

import { sleep, startServer, tail } from './helpers.mjs';

function children(pid) {
  const out = [];
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    const text = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
    if (text) out.push(...text.split(' ').map(Number));
  }
  return out;
}
const comm = (pid) => readFileSync(`/proc/${pid}/comm`, 'utf8').trim();

/** The agent of the only sandbox of conversation-less server `pid`: bwrap's child (the agent is pid 1 inside). */
function agentsOf(pid) {
  return children(pid).filter((p) => comm(p) === 'bwrap').flatMap((b) => children(b));
}

// The server's last log lines go with any failure.
const withLog = (body) => async (t) => {
  const server = await startServer({ testTools: false });
  t.after(() => server.close());
  try {
    await body(t, server);
  } catch (err) {
    err.message += `\n--- server stderr ---\n${tail(server.stderr(), 40)}`;
    throw err;
  }
};

test('a frozen sandbox does not hold up the server or other conversations', { timeout: 120_000 }, withLog(async (t, server) => {
  const { client } = server;
  const call = (name, args, timeout = 60_000) => client.callTool({ name, arguments: args }, undefined, { timeout });

  const other = await call('file_write', { path: '/workspace/o.txt', content: 'other', conversation: 'other' });
  assert.ok(!other.isError, JSON.stringify(other));
  const before = new Set(agentsOf(server.transport.pid));
  const first = await call('file_write', { path: '/workspace/a.txt', content: 'a', conversation: 'frozen' });
  assert.ok(!first.isError, JSON.stringify(first));
  const frozen = agentsOf(server.transport.pid).filter((p) => !before.has(p));
  assert.equal(frozen.length, 1, `expected one new agent, found ${frozen}`);
  process.kill(frozen[0], 'SIGSTOP');
  let resumed = false;
  t.after(() => { if (!resumed) process.kill(frozen[0], 'SIGCONT'); });

  const content = 'z'.repeat(200 * 1024);
  const writes = [];
  for (let i = 0; i < 24; i++)
    writes.push(call('file_write', { path: `/workspace/w${i}.txt`, content, conversation: 'frozen' }));
  await sleep(200);
  // The server answers while 24 calls wait on the frozen agent.
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    await client.ping({ timeout: 2000 });
    const r = await call('file_read', { path: '/workspace/o.txt', conversation: 'other' }, 2000);
    assert.equal(r.structuredContent.content, 'other');
    assert.ok(performance.now() - t0 < 1000, `ping + other conversation took ${performance.now() - t0} ms\n${tail(server.stderr())}`);
  }
  assert.ok((await client.listTools()).tools.length > 10);

  process.kill(frozen[0], 'SIGCONT');
  resumed = true;
  const results = await Promise.all(writes);
  for (const r of results) assert.ok(!r.isError, JSON.stringify(r.content));
  const listed = await call('file_list', { path: '/workspace', conversation: 'frozen' });
  assert.equal(listed.structuredContent.entries.filter((e) => /^\/workspace\/w\d+\.txt$/.test(e.path)).length, 24);
}));

test('a frozen sandbox can still be destroyed, and its queued calls fail instead of hanging', { timeout: 120_000 }, withLog(async (t, server) => {
  const { client } = server;
  const call = (name, args, timeout = 60_000) => client.callTool({ name, arguments: args }, undefined, { timeout });

  const first = await call('file_write', { path: '/workspace/a.txt', content: 'a', conversation: 'frozen' });
  assert.ok(!first.isError, JSON.stringify(first));
  const [agent] = agentsOf(server.transport.pid);
  process.kill(agent, 'SIGSTOP');
  t.after(() => { try { process.kill(agent, 'SIGCONT'); } catch {} });

  const content = 'z'.repeat(200 * 1024);
  const writes = [];
  for (let i = 0; i < 24; i++)
    writes.push(call('file_write', { path: `/workspace/w${i}.txt`, content, conversation: 'frozen' }));
  await sleep(200);
  const t0 = performance.now();
  const destroyed = await call('sandbox_destroy', { conversation: 'frozen' }, 30_000);
  const took = performance.now() - t0;
  assert.ok(!destroyed.isError, JSON.stringify(destroyed.content));
  assert.ok(took < 10_000, `destroy took ${took} ms\n${tail(server.stderr())}`);
  const results = await Promise.all(writes);
  // Each queued write either made it before the sandbox went or fails with a sandbox error.
  for (const r of results) if (r.isError) assert.match(r._meta?.['agentbox/error']?.code, /^SANDBOX_/);
  await client.ping({ timeout: 2000 });
  const fresh = await call('file_read', { path: '/workspace/a.txt', conversation: 'frozen' });
  assert.ok(fresh.isError, 'a destroyed sandbox comes back empty');
}));
