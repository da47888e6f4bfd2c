// MCP tasks (2025-11-25, experimental there) through the official TypeScript
// SDK's task client (client.experimental.tasks), after listTools: a long
// exec created as a task, polled, its result fetched; cancel kills the
// command's tree; ttl expiry; a tool that cannot run as a task; and a plain
// call still gets a plain result.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { CreateTaskResultSchema, CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

import { startServer, tail, sleep } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function serve(t) {
  const server = await startServer({ testTools: false });
  const { tools } = await server.client.listTools();
  t.after(() => server.close());
  const call = async (name, args = {}) => {
    const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
    assert.ok(!r.isError, `${name}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
    return r.structuredContent;
  };
  const create = (name, args, task = { ttl: 60_000 }) =>
    server.client.request({ method: 'tools/call', params: { name, arguments: args, task } }, CreateTaskResultSchema, CALL);
  return { server, client: server.client, tools, call, create };
}

describe('tasks', () => {
  test('the server declares tasks and the long tools take them', async (t) => {
    const { client, tools } = await serve(t);
    assert.deepEqual(client.getServerCapabilities().tasks?.requests?.tools?.call, {});
    assert.ok(client.getServerCapabilities().tasks.cancel && client.getServerCapabilities().tasks.list);
    const optional = tools.filter((x) => x.execution?.taskSupport === 'optional').map((x) => x.name).sort();
    assert.deepEqual(optional, ['exec', 'process_wait', 'sandbox_fork', 'sandbox_restore', 'sandbox_snapshot']);
  });

  test('an exec as a task: created at once, polled, its result fetched', async (t) => {
    const { client, call, create } = await serve(t);
    await call('exec', { command: 'true' });  // the sandbox is up
    const started = Date.now();
    const created = await create('exec', { command: 'sleep 1.5; echo finished' });
    assert.ok(Date.now() - started < 1_000, 'CreateTaskResult comes before the command ends');
    const { taskId, status, ttl, pollInterval } = created.task;
    assert.equal(status, 'working');
    assert.equal(ttl, 60_000);
    assert.ok(pollInterval > 0);
    assert.match(created._meta['io.modelcontextprotocol/model-immediate-response'], /runs as task/);
    assert.equal((await client.experimental.tasks.getTask(taskId)).status, 'working');
    // tasks/result waits for the end.
    const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema, CALL);
    assert.equal(result.structuredContent.stdout, 'finished\n');
    assert.equal(result._meta['io.modelcontextprotocol/related-task'].taskId, taskId);
    const done = await client.experimental.tasks.getTask(taskId);
    assert.equal(done.status, 'completed');
    assert.ok(Date.parse(done.lastUpdatedAt) >= Date.parse(done.createdAt));
    const listed = await client.experimental.tasks.listTasks();
    assert.ok(listed.tasks.some((x) => x.taskId === taskId && x.status === 'completed'));
  });

  test('the SDK stream: taskCreated, taskStatus, result', async (t) => {
    const { client } = await serve(t);
    const kinds = [];
    let result;
    for await (const m of client.experimental.tasks.callToolStream(
      { name: 'exec', arguments: { command: 'sleep 1; echo streamed' } }, CallToolResultSchema, { task: { ttl: 60_000 }, ...CALL })) {
      kinds.push(m.type);
      if (m.type === 'result') result = m.result;
      if (m.type === 'error') throw m.error;
    }
    assert.equal(kinds[0], 'taskCreated');
    assert.ok(kinds.includes('taskStatus'));
    assert.equal(kinds.at(-1), 'result');
    assert.equal(result.structuredContent.stdout, 'streamed\n');
  });

  test('tasks/cancel kills the command tree; a second cancel is refused', async (t) => {
    const { client, call, create } = await serve(t);
    await call('session_create', { name: 'watcher' });
    const { task } = await create('exec', { command: 'setsid sleep 997 & exec -a task-marker sleep 998' });
    const deadline = Date.now() + 20_000;
    while ((await call('exec', { command: 'pgrep -fc task-marker || true', session: 'watcher' })).stdout !== '1\n') {
      assert.ok(Date.now() < deadline, 'the command never started');
      await sleep(100);
    }
    const cancelled = await client.experimental.tasks.cancelTask(task.taskId);
    assert.equal(cancelled.status, 'cancelled');
    const gone = Date.now() + 10_000;
    while ((await call('exec', { command: 'pgrep -c sleep || true', session: 'watcher' })).stdout !== '0\n') {
      assert.ok(Date.now() < gone, 'the tree outlived the cancel');
      await sleep(100);
    }
    assert.equal((await client.experimental.tasks.getTask(task.taskId)).status, 'cancelled');
    await assert.rejects(client.experimental.tasks.cancelTask(task.taskId), (e) => e.code === -32602 && /already ended/.test(e.message));
  });

  test('a task is forgotten after its ttl', async (t) => {
    const { client, create } = await serve(t);
    const { task } = await create('exec', { command: 'echo quick' }, { ttl: 1_000 });
    assert.equal(task.ttl, 1_000);
    await sleep(1_500);
    await assert.rejects(client.experimental.tasks.getTask(task.taskId), (e) => e.code === -32602 && /expired/.test(e.message));
  });

  test('unknown tasks, tools that cannot be tasks, and plain calls', async (t) => {
    const { client, call, create } = await serve(t);
    await assert.rejects(client.experimental.tasks.getTask('no-such-task'), (e) => e.code === -32602 && /no task/.test(e.message));
    await assert.rejects(create('file_list', { path: '/workspace' }), (e) => e.code === -32601 && /does not run as a task/.test(e.message));
    // Without `task` the same tool answers as ever.
    assert.equal((await call('exec', { command: 'echo plain' })).stdout, 'plain\n');
  });
});
