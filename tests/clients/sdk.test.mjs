// Drives the built agentbox server with the official MCP TypeScript SDK client
// (StdioClientTransport), one fresh server and state directory per test.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

import { startServer, sleep, tail } from './helpers.mjs';

const PROTOCOL_VERSION = '2025-11-25';
// A hung server must fail a test quickly rather than stall the suite.
const test = (name, fn) => baseTest(name, { timeout: 15_000 }, fn);

/** Starts a server for one test and closes it when the test ends. */
async function serverFor(t, opts) {
  const server = await startServer(opts);
  t.after(() => server.close());
  return server;
}

/** The id the SDK gave the most recent outgoing request for `method`. */
function lastRequestId(transport, method) {
  const sent = transport.log.filter((e) => e.dir === 'out' && e.message.method === method);
  assert.ok(sent.length > 0, `no ${method} request was sent`);
  return sent[sent.length - 1].message.id;
}

/** Incoming messages that answer request `id`. */
function responsesTo(transport, id) {
  return transport.log.filter(
    (e) => e.dir === 'in' && e.message.id === id && ('result' in e.message || 'error' in e.message),
  );
}

function progressFor(transport, token) {
  return transport.log.filter(
    (e) =>
      e.dir === 'in' &&
      e.message.method === 'notifications/progress' &&
      e.message.params?.progressToken === token,
  );
}

function textOf(result) {
  assert.ok(Array.isArray(result.content), 'result.content must be an array');
  return result.content
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

describe('handshake and tool listing', () => {
  test('initialize reports agentbox and protocol 2025-11-25', async (t) => {
    const { client, transport } = await serverFor(t);
    const info = client.getServerVersion();
    assert.equal(info?.name, 'agentbox');
    assert.equal(typeof info?.version, 'string');
    assert.ok(client.getServerCapabilities()?.tools, 'server must declare the tools capability');

    const initId = lastRequestId(transport, 'initialize');
    const sentInit = transport.log.find((e) => e.dir === 'out' && e.message.id === initId);
    assert.equal(sentInit.message.params.protocolVersion, PROTOCOL_VERSION, 'the SDK asks for 2025-11-25');
    const [reply] = responsesTo(transport, initId);
    assert.ok(reply, 'no initialize response on the wire');
    assert.equal(reply.message.result.protocolVersion, PROTOCOL_VERSION);
    assert.equal(reply.message.result.serverInfo.name, 'agentbox');

    // The connection is usable after the handshake.
    await client.ping();
  });

  test('tools/list describes sandbox_status fully', async (t) => {
    const { client } = await serverFor(t);
    const { tools } = await client.listTools();
    const status = tools.find((tool) => tool.name === 'sandbox_status');
    assert.ok(status, `sandbox_status missing from ${tools.map((x) => x.name).join(', ')}`);

    assert.equal(typeof status.title, 'string');
    assert.ok(status.title.length > 0, 'title must not be empty');
    assert.ok(typeof status.description === 'string' && status.description.length > 0);
    assert.ok(status.description.length <= 2048, 'description longer than 2 KB gets cut by hosts');

    assert.equal(status.inputSchema?.type, 'object');
    assert.equal(status.outputSchema?.type, 'object');
    for (const field of ['conversation', 'state']) {
      assert.ok(status.outputSchema.properties?.[field], `outputSchema lacks ${field}`);
      assert.ok(status.outputSchema.required?.includes(field), `outputSchema must require ${field}`);
    }

    const a = status.annotations;
    assert.ok(a, 'annotations missing');
    for (const hint of ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']) {
      assert.equal(typeof a[hint], 'boolean', `annotations.${hint} must be set explicitly`);
    }
    assert.equal(a.readOnlyHint, true, 'sandbox_status only reads');
    assert.equal(a.destructiveHint, false);

    for (const tool of tools) {
      assert.match(tool.name, /^[A-Za-z0-9_-]{1,64}$/, `bad tool name ${tool.name}`);
    }
    assert.ok(tools.some((tool) => tool.name === 'debug_sleep'), '--test-tools should register debug_sleep');
  });

  test('debug_sleep is not offered without --test-tools', async (t) => {
    const { client } = await serverFor(t, { testTools: false });
    const { tools } = await client.listTools();
    assert.ok(tools.some((tool) => tool.name === 'sandbox_status'));
    assert.ok(!tools.some((tool) => tool.name === 'debug_sleep'), 'debug_sleep leaked into a normal server');
  });
});

describe('sandbox_status', () => {
  test('reports state none for the default conversation', async (t) => {
    const { client } = await serverFor(t);
    // callTool validates structuredContent against the declared outputSchema.
    const result = await client.callTool({ name: 'sandbox_status', arguments: {} });
    assert.notEqual(result.isError, true, textOf(result));
    assert.equal(result.structuredContent?.state, 'none');
    assert.equal(result.structuredContent?.conversation, 'default');
    assert.ok(textOf(result).length > 0, 'results must carry human-readable text');
  });

  test('honours the conversation argument', async (t) => {
    const { client } = await serverFor(t);
    const result = await client.callTool({
      name: 'sandbox_status',
      arguments: { conversation: 'conv-42' },
    });
    assert.notEqual(result.isError, true, textOf(result));
    assert.equal(result.structuredContent?.conversation, 'conv-42');
    assert.equal(result.structuredContent?.state, 'none');
    // ...and it does not leak into the default conversation.
    const other = await client.callTool({ name: 'sandbox_status', arguments: {} });
    assert.equal(other.structuredContent?.conversation, 'default');
  });
});

describe('debug_sleep: progress, cancellation, timeouts, concurrency', () => {
  test('progress notifications increase strictly and stop at the response', async (t) => {
    const { client, transport } = await serverFor(t);
    const errors = [];
    client.onerror = (e) => errors.push(String(e));
    const seen = [];
    // 5 × 400 ms: nothing in the first second (steps 1 and 2 end in it),
    // then what was reported last, then one per step.
    const result = await client.callTool(
      { name: 'debug_sleep', arguments: { steps: 5, step_ms: 400 } },
      undefined,
      { onprogress: (p) => seen.push(p) },
    );
    assert.notEqual(result.isError, true, textOf(result));
    assert.equal(result.structuredContent?.steps_done, 5);
    assert.equal(result.structuredContent?.conversation, 'default');

    // The SDK runs notification handlers a microtask later than response
    // handlers: a notification read in the same chunk as the response would
    // be dropped with an "unknown token" error. The server waits for the
    // host to read the last one before it replies, so none is lost.
    assert.deepEqual(errors, []);
    assert.deepEqual(seen.map((p) => p.progress), [2, 3, 4, 5]);
    for (let i = 1; i < seen.length; i++) {
      assert.ok(seen[i].progress > seen[i - 1].progress, `progress not increasing: ${JSON.stringify(seen)}`);
    }
    for (const p of seen) {
      if (p.total !== undefined) assert.ok(p.progress <= p.total, `progress beyond total: ${JSON.stringify(p)}`);
    }

    // On the wire: nothing for this token after the response.
    const id = lastRequestId(transport, 'tools/call');
    const token = transport.log.find((e) => e.dir === 'out' && e.message.id === id).message.params._meta
      .progressToken;
    await sleep(100);
    const [response] = responsesTo(transport, id);
    const onWire = progressFor(transport, token);
    assert.deepEqual(
      onWire.map((e) => e.message.params.progress),
      [2, 3, 4, 5],
      'one progress notification per step after the first second, in order',
    );
    const late = onWire.filter((e) => e.at > response.at);
    assert.equal(late.length, 0, 'progress notification sent after the response');
  });

  test('no progress notifications without a progressToken', async (t) => {
    const { client, transport } = await serverFor(t);
    const result = await client.callTool({ name: 'debug_sleep', arguments: { steps: 3, step_ms: 10 } });
    assert.equal(result.structuredContent?.steps_done, 3);
    const progress = transport.received().filter((m) => m.method === 'notifications/progress');
    assert.equal(progress.length, 0, `unexpected progress: ${JSON.stringify(progress)}`);
  });

  test('progress resets the client timeout when asked to', async (t) => {
    const { client } = await serverFor(t);
    // 6 × 400 ms = 2.4 s total, but never more than 1 s without progress.
    const result = await client.callTool(
      { name: 'debug_sleep', arguments: { steps: 6, step_ms: 400 } },
      undefined,
      { timeout: 1500, resetTimeoutOnProgress: true, onprogress: () => {} },
    );
    assert.equal(result.structuredContent?.steps_done, 6);
  });

  test('AbortSignal cancels promptly, the server stops the work and stays healthy', async (t) => {
    const { client, transport, stderr } = await serverFor(t);
    const controller = new AbortController();
    const progress = [];
    const started = performance.now();
    // 40 × 50 ms = 2 s if it were not cancelled (progress starts after 1 s).
    const call = client.callTool(
      { name: 'debug_sleep', arguments: { steps: 40, step_ms: 50 } },
      undefined,
      { timeout: 5000, signal: controller.signal, onprogress: (p) => progress.push(p) },
    );
    const rejected = assert.rejects(call);
    await sleep(1300);
    const abortAt = performance.now();
    controller.abort('test cancels');
    await rejected;
    const rejectMs = performance.now() - abortAt;
    assert.ok(rejectMs < 100, `call rejected ${rejectMs.toFixed(0)} ms after abort`);
    assert.ok(progress.length >= 1, 'expected some progress before the abort');

    const id = lastRequestId(transport, 'tools/call');
    const cancelled = transport.log.find(
      (e) => e.dir === 'out' && e.message.method === 'notifications/cancelled',
    );
    assert.equal(cancelled?.message.params.requestId, id, 'the SDK should have sent notifications/cancelled');

    await client.ping();
    // Wait past the time the uncancelled call would have finished.
    await sleep(Math.max(0, started + 2300 - performance.now()));
    await client.ping();

    assert.equal(responsesTo(transport, id).length, 0, 'server answered a cancelled request');
    const token = transport.log.find((e) => e.dir === 'out' && e.message.id === id).message.params._meta
      .progressToken;
    const after = progressFor(transport, token).filter((e) => e.at > cancelled.at + 150);
    assert.equal(
      after.length,
      0,
      `server kept working after cancellation (${after.length} more progress notifications)\n${tail(stderr())}`,
    );

    // Still able to do real work.
    const again = await client.callTool({ name: 'debug_sleep', arguments: { steps: 1, step_ms: 1 } });
    assert.equal(again.structuredContent?.steps_done, 1);
  });

  test('a call over the client timeout rejects with RequestTimeout; the server stays healthy', async (t) => {
    const { client, transport } = await serverFor(t);
    const started = performance.now();
    await assert.rejects(
      client.callTool({ name: 'debug_sleep', arguments: { steps: 20, step_ms: 50 } }, undefined, {
        timeout: 200,
      }),
      (err) => {
        assert.ok(err instanceof McpError, `expected McpError, got ${err}`);
        assert.equal(err.code, ErrorCode.RequestTimeout);
        assert.match(err.message, /timed out/i);
        return true;
      },
    );
    const elapsed = performance.now() - started;
    assert.ok(elapsed >= 190 && elapsed < 800, `timeout fired after ${elapsed.toFixed(0)} ms`);

    await client.ping();
    const id = lastRequestId(transport, 'tools/call');
    await sleep(Math.max(0, started + 2300 - performance.now()));
    assert.equal(responsesTo(transport, id).length, 0, 'server answered a request the client had cancelled');
    const status = await client.callTool({ name: 'sandbox_status', arguments: {} });
    assert.equal(status.structuredContent?.state, 'none');
  });

  test('8 parallel calls run concurrently and are answered to the right caller', async (t) => {
    const { client } = await serverFor(t);
    const steps = 4;
    const stepMs = 100;
    const n = 8;
    const serialMs = n * steps * stepMs; // 3200 ms
    const started = performance.now();
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        client.callTool({
          name: 'debug_sleep',
          arguments: { steps, step_ms: stepMs, echo: `call-${i}` },
        }),
      ),
    );
    const elapsed = performance.now() - started;
    results.forEach((r, i) => {
      assert.notEqual(r.isError, true, textOf(r));
      assert.equal(r.structuredContent?.steps_done, steps);
      assert.equal(r.structuredContent?.echo, `call-${i}`, 'response went to the wrong request');
    });
    assert.ok(elapsed >= steps * stepMs - 20, `finished impossibly fast (${elapsed.toFixed(0)} ms)`);
    assert.ok(
      elapsed < serialMs / 2,
      `8 calls took ${elapsed.toFixed(0)} ms; serial would be ${serialMs} ms — they did not overlap`,
    );
  });
});

describe('errors', () => {
  test('a failing tool returns isError: true, not a protocol error', async (t) => {
    const { client } = await serverFor(t);
    const result = await client.callTool({
      name: 'debug_sleep',
      arguments: { steps: 1, step_ms: 1, fail: true },
    });
    assert.equal(result.isError, true);
    assert.ok(textOf(result).length > 0, 'a tool error must say what went wrong');
  });

  test('invalid arguments are a tool error naming arguments.steps (SEP-1303)', async (t) => {
    const { client } = await serverFor(t);
    // A JSON-RPC error would make callTool reject; 2025-11-25 wants a result.
    const result = await client.callTool({
      name: 'debug_sleep',
      arguments: { steps: 'x', step_ms: 10 },
    });
    assert.equal(result.isError, true);
    const text = textOf(result);
    assert.ok(text.includes('arguments.steps'), `error text does not name arguments.steps: ${JSON.stringify(text)}`);
  });

  test('a missing required argument is a tool error naming it', async (t) => {
    const { client } = await serverFor(t);
    const result = await client.callTool({ name: 'debug_sleep', arguments: { steps: 1 } });
    assert.equal(result.isError, true);
    assert.match(textOf(result), /step_ms/);
  });
});

describe('shutdown', () => {
  // Exit status and time from client.close() to the child's exit.
  async function closeAndWatch(server) {
    const { client, transport } = server;
    const started = performance.now();
    await client.close();
    const exit = await Promise.race([transport.exited, sleep(5000).then(() => undefined)]);
    return { exit, ms: (exit?.at ?? performance.now()) - started };
  }

  test('closing an idle client makes the server exit cleanly within 2 s', async () => {
    // Several at once: a shutdown race would show up in some of them.
    const servers = await Promise.all(Array.from({ length: 4 }, () => startServer()));
    try {
      await Promise.all(servers.map((s) => s.client.ping()));
      const outcomes = await Promise.all(servers.map(closeAndWatch));
      outcomes.forEach(({ exit, ms }, i) => {
        const where = `server ${i}: ${JSON.stringify(exit)} after ${ms.toFixed(0)} ms\n${tail(servers[i].stderr(), 10)}`;
        assert.ok(exit, `server ${i} did not exit`);
        assert.ok(ms < 2000, `server exit took too long: ${where}`);
        assert.equal(exit.signal, null, `server died of a signal: ${where}`);
        assert.equal(exit.code, 0, `server exited non-zero: ${where}`);
      });
    } finally {
      await Promise.all(servers.map((s) => s.close()));
    }
  });

  test('closing with a call in flight: the call rejects, the server exits cleanly within 2 s', async () => {
    const server = await startServer();
    try {
      const call = server.client.callTool(
        { name: 'debug_sleep', arguments: { steps: 100, step_ms: 50 } },
        undefined,
        { onprogress: () => {} },
      );
      const rejected = assert.rejects(call);
      await sleep(150);
      const { exit, ms } = await closeAndWatch(server);
      await rejected;
      const where = `${JSON.stringify(exit)} after ${ms.toFixed(0)} ms\n${tail(server.stderr(), 10)}`;
      assert.ok(exit, 'server did not exit');
      assert.ok(ms < 2000, `server exit took too long: ${where}`);
      assert.equal(exit.signal, null, `server died of a signal: ${where}`);
      assert.equal(exit.code, 0, `server exited non-zero: ${where}`);
    } finally {
      await server.close();
    }
  });
});
