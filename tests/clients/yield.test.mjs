// exec {yield_ms} through the official MCP SDK client after listTools (so the
// SDK checks the yielded result against exec's output schema): the call
// answers at yield_ms with the output so far and a process id; the command
// goes on under process_output / process_wait / process_kill, in its session.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, tail } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function serve(t) {
  const server = await startServer({ testTools: false });
  await server.client.listTools();
  t.after(() => server.close());
  const call = async (name, args = {}) => {
    const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
    assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
    return r;
  };
  return { server, call };
}

describe('exec that yields', () => {
  test('a long command answers at yield_ms and is followed to its end', async (t) => {
    const { call } = await serve(t);
    const started = Date.now();
    const r = await call('exec', { command: 'echo building; sleep 2; echo built; cd /tmp', yield_ms: 500 });
    assert.ok(Date.now() - started < 1_800, `answered after ${Date.now() - started} ms`);
    const s = r.structuredContent;
    assert.equal(s.running, true);
    assert.equal(s.stdout, 'building\n');
    assert.equal(s.exit_code, undefined);
    assert.match(r.content[0].text, /still running after \d+ ms as process "exec-\d+"; next: process_output/);
    const out = await call('process_output', { process_id: s.process_id, offset: s.next_offset, wait_ms: 10_000, pattern: '^built' });
    assert.equal(out.structuredContent.stdout, 'built\n');
    const done = await call('process_wait', { process_id: s.process_id, timeout_ms: 10_000 });
    assert.equal(done.structuredContent.status, 'exited');
    assert.equal(done.structuredContent.exit_code, 0);
    const pwd = await call('exec', { command: 'pwd' });
    assert.equal(pwd.structuredContent.stdout, '/tmp\n');
  });

  test('a quick command with yield_ms is an ordinary result', async (t) => {
    const { call } = await serve(t);
    const r = await call('exec', { command: 'echo hi', yield_ms: 10_000 });
    assert.equal(r.structuredContent.running, undefined);
    assert.equal(r.structuredContent.exit_code, 0);
    assert.match(r.content[0].text, /\[exit code 0, \d+ ms\]$/);
  });

  test('process_kill stops a yielded command and the session carries on', async (t) => {
    const { call } = await serve(t);
    const r = await call('exec', { command: 'sleep 600', yield_ms: 200 });
    const listed = await call('process_list');
    assert.ok(listed.structuredContent.processes.some((p) => p.process_id === r.structuredContent.process_id && p.status === 'running'));
    const killed = await call('process_kill', { process_id: r.structuredContent.process_id, signal: 'SIGKILL' });
    assert.equal(killed.structuredContent.status, 'killed');
    assert.equal((await call('exec', { command: 'echo next' })).structuredContent.stdout, 'next\n');
  });
});
