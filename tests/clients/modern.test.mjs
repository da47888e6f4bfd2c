// The 2026-07-28 era through the official v2 client (@modelcontextprotocol/client,
// pinned to 2026-07-28) and the official tasks extension requester
// (@modelcontextprotocol/ext-tasks), against real sandboxes:
// - workspace resources: list, read, and subscriptions/listen with
//   resourceSubscriptions → notifications/resources/updated on the stream;
// - the io.modelcontextprotocol/tasks extension: a quick exec answered as
//   usual, a long one as a task the requester polls to its result, cancel
//   killing the command's tree, notifications/tasks on a listen stream, and a
//   client that declares nothing getting plain results.
// The extension's requester needs a raw request path for its V2 task wire
// shapes (its README: the SDK's codecs reject `resultType: "task"`); rawDispatch
// below writes the framed request to the same stdio transport and hands back
// the response, nothing more.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { createTaskSessionFromClient, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client';

import { AGENTBOX_BIN, requireBinary, tempDir, sleep, tail } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const VERSION = '2026-07-28';
const CLIENT_INFO = { name: 'agentbox-modern-tests', version: '0.0.0' };
const TASKS = 'io.modelcontextprotocol/tasks';

// A subclass: the SDK probes in place instead of on a sibling server process
// (two servers on one state directory would race for it).
class Stdio extends StdioClientTransport {}

async function connect(t, { extraArgs = [] } = {}) {
  requireBinary();
  const state = tempDir('agentbox-state-');
  const transport = new Stdio({ command: AGENTBOX_BIN, args: ['serve', '--state-dir', state.dir, ...extraArgs], stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (chunk) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-100_000);
  });
  const client = new Client(CLIENT_INFO, { capabilities: {}, versionNegotiation: { mode: { pin: VERSION } } });
  await client.connect(transport);
  t.after(async () => {
    await client.close().catch(() => {});
    state.cleanup();
  });
  assert.equal(client.getProtocolEra(), 'modern');

  // The raw path: string ids the client never uses, so its own responses pass by.
  const pending = new Map();
  let next = 0;
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (typeof message.id === 'string' && pending.has(message.id) && !('method' in message)) {
      const resolve = pending.get(message.id);
      pending.delete(message.id);
      resolve('error' in message ? { kind: 'error', error: message.error } : { kind: 'result', result: message.result });
      return;
    }
    deliver?.(message, extra);
  };
  const raw = (request) =>
    new Promise((resolve, reject) => {
      const id = `raw-${++next}`;
      pending.set(id, resolve);
      transport.send({ jsonrpc: '2.0', id, method: request.method, params: request.params ?? {} }).catch(reject);
    });
  // A request framed as the 2026 era frames every request, tasks declared or not.
  const rawCall = (method, params, { tasks = true } = {}) =>
    raw({
      method,
      params: {
        ...params,
        _meta: {
          'io.modelcontextprotocol/protocolVersion': VERSION,
          'io.modelcontextprotocol/clientInfo': CLIENT_INFO,
          'io.modelcontextprotocol/clientCapabilities': tasks ? { extensions: { [TASKS]: {} } } : {},
        },
      },
    });
  const call = async (name, args = {}) => {
    const r = await client.callTool({ name, arguments: args }, { timeout: 60_000 });
    assert.ok(!r.isError, `${name}: ${r.content?.[0]?.text}\n${tail(stderr)}`);
    return r.structuredContent;
  };
  const session = () =>
    createTaskSessionFromClient(client, {
      endpointId: 'agentbox-test',
      rawDispatch: raw,
      v2RequestFraming: { protocolVersion: VERSION, clientInfo: CLIENT_INFO, clientCapabilities: {} },
    });
  return { client, call, raw, rawCall, session, stderr: () => stderr };
}

describe('2026-07-28: resources', () => {
  test('discover declares resources and the tasks extension; list and read', async (t) => {
    const { client, call } = await connect(t);
    const caps = client.getServerCapabilities();
    assert.deepEqual(caps.resources, { subscribe: true, listChanged: false });
    assert.deepEqual(caps.extensions?.[TASKS], {});
    await call('exec', { command: "printf 'hi\\n' > /workspace/m.txt" });
    const listed = await client.listResources(undefined, { cacheMode: 'bypass' });
    assert.deepEqual(listed.resources.map((r) => r.uri), ['file:///workspace/m.txt']);
    const read = await client.readResource({ uri: 'file:///workspace/m.txt' });
    assert.equal(read.contents[0].text, 'hi\n');
  });

  test('subscriptions/listen carries resources/updated for the URIs it names, until closed', async (t) => {
    const { client, call } = await connect(t);
    await call('exec', { command: 'echo 1 > /workspace/a.txt && echo 1 > /workspace/b.txt' });
    const updates = [];
    client.setNotificationHandler('notifications/resources/updated', (n) => updates.push(n.params.uri));
    const sub = await client.listen({ resourceSubscriptions: ['file:///workspace/a.txt'] });
    assert.deepEqual(sub.honoredFilter.resourceSubscriptions, ['file:///workspace/a.txt']);
    await sleep(700);
    await call('exec', { command: 'echo 2 >> /workspace/b.txt; echo 2 >> /workspace/a.txt' });
    const deadline = Date.now() + 15_000;
    while (!updates.includes('file:///workspace/a.txt')) {
      assert.ok(Date.now() < deadline, 'no update on the stream');
      await sleep(50);
    }
    assert.ok(!updates.includes('file:///workspace/b.txt'));
    await sub.close();
    assert.equal(await sub.closed, 'local');
    updates.length = 0;
    await call('exec', { command: 'echo 3 >> /workspace/a.txt' });
    await sleep(1500);
    assert.deepEqual(updates, []);
  });

  test('resources/subscribe is not a 2026 method', async (t) => {
    const { rawCall } = await connect(t);
    const r = await rawCall('resources/subscribe', { uri: 'file:///workspace/a.txt' });
    assert.equal(r.kind, 'error');
    assert.equal(r.error.code, -32601);
    assert.match(r.error.message, /subscriptions\/listen/);
  });
});

describe('2026-07-28: the tasks extension', () => {
  test('a quick exec is answered as usual; a long one becomes a task polled to its result', async (t) => {
    const { session } = await connect(t);
    const tasks = session();
    t.after(() => tasks.close());
    const quick = await tasks.callTool('exec', { command: 'echo quick' });
    const quickResult = resultFromTaskOutcome((await quick.settle()).outcome);
    assert.equal(quickResult.structuredContent.stdout, 'quick\n');

    const started = Date.now();
    const long = await tasks.callTool('exec', { command: 'sleep 2.5; echo done' });
    assert.ok(Date.now() - started < 2000, 'the long call was not answered with a task');
    assert.ok(long.taskId ?? long.handle?.taskId ?? true);
    const result = resultFromTaskOutcome((await long.settle()).outcome);
    assert.equal(result.structuredContent.stdout, 'done\n');
    assert.equal(result.structuredContent.exit_code, 0);
  });

  test('the wire: CreateTaskResult, tasks/get with the result inline, tasks/update, unknown ids', async (t) => {
    const { rawCall } = await connect(t);
    const created = await rawCall('tools/call', { name: 'exec', arguments: { command: 'sleep 1.5; exit 3' } });
    assert.equal(created.kind, 'result');
    assert.equal(created.result.resultType, 'task');
    assert.equal(created.result.status, 'working');
    assert.equal(typeof created.result.ttlMs, 'number');
    assert.equal(typeof created.result.pollIntervalMs, 'number');
    const id = created.result.taskId;
    assert.match(id, /^[0-9a-f-]{36}$/);
    assert.deepEqual((await rawCall('tasks/update', { taskId: id, inputResponses: {} })).result, { resultType: 'complete' });
    let got;
    const deadline = Date.now() + 20_000;
    do {
      await sleep(200);
      got = await rawCall('tasks/get', { taskId: id });
      assert.equal(got.kind, 'result');
      assert.equal(got.result.resultType, 'complete');
    } while (got.result.status === 'working' && Date.now() < deadline);
    // A command that failed is a completed task whose result says so.
    assert.equal(got.result.status, 'completed');
    assert.equal(got.result.result.structuredContent.exit_code, 3);
    for (const method of ['tasks/get', 'tasks/cancel', 'tasks/update']) {
      const unknown = await rawCall(method, { taskId: 'no-such-task', inputResponses: {} });
      assert.equal(unknown.error?.code, -32602, method);
    }
    const undeclared = await rawCall('tasks/get', { taskId: id }, { tasks: false });
    assert.equal(undeclared.error?.code, -32021);
    assert.deepEqual(undeclared.error.data.requiredCapabilities, { extensions: { [TASKS]: {} } });
    for (const method of ['tasks/list', 'tasks/result']) assert.equal((await rawCall(method, { taskId: id })).error?.code, -32601);
  });

  test('cancel kills the command tree; notifications/tasks come on a listen stream', async (t) => {
    const { rawCall, raw, call, client } = await connect(t);
    const created = await rawCall('tools/call', {
      name: 'exec',
      arguments: { command: '(sleep 300; echo survived > /workspace/survived) & sleep 300' },
    });
    const id = created.result.taskId;
    const seen = [];
    client.fallbackNotificationHandler = async (n) => {
      if (n.method === 'notifications/tasks') seen.push(n.params);
    };
    const listen = rawCall('subscriptions/listen', { notifications: { taskIds: [id, 'unknown-task'] } });
    void listen;
    await sleep(300);
    assert.deepEqual((await rawCall('tasks/cancel', { taskId: id })).result, { resultType: 'complete' });
    const deadline = Date.now() + 10_000;
    while (!seen.some((n) => n.taskId === id && n.status === 'cancelled')) {
      assert.ok(Date.now() < deadline, `no cancelled notification: ${JSON.stringify(seen)}`);
      await sleep(50);
    }
    assert.equal(seen[0]['_meta']?.['io.modelcontextprotocol/subscriptionId'] !== undefined, true);
    const got = await rawCall('tasks/get', { taskId: id });
    assert.equal(got.result.status, 'cancelled');
    // Cancelling again is acknowledged and changes nothing.
    assert.equal((await rawCall('tasks/cancel', { taskId: id })).kind, 'result');
    const ps = await call('exec', { command: 'pgrep -x sleep || echo none' });
    assert.equal(ps.stdout, 'none\n');
    void raw;
  });

  test('a client that declares no extension gets plain results, however long', async (t) => {
    const { rawCall } = await connect(t);
    const r = await rawCall('tools/call', { name: 'exec', arguments: { command: 'sleep 1.5; echo plain' } }, { tasks: false });
    assert.equal(r.result.resultType, 'complete');
    assert.equal(r.result.structuredContent.stdout, 'plain\n');
    const listen = await rawCall('subscriptions/listen', { notifications: { taskIds: ['x'] } }, { tasks: false });
    assert.equal(listen.error?.code, -32021);
  });
});
