// Code contexts (docs/design.md section 12) through the official MCP SDK
// client after listTools (so structuredContent is checked against the output
// schemas), against the real server and real sandboxes: the box's own
// python3, node and bash keep their state between calls, the last value is
// the result, matplotlib figures come back as PNG image content, a timeout
// interrupts a cell and keeps the context, and after an idle teardown the
// successful cells are replayed into a new interpreter.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { serveListed, tail, sleep } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function serve(t, extraArgs = []) {
  const server = await serveListed(t, { extraArgs });
  const raw = (name, args = {}) => server.client.callTool({ name, arguments: args }, undefined, CALL);
  const c = async (name, args = {}) => {
    const r = await raw(name, args);
    assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
    return r.structuredContent;
  };
  return { ...server, raw, c };
}

describe('code contexts', () => {
  test('python keeps variables, imports and functions; the last expression is the result', async (t) => {
    const { c, raw } = await serve(t);
    const first = await c('code_run', { code: 'import math\nx = 41\ndef twice(v):\n    return 2 * v\nprint("set")' });
    assert.equal(first.context, 'python');
    assert.equal(first.language, 'python');
    assert.equal(first.stdout, 'set\n');
    assert.equal(first.result, null);
    assert.equal(first.error, null);
    assert.equal(first.replayed, 0);
    const second = await c('code_run', { code: 'y = twice(x) + 1\nmath.sqrt(y - 2) if False else y' });
    assert.equal(second.result, '83');
    const r = await raw('code_run', { code: '{"a": [1, 2]}' });
    assert.equal(r.structuredContent.result, "{'a': [1, 2]}");
    assert.match(r.content[0].text, /Out: \{'a': \[1, 2\]\}/);
    // Output of a subprocess is the cell's output too (captured at the fd).
    const sub = await c('code_run', { code: 'import subprocess\nsubprocess.run(["echo", "from a child"])\nNone' });
    assert.equal(sub.stdout, 'from a child\n');
  });

  test('two contexts are isolated, and a context of another language is refused', async (t) => {
    const { c, raw } = await serve(t);
    const a = await c('code_context_create', { language: 'python' });
    const b = await c('code_context_create', { language: 'python' });
    assert.notEqual(a.context, b.context);
    await c('code_run', { context: a.context, code: 'v = "a"' });
    await c('code_run', { context: b.context, code: 'v = "b"' });
    assert.equal((await c('code_run', { context: a.context, code: 'v' })).result, "'a'");
    assert.equal((await c('code_run', { context: b.context, code: 'v' })).result, "'b'");
    const none = await c('code_run', { code: "'v' in globals()" });  // the default context is a third one
    assert.equal(none.result, 'False');
    const mismatch = await raw('code_run', { context: a.context, language: 'bash', code: 'echo' });
    assert.equal(mismatch.isError, true);
    assert.equal(mismatch._meta['agentbox/error'].code, 'INVALID_ARGUMENTS');
    const unknown = await raw('code_run', { context: 'ctx-nope', code: '1' });
    assert.equal(unknown.isError, true);
    assert.equal(unknown._meta['agentbox/error'].code, 'CONTEXT_NOT_FOUND');
    const list = await c('code_context_list');
    assert.deepEqual(list.contexts.map((x) => x.context).sort(), [a.context, b.context, 'python'].sort());
    assert.ok(list.contexts.every((x) => x.running));
    assert.equal(list.contexts.find((x) => x.context === a.context).cells, 2);
    assert.deepEqual(await c('code_context_delete', { context: a.context }), { context: a.context, deleted: true });
    const gone = await raw('code_run', { context: a.context, code: 'v' });
    assert.equal(gone._meta['agentbox/error'].code, 'CONTEXT_NOT_FOUND');
  });

  test('an exception is an error with its traceback, and the context goes on', async (t) => {
    const { c, raw } = await serve(t);
    await c('code_run', { code: 'def boom():\n    return 1 / 0' });
    const r = await raw('code_run', { code: 'print("before")\nboom()' });
    assert.ok(!r.isError, 'a cell that raised is a normal result');
    const s = r.structuredContent;
    assert.equal(s.stdout, 'before\n');
    assert.equal(s.error.name, 'ZeroDivisionError');
    assert.equal(s.error.value, 'division by zero');
    assert.match(s.error.traceback, /Traceback \(most recent call last\):[\s\S]*in boom[\s\S]*ZeroDivisionError/);
    assert.match(r.content[0].text, /ZeroDivisionError: division by zero/);
    assert.equal((await c('code_run', { code: 'boom.__name__' })).result, "'boom'");
  });

  test('a matplotlib figure comes back as PNG image content and in images[]', async (t) => {
    const { raw } = await serve(t);
    const r = await raw('code_run', {
      code: 'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("t")\nplt.show()',
    });
    assert.ok(!r.isError, r.content?.[0]?.text);
    const s = r.structuredContent;
    assert.equal(s.error, null, JSON.stringify(s.error));
    assert.equal(s.images.length, 1);
    assert.equal(s.images[0].mime_type, 'image/png');
    const image = r.content.find((b) => b.type === 'image');
    assert.ok(image, JSON.stringify(r.content.map((b) => b.type)));
    assert.equal(image.mimeType, 'image/png');
    assert.equal(image.data, s.images[0].data);
    const png = Buffer.from(image.data, 'base64');
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    // The figure was closed: the next cell has none.
    const next = await raw('code_run', { code: 'len(plt.get_fignums())' });
    assert.equal(next.structuredContent.result, '0');
    assert.equal(next.structuredContent.images.length, 0);
    assert.equal(next.content.length, 1);
  });

  test('a timeout interrupts `while True: pass` and the context keeps its variables', async (t) => {
    const { c } = await serve(t);
    await c('code_run', { code: 'kept = 7' });
    const started = Date.now();
    const r = await c('code_run', { code: 'while True: pass', timeout_ms: 1000 });
    assert.ok(Date.now() - started < 10_000);
    assert.equal(r.interrupted, true);
    assert.equal(r.error.name, 'KeyboardInterrupt');
    assert.match(r.error.value, /interrupted/);
    assert.equal((await c('code_run', { code: 'kept * 6' })).result, '42');
  });

  test('an MCP cancel interrupts the cell; a second run meanwhile is CONTEXT_BUSY', async (t) => {
    const { c, raw, client } = await serve(t);
    await c('code_run', { code: 'kept = "still here"' });
    const abort = new AbortController();
    const running = client.callTool({ name: 'code_run', arguments: { code: 'import time\nwhile True: time.sleep(0.01)' } },
      undefined, { ...CALL, signal: abort.signal });
    await sleep(1000);
    const busy = await raw('code_run', { code: 'kept' });
    assert.equal(busy.isError, true);
    assert.equal(busy._meta['agentbox/error'].code, 'CONTEXT_BUSY');
    abort.abort();
    await assert.rejects(running);
    // The cancel interrupts the cell at once, not at its 120 s timeout.
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = await raw('code_run', { code: 'kept' });
      if (!r.isError) {
        assert.equal(r.structuredContent.result, "'still here'");
        break;
      }
      assert.equal(r._meta['agentbox/error'].code, 'CONTEXT_BUSY');
      assert.ok(Date.now() < deadline, 'the cancelled cell still runs');
      await sleep(200);
    }
  });

  test('an interpreter that ignores SIGINT is killed after the grace and replayed on the next run', async (t) => {
    const { c } = await serve(t);
    await c('code_run', { code: 'base = 5' });
    await c('code_run', { code: 'import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nNone' });
    const r = await c('code_run', { code: 'while True: pass', timeout_ms: 500 });
    assert.equal(r.interrupted, true);
    assert.equal(r.error.name, 'Killed');
    assert.match(r.error.value, /did not stop within 2 s of SIGINT/);
    const back = await c('code_run', { code: 'base + 1' });
    assert.equal(back.result, '6');
    assert.equal(back.replayed, 2);
    assert.equal(back.restarted, true);
  });

  test('a flood of output neither blocks the interpreter nor passes the inline cap', async (t) => {
    const { c } = await serve(t);
    const r = await c('code_run', { code: 'import sys\nprint("x" * 3_000_000)\nsys.stderr.write("e" * 500_000)\n"done"' });
    assert.equal(r.result, "'done'");
    assert.equal(r.truncated, true);
    assert.ok(r.stdout.length + r.stderr.length <= 30_000, `${r.stdout.length} + ${r.stderr.length}`);
    assert.ok(r.stdout.startsWith('xxx') && r.stderr.endsWith('eee'));
  });

  test('after an idle teardown the cells are replayed and the state is back', async (t) => {
    const { c, raw } = await serve(t, ['--idle-timeout', '2s', '--background-keepalive', '0s']);
    await c('code_run', { code: 'import json\ndata = {"n": 1}' });
    await c('code_run', { code: 'data["n"] += 1' });
    await c('code_run', { code: 'raise ValueError("not kept")' });  // failed cells are not replayed
    const deadline = Date.now() + 30_000;
    while ((await c('sandbox_status')).state !== 'stopped') {
      assert.ok(Date.now() < deadline, 'no idle teardown');
      await sleep(200);
    }
    assert.equal((await c('code_context_list')).contexts[0].running, false);
    const r = await raw('code_run', { code: 'json.dumps(data)' });
    assert.ok(!r.isError, r.content?.[0]?.text);
    assert.equal(r.structuredContent.replayed, 2);
    assert.equal(r.structuredContent.restarted, true);
    assert.equal(r.structuredContent.result, '\'{"n": 2}\'');
    assert.match(r.content[0].text, /started again and 2 earlier successful cell\(s\) replayed/);
  });

  test('sandbox_destroy drops the contexts: nothing is replayed into the next sandbox', async (t) => {
    const { c } = await serve(t);
    await c('code_run', { code: 'gone = 1' });
    // keep_snapshots keeps the conversation's sandbox id; the contexts go all the same.
    await c('sandbox_destroy', { keep_snapshots: true });
    assert.deepEqual((await c('code_context_list')).contexts, []);
    const r = await c('code_run', { code: 'gone' });
    assert.equal(r.replayed, 0);
    assert.equal(r.error.name, 'NameError');
  });

  test('javascript keeps state, awaits a promise, reports errors and is interrupted', async (t) => {
    const { c } = await serve(t);
    const first = await c('code_run', { language: 'javascript', code: 'const os = require("os"); var n = 40; function inc(v) { return v + 1 }' });
    assert.equal(first.context, 'javascript');
    assert.equal(first.error, null, JSON.stringify(first.error));
    assert.equal((await c('code_run', { language: 'javascript', code: 'inc(inc(n))' })).result, '42');
    assert.equal((await c('code_run', { language: 'javascript', code: 'Promise.resolve({ k: typeof os.cpus })' })).result, "{ k: 'function' }");
    const logged = await c('code_run', { language: 'javascript', code: 'console.log("hi"); undefined' });
    assert.equal(logged.stdout, 'hi\n');
    assert.equal(logged.result, null);
    const failed = await c('code_run', { language: 'javascript', code: 'null.field' });
    assert.equal(failed.error.name, 'TypeError');
    assert.match(failed.error.traceback, /TypeError: Cannot read properties of null/);
    const spun = await c('code_run', { language: 'javascript', code: 'while (true) {}', timeout_ms: 1000 });
    assert.equal(spun.interrupted, true);
    assert.match(spun.error.value, /interrupted/);
    const waited = await c('code_run', { language: 'javascript', code: 'new Promise(() => {})', timeout_ms: 1000 });
    assert.equal(waited.interrupted, true);  // a Promise that never settles is given up at SIGINT too
    assert.equal(waited.error.name, 'Interrupted');
    assert.equal((await c('code_run', { language: 'javascript', code: 'n' })).result, '40');
  });

  test('bash keeps variables, functions and cwd; a failing status is the error; a loop is interrupted', async (t) => {
    const { c } = await serve(t);
    await c('code_run', { language: 'bash', code: 'greet() { echo "hello $1"; }\nname=box\ncd /tmp' });
    const r = await c('code_run', { language: 'bash', code: 'greet "$name"; pwd' });
    assert.equal(r.stdout, 'hello box\n/tmp\n');
    assert.equal(r.result, null);
    assert.equal(r.error, null);
    const failed = await c('code_run', { language: 'bash', code: 'echo oops >&2; false' });
    assert.deepEqual(failed.error, { name: 'exit status', value: '1', traceback: '' });
    assert.equal(failed.stderr, 'oops\n');
    const spun = await c('code_run', { language: 'bash', code: 'while true; do :; done', timeout_ms: 1000 });
    assert.equal(spun.interrupted, true);
    assert.equal(spun.error.name, 'exit status');
    assert.match(spun.error.value, /interrupted/);
    assert.equal((await c('code_run', { language: 'bash', code: 'echo "$name"' })).stdout, 'box\n');
  });
});
