// Session order through the official MCP SDK client against the real server
// and real sandboxes (docs/protocol.md, "Order"): calls naming one session run
// in the order they were sent, each after the previous one finished, however
// many are in flight, also as a conversation's very first calls (the sandbox
// is still starting) and right after an idle teardown (it is being restored);
// calls on different sessions and conversations still run side by side.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, tail } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 90_000 }, fn);
const CALL = { timeout: 30_000 };

async function serverFor(t, extraArgs = []) {
  const server = await startServer({ testTools: false, extraArgs });
  t.after(() => server.close());
  return server;
}

function call(server, name, args) {
  return server.client.callTool({ name, arguments: args }, undefined, CALL).then((r) => {
    assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
    return r;
  });
}

const exec = (server, command, extra = {}) => call(server, 'exec', { command, ...extra });

/** Lines of a file in the sandbox, read with cat after everything else. */
async function lines(server, file, extra = {}) {
  const r = await exec(server, `cat ${file}`, extra);
  return r.structuredContent.stdout.split('\n').filter(Boolean);
}

/**
 * Sends n appends to `file` at once (not awaiting one before the next), the
 * earlier ones sleeping longer, so any reordering shows in the file.
 */
function appendsInFlight(server, file, n, extra = {}) {
  const calls = [];
  for (let i = 1; i <= n; i++) {
    const pause = ((n - i) * 0.05).toFixed(2);
    calls.push(exec(server, `sleep ${pause}; echo ${i} >> ${file}`, extra));
  }
  return Promise.all(calls);
}

/** Sends n appends to `file` in flight; what the file holds when that is out of order, else null. */
async function appendedOutOfOrder(server, file, n, extra = {}) {
  await appendsInFlight(server, file, n, extra);
  const got = await lines(server, file, extra);
  return got.join() === expected(n).join() ? null : got.join();
}

const expected = (n) => Array.from({ length: n }, (_, i) => String(i + 1));

describe('calls naming one session run in arrival order', () => {
  test('two back-to-back execs, 40 times, and four in flight, 25 times', async (t) => {
    const server = await serverFor(t);
    await exec(server, 'true');
    const wrong = [];
    for (let rep = 0; rep < 40; rep++) {
      await appendsInFlight(server, `pair${rep}`, 2);
      const got = await lines(server, `pair${rep}`);
      if (got.join() !== '1,2') wrong.push(`pair ${rep}: ${got.join()}`);
    }
    for (let rep = 0; rep < 25; rep++) {
      const got = await appendedOutOfOrder(server, `four${rep}`, 4);
      if (got) wrong.push(`four ${rep}: ${got}`);
    }
    assert.deepEqual(wrong, [], 'calls ran out of order');
  });

  test('as the very first calls of a conversation, while its sandbox starts', async (t) => {
    const server = await serverFor(t);
    const wrong = [];
    for (let rep = 0; rep < 8; rep++) {
      const conversation = `fresh-${rep}`;
      const got = await appendedOutOfOrder(server, 'f', 4, { conversation });
      if (got) wrong.push(`${conversation}: ${got}`);
    }
    assert.deepEqual(wrong, [], 'first calls ran out of order');
  });

  test('while the sandbox is restored after an idle teardown', async (t) => {
    const server = await serverFor(t, ['--idle-timeout', '300ms', '--background-keepalive', '0s']);
    const wrong = [];
    for (let rep = 0; rep < 3; rep++) {
      await exec(server, `echo ready > r${rep}`);
      // Wait for the teardown: sandbox_status never restores.
      const deadline = Date.now() + 20_000;
      for (;;) {
        const status = await call(server, 'sandbox_status', {});
        if (status.structuredContent.state === 'stopped') break;
        assert.ok(Date.now() < deadline, `no idle teardown: ${JSON.stringify(status.structuredContent)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const got = await appendedOutOfOrder(server, `restored${rep}`, 4);
      if (got) wrong.push(`restore ${rep}: ${got}`);
    }
    assert.deepEqual(wrong, [], 'calls during a restore ran out of order');
  });

  test('file tools are ordered with the execs of their session', async (t) => {
    const server = await serverFor(t);
    await exec(server, 'true');
    const wrong = [];
    for (let rep = 0; rep < 20; rep++) {
      const [, read] = await Promise.all([
        exec(server, `sleep 0.05; echo x${rep} > g${rep}`),
        call(server, 'file_read', { path: `g${rep}` }),
      ]);
      const text = read.structuredContent?.content ?? read.content[0].text;
      if (!String(text).includes(`x${rep}`)) wrong.push(`file_read after exec ${rep}: ${JSON.stringify(text)}`);
      const [, cat] = await Promise.all([
        call(server, 'file_write', { path: `w${rep}`, content: `y${rep}\n` }),
        exec(server, `cat w${rep}`),
      ]);
      if (cat.structuredContent.stdout !== `y${rep}\n`) wrong.push(`exec after file_write ${rep}: ${cat.structuredContent.stdout}`);
    }
    assert.deepEqual(wrong, [], 'file calls overtook execs');
  });
});

describe('different sessions and conversations still run in parallel', () => {
  test('two `sleep 1` on two sessions, and on two conversations, take about 1 s', async (t) => {
    const server = await serverFor(t);
    await call(server, 'session_create', { name: 'other' });
    await exec(server, 'true', { conversation: 'second' });
    let started = performance.now();
    await Promise.all([exec(server, 'sleep 1'), exec(server, 'sleep 1', { session: 'other' })]);
    const sessionsMs = performance.now() - started;
    started = performance.now();
    await Promise.all([exec(server, 'sleep 1'), exec(server, 'sleep 1', { conversation: 'second' })]);
    const conversationsMs = performance.now() - started;
    assert.ok(sessionsMs < 1800, `two sessions took ${sessionsMs.toFixed(0)} ms: they did not run in parallel`);
    assert.ok(conversationsMs < 1800, `two conversations took ${conversationsMs.toFixed(0)} ms`);
  });
});
