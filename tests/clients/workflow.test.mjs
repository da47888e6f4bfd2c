// A realistic agent workflow through the official MCP SDK client, using every
// tool in docs/design.md §5 against the real server and real sandboxes: write code,
// build it, two sessions, a background server waited on by port, paged output,
// edit, search, snapshot, destroy, restore, a server restart that finds the
// conversation again; then load, cancellation, progress and client timeouts.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

import { AGENTBOX_BIN, connectStdio, requireBinary, tempDir, tail } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL_TIMEOUT_MS = 30_000;

/** A server on `stateDir` (kept across restarts); close() waits for it to exit. */
function serve(stateDir) {
  requireBinary();
  return connectStdio({ command: AGENTBOX_BIN, args: ['serve', '--state-dir', stateDir],
    name: 'agentbox-workflow-test', timeout: CALL_TIMEOUT_MS });
}

/** Calls a tool that must succeed; returns its structuredContent. */
async function ok(server, name, args, options = {}) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS, ...options });
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)} failed: ${JSON.stringify(r.structuredContent ?? r.content)}\n${tail(server.stderr())}`);
  assert.ok(r.content?.[0]?.text, `${name} has no text content`);
  return r.structuredContent;
}

async function sh(server, conversation, command, extra = {}) {
  const r = await ok(server, 'exec', { command, conversation, ...extra });
  assert.equal(r.exit_code, 0, `\`${command}\` exited ${r.exit_code}: ${r.stderr}`);
  return r.stdout;
}

describe('agent workflow with every tool', () => {
  test('write, build, sessions, background server, edit, search, snapshot, destroy, restore, restart', async (t) => {
    const state = tempDir('agentbox-workflow-');
    const c = 'workflow';
    let server = await serve(state.dir);
    // One hook, server first: removing the state directory under a running
    // server fails (ENOTEMPTY) and would hide the test's own error.
    t.after(async () => {
      await server.close();
      state.cleanup();
    });

    // Files and a build.
    await ok(server, 'file_mkdir', { path: 'src', recursive: true, conversation: c });
    const source = '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n';
    const w = await ok(server, 'file_write', { path: 'src/main.c', content: source, conversation: c });
    assert.equal(w.bytes_written, Buffer.byteLength(source));
    await ok(server, 'file_write', { path: 'build.sh', content: 'set -e\ncc -o src/hello src/main.c\n./src/hello\n', conversation: c });
    assert.equal(await sh(server, c, 'sh build.sh'), 'hello\n');
    const stat = await ok(server, 'file_stat', { path: '/workspace/src/hello', conversation: c });
    assert.equal(stat.exists, true);
    assert.equal(stat.type, 'file');

    // Two sessions: each keeps its own cwd and environment.
    await sh(server, c, 'cd src && export STAGE=default');
    await ok(server, 'file_mkdir', { path: '/workspace/site', conversation: c });
    await ok(server, 'file_write', { path: '/workspace/site/index.html', content: '<p>agentbox</p>\n', conversation: c });
    const created = await ok(server, 'session_create', { name: 'web', cwd: '/workspace/site', conversation: c });
    assert.equal(created.session, 'web');
    assert.equal(await sh(server, c, 'pwd; echo "${STAGE:-unset}"', { session: 'web' }), '/workspace/site\nunset\n');
    assert.equal(await sh(server, c, 'pwd; echo $STAGE'), '/workspace/src\ndefault\n');
    const sessions = await ok(server, 'session_list', { conversation: c });
    assert.deepEqual(sessions.sessions.map((s) => s.session).sort(), ['default', 'web']);

    // A background server, waited on by its port, its log paged.
    const started = await ok(server, 'process_start', { command: 'exec python3 -u -m http.server 8765 --bind 127.0.0.1', session: 'web', conversation: c });
    assert.equal(started.status, 'running');
    const pid = started.process_id;
    const waited = await ok(server, 'process_wait', { process_id: pid, port: 8765, timeout_ms: 15_000, conversation: c });
    assert.equal(waited.port_ready, true, JSON.stringify(waited));
    const page = await sh(server, c, 'python3 -c "import urllib.request as u; print(u.urlopen(\'http://127.0.0.1:8765/index.html\').read().decode(), end=\'\')"');
    assert.equal(page, '<p>agentbox</p>\n');
    const out1 = await ok(server, 'process_output', { process_id: pid, wait_ms: 5000, pattern: 'GET /index.html', conversation: c });
    assert.match(out1.stdout + out1.stderr, /GET \/index\.html/);
    const out2 = await ok(server, 'process_output', { process_id: pid, offset: out1.next_offset, stderr_offset: out1.stderr_next_offset, conversation: c });
    assert.doesNotMatch(out2.stderr ?? '', /GET \/index\.html/, 'paging from next_offset repeated old output');
    const listed = await ok(server, 'process_list', { conversation: c });
    assert.ok(listed.processes.some((p) => p.process_id === pid && p.status === 'running'));
    const killed = await ok(server, 'process_kill', { process_id: pid, conversation: c });
    assert.notEqual(killed.status, 'running');

    // Stdin of a background process.
    const cat = await ok(server, 'process_start', { command: 'cat', conversation: c });
    const wrote = await ok(server, 'process_write', { process_id: cat.process_id, data: 'piped\n', eof: true, conversation: c });
    assert.equal(wrote.bytes_written, 6);
    const catDone = await ok(server, 'process_wait', { process_id: cat.process_id, timeout_ms: 10_000, conversation: c });
    assert.equal(catDone.exit_code, 0);
    assert.equal((await ok(server, 'process_output', { process_id: cat.process_id, conversation: c })).stdout, 'piped\n');

    // Edit, rebuild, search, list, move, read, delete.
    const edit = await ok(server, 'file_edit', { path: '/workspace/src/main.c', old_string: 'puts("hello")', new_string: 'puts("hello, agent")', conversation: c });
    assert.equal(edit.replacements, 1);
    assert.equal(await sh(server, c, 'sh build.sh', { cwd: '/workspace' }), 'hello, agent\n');
    const found = await ok(server, 'file_search', { pattern: 'hello, agent', path: '/workspace', glob: '*.c', conversation: c });
    assert.deepEqual(found.matches.map((m) => [m.path.replace(/^\/workspace\//, ''), m.line]), [['src/main.c', 2]]);
    const entries = await ok(server, 'file_list', { path: '/workspace', recursive: true, conversation: c });
    assert.ok(entries.entries.some((e) => e.path.endsWith('src/main.c') && e.type === 'file'));
    await ok(server, 'file_move', { from: '/workspace/build.sh', to: '/workspace/make.sh', conversation: c });
    assert.match((await ok(server, 'file_read', { path: '/workspace/make.sh', conversation: c })).content, /cc -o src\/hello/);
    assert.equal((await ok(server, 'file_delete', { path: '/workspace/site', recursive: true, conversation: c })).deleted, true);
    await ok(server, 'session_delete', { session: 'web', conversation: c });

    // Snapshot, destroy (keeping snapshots), restore.
    const snap = await ok(server, 'sandbox_snapshot', { label: 'after-build', conversation: c });
    assert.ok(snap.snapshot && snap.files > 0, JSON.stringify(snap));
    const snaps = await ok(server, 'snapshot_list', { conversation: c });
    assert.ok(snaps.snapshots.some((s) => s.snapshot === snap.snapshot && s.label === 'after-build'));
    const status = await ok(server, 'sandbox_status', { conversation: c });
    assert.equal(status.state, 'active');
    assert.equal((await ok(server, 'sandbox_destroy', { keep_snapshots: true, conversation: c })).destroyed, true);
    assert.equal((await ok(server, 'file_stat', { path: '/workspace/src/main.c', conversation: c })).exists, false);
    const restored = await ok(server, 'sandbox_restore', { snapshot: snap.snapshot, conversation: c });
    assert.equal(restored.snapshot, snap.snapshot);
    assert.match((await ok(server, 'file_read', { path: '/workspace/src/main.c', conversation: c })).content, /hello, agent/);
    assert.equal(await sh(server, c, './src/hello', { cwd: '/workspace' }), 'hello, agent\n');
    const before = await ok(server, 'sandbox_status', { conversation: c });

    // A new server process on the same state directory finds the conversation.
    await server.close();
    server = await serve(state.dir);
    const again = await ok(server, 'sandbox_status', { conversation: c });
    assert.equal(again.sandbox, before.sandbox);
    assert.notEqual(again.state, 'none');
    assert.match((await ok(server, 'file_read', { path: '/workspace/src/main.c', conversation: c })).content, /hello, agent/);
    assert.ok((await ok(server, 'snapshot_list', { conversation: c })).snapshots.some((s) => s.snapshot === snap.snapshot));
  });
});

describe('load, cancellation, progress and timeouts through the SDK', () => {
  test('64 calls in flight across 8 conversations, each answered to its caller', async (t) => {
    const state = tempDir('agentbox-workflow-');
    const server = await serve(state.dir);
    t.after(async () => {
      await server.close();
      state.cleanup();
    });
    const calls = Array.from({ length: 64 }, (_, i) =>
      ok(server, 'exec', { command: `sleep 0.05; echo ${i}`, conversation: `par-${i % 8}` }).then((r) => [i, r.stdout]));
    for (const [i, stdout] of await Promise.all(calls)) assert.equal(stdout, `${i}\n`);
  });

  test('AbortSignal cancels a running exec; its processes are killed and the sandbox carries on', async (t) => {
    const state = tempDir('agentbox-workflow-');
    const server = await serve(state.dir);
    t.after(async () => {
      await server.close();
      state.cleanup();
    });
    const c = 'cancel';
    await sh(server, c, 'true');
    const controller = new AbortController();
    const call = server.client.callTool({ name: 'exec', arguments: { command: 'sleep 30; echo done', conversation: c } }, undefined, { signal: controller.signal, timeout: CALL_TIMEOUT_MS });
    setTimeout(() => controller.abort(), 300);
    const t0 = performance.now();
    await assert.rejects(call);
    assert.ok(performance.now() - t0 < 5000);
    // The cancelled command's `sleep` must be gone shortly after.
    let left = '';
    for (let i = 0; i < 20; i++) {
      left = (await ok(server, 'exec', { command: 'pgrep -x sleep || true', conversation: c, session: 'default' })).stdout;
      if (!left.trim()) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(left.trim(), '', 'sleep still running after cancellation');
  });

  test('exec reports progress to onprogress while it runs', async (t) => {
    const state = tempDir('agentbox-workflow-');
    const server = await serve(state.dir);
    t.after(async () => {
      await server.close();
      state.cleanup();
    });
    const seen = [];
    // Over a second: a call faster than that sends no progress (docs/protocol.md, "Progress").
    const r = await ok(server, 'exec', { command: 'for i in 1 2 3 4; do echo step $i; sleep 0.4; done', conversation: 'progress' }, { onprogress: (p) => seen.push(p) });
    assert.equal(r.stdout, 'step 1\nstep 2\nstep 3\nstep 4\n');
    assert.ok(seen.length >= 1, 'no progress notification');
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, 'progress must increase');
  });

  test('a call over the client timeout rejects with RequestTimeout; the server answers the next one', async (t) => {
    const state = tempDir('agentbox-workflow-');
    const server = await serve(state.dir);
    t.after(async () => {
      await server.close();
      state.cleanup();
    });
    await sh(server, 'timeout', 'true');
    await assert.rejects(
      server.client.callTool({ name: 'exec', arguments: { command: 'sleep 10', conversation: 'timeout' } }, undefined, { timeout: 500 }),
      (err) => err instanceof McpError && err.code === ErrorCode.RequestTimeout,
    );
    assert.equal(await sh(server, 'timeout', 'echo still here'), 'still here\n');
  });
});
