// file_watch / file_changes through the official MCP SDK client after
// listTools (the SDK checks every result against the output schemas), against
// real sandboxes: inotify runs in the box's agent. Created, modified, moved
// and deleted files; recursion into new directories; a glob; overflow of the
// bounded queue; errors; a watch ended by an idle teardown.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, tail, sleep } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function serve(t, extraArgs = []) {
  const server = await startServer({ testTools: false, extraArgs });
  await server.client.listTools();
  t.after(() => server.close());
  const call = async (name, args = {}) => {
    const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
    assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
    return r.structuredContent;
  };
  const fails = async (name, args) => {
    const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
    assert.equal(r.isError, true, `${name} should fail: ${r.content?.[0]?.text}`);
    return { code: r._meta?.['agentbox/error']?.code, text: r.content[0].text };
  };
  return { server, call, fails };
}

const pairs = (events) => events.map((e) => [e.type, e.path, ...(e.from ? [e.from] : [])]);

describe('file watch', () => {
  test('create, modify, move and delete, each once, in order', async (t) => {
    const { call } = await serve(t);
    await call('exec', { command: 'mkdir -p /workspace/w' });
    const w = await call('file_watch', { path: 'w' });
    assert.match(w.watch_id, /^watch-/);
    assert.equal(w.path, '/workspace/w');
    await call('exec', { command: 'cd /workspace/w && echo a > a.txt && echo more >> a.txt && echo more >> a.txt && mv a.txt b.txt && rm b.txt' });
    const r = await call('file_changes', { watch_id: w.watch_id, wait_ms: 5_000 });
    assert.deepEqual(pairs(r.events), [
      ['created', '/workspace/w/a.txt'],
      ['moved', '/workspace/w/b.txt', '/workspace/w/a.txt'],
      ['deleted', '/workspace/w/b.txt'],
    ]);
    assert.equal(r.overflowed, false);
    // The default cursor goes on from there; an old cursor replays.
    await call('exec', { command: 'echo x >> /workspace/w/c.txt' });
    const next = await call('file_changes', { watch_id: w.watch_id, wait_ms: 5_000 });
    assert.deepEqual(pairs(next.events), [['created', '/workspace/w/c.txt']]);
    const replay = await call('file_changes', { watch_id: w.watch_id, cursor: 0 });
    assert.equal(replay.events.length, 4);
    await call('exec', { command: 'sleep 0.2; echo y >> /workspace/w/c.txt' });
    const modified = await call('file_changes', { watch_id: w.watch_id, wait_ms: 5_000 });
    assert.deepEqual(pairs(modified.events), [['modified', '/workspace/w/c.txt']]);
  });

  test('wait_ms returns as soon as something changes', async (t) => {
    const { call } = await serve(t);
    const w = await call('file_watch', { path: '/workspace' });
    await call('process_start', { command: 'sleep 1; touch /workspace/late' });
    const started = Date.now();
    const r = await call('file_changes', { watch_id: w.watch_id, wait_ms: 20_000 });
    assert.deepEqual(pairs(r.events), [['created', '/workspace/late']]);
    assert.ok(Date.now() - started < 10_000);
    const quiet = await call('file_changes', { watch_id: w.watch_id, wait_ms: 300 });
    assert.deepEqual(quiet.events, []);
  });

  test('recursive into new directories, not when told otherwise, and a glob', async (t) => {
    const { call } = await serve(t);
    await call('exec', { command: 'mkdir -p /workspace/r/old /workspace/r/.git' });
    const all = await call('file_watch', { path: '/workspace/r' });
    const flat = await call('file_watch', { path: '/workspace/r', recursive: false });
    const py = await call('file_watch', { path: '/workspace/r', glob: '*.py' });
    assert.equal(all.directories, 2, '.git is left out');
    await call('exec', { command: 'cd /workspace/r && touch old/x.py && mkdir -p new/deeper && touch new/deeper/y.py new/z.txt && touch .git/index' });
    const deep = await call('file_changes', { watch_id: all.watch_id, wait_ms: 5_000 });
    const paths = deep.events.map((e) => e.path);
    for (const p of ['/workspace/r/old/x.py', '/workspace/r/new', '/workspace/r/new/deeper/y.py', '/workspace/r/new/z.txt'])
      assert.ok(paths.includes(p), `${p} in ${JSON.stringify(paths)}`);
    assert.ok(!paths.some((p) => p.includes('.git')), '.git is not watched');
    const top = await call('file_changes', { watch_id: flat.watch_id, wait_ms: 5_000 });
    assert.deepEqual(pairs(top.events), [['created', '/workspace/r/new']]);
    const only = await call('file_changes', { watch_id: py.watch_id, wait_ms: 5_000 });
    assert.deepEqual(only.events.map((e) => e.path).sort(), ['/workspace/r/new/deeper/y.py', '/workspace/r/old/x.py']);
  });

  test('a flood overflows the bounded queue and says so; pages stay bounded', async (t) => {
    const { call } = await serve(t);
    await call('exec', { command: 'mkdir /workspace/f' });
    const w = await call('file_watch', { path: '/workspace/f' });
    await call('exec', { command: 'cd /workspace/f && for i in $(seq 12000); do : > f$i; done', timeout_ms: 60_000 });
    const r = await call('file_changes', { watch_id: w.watch_id, cursor: 0, wait_ms: 2_000 });
    assert.equal(r.overflowed, true);
    assert.ok(r.events.length <= 500 && r.events.length > 0, `${r.events.length} events in a page`);
    assert.equal(r.more, true);
    const page2 = await call('file_changes', { watch_id: w.watch_id, cursor: r.next_cursor });
    assert.equal(page2.overflowed, false, 'nothing was lost after the first page');
    assert.ok(page2.next_cursor > r.next_cursor);
  });

  test('bad watches are errors with a sentence', async (t) => {
    const { call, fails } = await serve(t);
    await call('exec', { command: 'touch /workspace/file' });
    assert.equal((await fails('file_watch', { path: '/workspace/file' })).code, 'INVALID_ARGUMENTS');
    assert.equal((await fails('file_watch', { path: '/workspace/none' })).code, 'FILE_NOT_FOUND');
    const unknown = await fails('file_changes', { watch_id: 'watch-00000000' });
    assert.equal(unknown.code, 'WATCH_NOT_FOUND');
    assert.match(unknown.text, /file_watch again/);
    // The watched directory itself going away ends the watch.
    await call('exec', { command: 'mkdir /workspace/gone' });
    const w = await call('file_watch', { path: '/workspace/gone' });
    await call('exec', { command: 'rmdir /workspace/gone' });
    const r = await call('file_changes', { watch_id: w.watch_id, wait_ms: 5_000 });
    assert.deepEqual(pairs(r.events), [['deleted', '/workspace/gone']]);
    await sleep(100);
    assert.equal((await call('file_changes', { watch_id: w.watch_id })).watching, false);
  });

  test('a watch ends with an idle teardown', async (t) => {
    const { call, fails } = await serve(t, ['--idle-timeout', '2s', '--background-keepalive', '0s']);
    const w = await call('file_watch', { path: '/workspace' });
    const deadline = Date.now() + 30_000;
    while ((await call('sandbox_status')).state !== 'stopped') {
      assert.ok(Date.now() < deadline, 'no idle teardown');
      await sleep(200);
    }
    const gone = await fails('file_changes', { watch_id: w.watch_id });
    assert.equal(gone.code, 'WATCH_NOT_FOUND');
  });
});
