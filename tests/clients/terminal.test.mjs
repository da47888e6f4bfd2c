// Terminals (docs/terminals.md) through the official MCP SDK client after
// listTools, against the real server and real sandboxes: the screen comes
// from libvterm inside the box. A Python REPL, cursor addressing, vim
// editing and writing a file through keys, top, a resize seen by stty,
// replay from an old cursor, a bounded flood, a terminal across a client
// reconnect (one server behind supergateway's SSE bridge), and `lost` after
// an idle teardown.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';

import { AGENTBOX_BIN, PACKAGE_DIR, serveListed, tail, sleep, tempDir } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function serve(t, extraArgs = []) {
  const server = await serveListed(t, { extraArgs });
  return server;
}

async function call(client, name, args = {}, stderr = () => '') {
  const r = await client.callTool({ name, arguments: args }, undefined, CALL);
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(stderr())}`);
  return r.structuredContent;
}

const rows = (screen) => screen.split('\n');

/** terminal_read until the program has ended (at most 15 s). */
async function untilExited(c, terminal_id) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const r = await c('terminal_read', { terminal_id, wait_ms: 500 });
    if (r.exited || Date.now() > deadline) return r;
  }
}

describe('terminals', () => {
  test('a Python REPL answers 6*7 with 42 on the screen', async (t) => {
    const s = await serve(t);
    const c = (name, args) => call(s.client, name, args, s.stderr);
    const { terminal_id } = await c('terminal_start', { command: 'python3 -q' });
    const ready = await c('terminal_read', { terminal_id, wait_ms: 10_000, pattern: '>>> ' });
    assert.equal(ready.matched, true, ready.screen);
    const answer = await c('terminal_write', { terminal_id, data: '6*7\r', wait_ms: 10_000, pattern: '^42' });
    assert.equal(answer.matched, true);
    await c('terminal_read', { terminal_id, cursor: answer.next_cursor, wait_ms: 2_000, pattern: '>>> ' });
    const screen = (await c('terminal_read', { terminal_id, cursor: answer.next_cursor })).screen;
    assert.deepEqual(rows(screen).slice(0, 3), ['>>> 6*7', '42', '>>>'], screen);
    // The text a model reads holds the screen too.
    const r = await s.client.callTool({ name: 'terminal_read', arguments: { terminal_id } }, undefined, CALL);
    assert.match(r.content[0].text, /--- screen ---\n>>> 6\*7\n42\n/);
  });

  test('cursor addressing lands where the escape sequence says, and the raw output keeps the escapes', async (t) => {
    const s = await serve(t);
    const c = (name, args) => call(s.client, name, args, s.stderr);
    const { terminal_id } = await c('terminal_start', { command: "printf '\\033[2J\\033[5;10Hhello'; sleep 60", cols: 40, rows: 10 });
    const r = await c('terminal_read', { terminal_id, wait_ms: 10_000, pattern: 'hello' });
    const lines = rows(r.screen);
    assert.equal(lines[4], '         hello', JSON.stringify(r.screen));  // row 5, column 10
    assert.ok(lines.slice(0, 4).every((l) => l === ''));
    assert.deepEqual(r.screen_cursor, { row: 5, col: 15 });
    assert.equal(r.output, '\u001b[2J\u001b[5;10Hhello');
    assert.equal(r.cols, 40);
    assert.equal(r.rows, 10);
  });

  test('vim opens a file, edits it through keys and writes it', async (t) => {
    assert.ok(existsSync('/usr/bin/vim'), 'vim is not installed on this machine (scripts/setup installs it)');
    const s = await serve(t);
    const c = (name, args) => call(s.client, name, args, s.stderr);
    await c('file_write', { path: '/workspace/notes.txt', content: 'first line\n' });
    const { terminal_id } = await c('terminal_start', { command: 'vim -u NONE -N notes.txt' });
    const opened = await c('terminal_read', { terminal_id, wait_ms: 10_000, pattern: '"notes.txt" 1L' });
    assert.equal(rows(opened.screen)[0], 'first line', opened.screen);
    assert.match(rows(opened.screen)[1], /^~/);  // vim's empty-line marker
    await c('terminal_write', { terminal_id, data: 'Goadded by vim\u001b', wait_ms: 3_000, pattern: 'added by vim' });
    const edited = await c('terminal_read', { terminal_id });
    assert.deepEqual(rows(edited.screen).slice(0, 2), ['first line', 'added by vim'], edited.screen);
    await c('terminal_write', { terminal_id, data: ':wq\r' });
    const done = await untilExited(c, terminal_id);
    assert.equal(done.exited, true, done.screen);
    assert.equal(done.exit_code, 0);
    const file = await c('file_read', { path: '/workspace/notes.txt' });
    assert.equal(file.content, 'first line\nadded by vim\n');
  });

  test('top renders its header on the screen', async (t) => {
    const s = await serve(t);
    const c = (name, args) => call(s.client, name, args, s.stderr);
    const { terminal_id } = await c('terminal_start', { command: 'top -d 1', cols: 100, rows: 30 });
    const r = await c('terminal_read', { terminal_id, wait_ms: 15_000, pattern: 'PID +USER' });
    assert.equal(r.matched, true, r.screen);
    assert.match(rows(r.screen)[0], /^top - .*load average/);
    assert.ok(rows(r.screen).some((l) => /Tasks: +\d+ total/.test(l)), r.screen);
    await c('terminal_write', { terminal_id, data: 'q' });
    const quit = await untilExited(c, terminal_id);
    assert.equal(quit.exited, true);
  });

  test('a resize is what stty size reports; an old cursor replays, a new one reads on', async (t) => {
    const s = await serve(t);
    const c = (name, args) => call(s.client, name, args, s.stderr);
    const { terminal_id, cols, rows: height } = await c('terminal_start', {});
    assert.deepEqual([cols, height], [80, 24]);
    const first = await c('terminal_write', { terminal_id, data: 'stty size\r', wait_ms: 10_000, pattern: '24 80\\r?\\n' });
    assert.equal(first.matched, true, first.screen);
    const resized = await c('terminal_resize', { terminal_id, cols: 120, rows: 40 });
    assert.deepEqual([resized.cols, resized.rows], [120, 40]);
    const second = await c('terminal_write', { terminal_id, data: 'stty size\r', wait_ms: 10_000, pattern: '40 120\\r?\\n' });
    assert.equal(second.matched, true, second.screen);
    assert.ok(!second.output.includes('24 80'), 'a write shows only what came after it');
    const replay = await c('terminal_read', { terminal_id, cursor: 0 });
    assert.match(replay.output, /24 80[\s\S]*40 120/);
    assert.equal(replay.next_cursor, replay.output_bytes);
    const none = await c('terminal_read', { terminal_id, cursor: replay.next_cursor, wait_ms: 300 });
    assert.equal(none.output, '');
    const killed = await c('terminal_kill', { terminal_id });
    assert.equal(killed.status, 'killed');
    const list = await c('terminal_list');
    assert.deepEqual(list.terminals.map((x) => [x.terminal_id, x.status]), [[terminal_id, 'killed']]);
    const after = await s.client.callTool({ name: 'terminal_write', arguments: { terminal_id, data: 'x' } }, undefined, CALL);
    assert.equal(after.isError, true);
    const unknown = await s.client.callTool({ name: 'terminal_read', arguments: { terminal_id: 'term-99' } }, undefined, CALL);
    assert.equal(unknown.isError, true);
    assert.equal(unknown._meta?.['agentbox/error']?.code, 'TERMINAL_NOT_FOUND');
    assert.match(unknown.content[0].text, /^TERMINAL_NOT_FOUND: no terminal 'term-99'/);
  });

  test('a flood keeps head and tail only, and the server stays responsive', async (t) => {
    const s = await serve(t);
    const c = (name, args) => call(s.client, name, args, s.stderr);
    const { terminal_id } = await c('terminal_start', { command: "head -c 8000000 /dev/zero | tr '\\0' x; echo; echo flood-done" });
    const r = await c('terminal_read', { terminal_id, wait_ms: 60_000, pattern: 'flood-done' });
    assert.equal(r.matched, true);
    const end = await untilExited(c, terminal_id);
    assert.equal(end.exited, true);
    assert.ok(end.output_bytes > 8_000_000, `output_bytes ${end.output_bytes}`);
    const middle = await c('terminal_read', { terminal_id, cursor: 4_000_000 });
    assert.ok(middle.skipped_bytes > 0, 'the middle of the flood is not kept');
    assert.ok(middle.output.length < 40_000, `a read is bounded (${middle.output.length})`);
    const status = await c('exec', { command: 'echo alive' });
    assert.equal(status.stdout, 'alive\n');
  });

  test('a pattern over a 200 KB line neither kills nor hangs the agent', async (t) => {
    // What a box prints is an attacker's input: std::regex overflowed its
    // stack on `a.*z` over such a line and never ended on `(a*)*b`.
    const s = await serve(t);
    const c = (name, args) => call(s.client, name, args, s.stderr);
    const { terminal_id } = await c('terminal_start', { command: "python3 -c \"print('a' * 200000 + 'z'); print('ready')\"; sleep 60" });
    const r = await c('terminal_read', { terminal_id, wait_ms: 20_000, pattern: 'a.*z|^ready' });
    assert.equal(r.matched, true);
    const started = Date.now();
    const none = await c('terminal_read', { terminal_id, cursor: 0, wait_ms: 1_000, pattern: '(a*)*b' });
    assert.equal(none.matched, false);
    assert.ok(Date.now() - started < 10_000, `the wait ended after ${Date.now() - started} ms`);
    assert.equal((await c('exec', { command: 'echo alive' })).stdout, 'alive\n');
    assert.equal((await c('terminal_list')).terminals[0].status, 'running');
  });

  test('bad sizes and oversized writes are refused with a sentence', async (t) => {
    const s = await serve(t);
    const big = await s.client.callTool({ name: 'terminal_start', arguments: { cols: 500, rows: 200 } }, undefined, CALL);
    assert.equal(big.isError, true);
    assert.match(big.content[0].text, /at most 20000 cells/);
    const { terminal_id } = await call(s.client, 'terminal_start', { command: 'cat' }, s.stderr);
    const long = await s.client.callTool({ name: 'terminal_write', arguments: { terminal_id, data: 'x'.repeat(70_000) } }, undefined, CALL);
    assert.equal(long.isError, true);
  });

  test('a terminal outlives its client: a second client of the same server reads it on', async (t) => {
    const gateway = join(PACKAGE_DIR, '../conformance/node_modules/supergateway/dist/index.js');
    assert.ok(existsSync(gateway), `supergateway is not installed at ${gateway} (scripts/setup installs tests/conformance)`);
    const state = tempDir('agentbox-terminal-');
    const port = 18000 + Math.floor(Math.random() * 1000);
    const child = spawn(process.execPath, [gateway, '--stdio', `${AGENTBOX_BIN} serve --state-dir ${state.dir}`,
      '--outputTransport', 'sse', '--port', String(port)], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let log = '';
    child.stdout.on('data', (d) => { log += d; });
    child.stderr.on('data', (d) => { log += d; });
    t.after(async () => {
      // The whole group: the gateway and the server it spawned, which would
      // otherwise hold the log pipes (and this test process) open.
      const exited = new Promise((ok) => (child.exitCode !== null ? ok() : child.once('exit', ok)));
      try { process.kill(-child.pid, 'SIGTERM'); } catch { /* already gone */ }
      await exited;
      child.stdout.destroy();
      child.stderr.destroy();
      state.cleanup();
    });
    const connect = async () => {
      for (let i = 0; ; i++) {
        const client = new Client({ name: 'terminal-reconnect', version: '0' }, { capabilities: {} });
        try {
          await client.connect(new SSEClientTransport(new URL(`http://127.0.0.1:${port}/sse`)));
          await client.listTools();
          return client;
        } catch (e) {
          await client.close().catch(() => {});  // a failed attempt's event source would retry forever
          if (i > 100) throw new Error(`cannot reach the gateway: ${e.message}\n${tail(log)}`);
          await sleep(100);
        }
      }
    };
    const first = await connect();
    const { terminal_id } = await call(first, 'terminal_start', { command: 'python3 -q' }, () => log);
    await call(first, 'terminal_read', { terminal_id, wait_ms: 10_000, pattern: '>>> ' }, () => log);
    await call(first, 'terminal_write', { terminal_id, data: 'x = 6*7\r', wait_ms: 2_000 }, () => log);
    await first.close();
    const second = await connect();
    const list = await call(second, 'terminal_list', {}, () => log);
    assert.deepEqual(list.terminals.map((x) => [x.terminal_id, x.status]), [[terminal_id, 'running']]);
    const r = await call(second, 'terminal_write', { terminal_id, data: 'x\r', wait_ms: 10_000, pattern: '^42' }, () => log);
    assert.equal(r.matched, true, r.screen);
    const replay = await call(second, 'terminal_read', { terminal_id, cursor: 0 }, () => log);
    assert.match(replay.output, /x = 6\*7/);
    await second.close();
  });

  test('after an idle teardown a terminal is listed lost and new ids go on after it', async (t) => {
    const s = await serve(t, ['--idle-timeout', '2s', '--background-keepalive', '0s']);
    const c = (name, args) => call(s.client, name, args, s.stderr);
    const { terminal_id } = await c('terminal_start', { command: 'sleep 600' });
    assert.equal(terminal_id, 'term-1');
    const deadline = Date.now() + 30_000;
    while ((await c('sandbox_status')).state !== 'stopped') {
      assert.ok(Date.now() < deadline, 'no idle teardown');
      await sleep(200);
    }
    const list = await c('terminal_list');
    assert.deepEqual(list.terminals.map((x) => [x.terminal_id, x.status]), [['term-1', 'lost']]);
    const next = await c('terminal_start', { command: 'sleep 1' });
    assert.equal(next.terminal_id, 'term-2');
    const lost = await c('terminal_read', { terminal_id: 'term-1' });
    assert.equal(lost.status, 'lost');
    assert.equal(lost.exited, true);
  });
});
