// Services (docs/design.md section 9, "Services") through the official MCP
// SDK client after listTools, against the real server and real sandboxes:
// process_start {restart: "on-restore"} is started again, with the same
// process_id, cwd and environment, after an idle restore, a sandbox_restore
// and a server restart on the same state directory; process_kill stops
// that; an ordinary process is reported lost instead; a services file the
// sandbox damaged starts nothing and says why.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { serveListed, sharedState as sharedStateOf, tail, sleep } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 30_000 };
const PORT = 18123;
// Two seconds idle before a teardown: the calls of one step come faster than that.
const ARGS = ['--idle-timeout', '2s', '--background-keepalive', '0s'];

const serve = (t) => serveListed(t, { extraArgs: ARGS });
const sharedState = (t) => sharedStateOf(t, { prefix: 'agentbox-services-', extraArgs: ARGS });

async function call(server, name, args = {}) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
  return r;
}

const exec = (server, command) => call(server, 'exec', { command });

async function waitForTeardown(server) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const status = await call(server, 'sandbox_status');
    if (status.structuredContent.state === 'stopped') return;
    assert.ok(Date.now() < deadline, `no idle teardown: ${JSON.stringify(status.structuredContent)}`);
    await sleep(200);
  }
}

/** The lines the service wrote, one per start: "cwd greeting from_session". */
async function starts(server) {
  const r = await exec(server, 'cat /workspace/starts.log 2>/dev/null || true');
  return r.structuredContent.stdout.split('\n').filter(Boolean);
}

async function listed(server, id) {
  const r = await call(server, 'process_list');
  return r.structuredContent.processes.find((p) => p.process_id === id);
}

async function portReady(server, id) {
  const r = await call(server, 'process_wait', { process_id: id, port: PORT, timeout_ms: 10_000 });
  return r.structuredContent.port_ready === true;
}

const SERVICE = 'echo "$PWD $GREETING $FROM_SESSION" >> /workspace/starts.log; ' +
  `exec python3 -m http.server ${PORT} --bind 127.0.0.1`;
const LINE = '/workspace/www hello session-value';

async function startService(server) {
  await exec(server, 'mkdir -p /workspace/www && export FROM_SESSION=session-value');
  const started = await call(server, 'process_start', {
    command: SERVICE, cwd: 'www', env: { GREETING: 'hello' }, restart: 'on-restore',
  });
  const id = started.structuredContent.process_id;
  assert.ok(await portReady(server, id), 'the service listens');
  const entry = await listed(server, id);
  assert.equal(entry?.restart, 'on-restore', `process_list shows restart: ${JSON.stringify(entry)}`);
  // Changed after the start: the service keeps the state it started with.
  await exec(server, 'export FROM_SESSION=changed-later');
  return id;
}

describe('process_start {restart: "on-restore"}', () => {
  test('started again after an idle restore, a sandbox_restore and a server restart', async (t) => {
    const state = sharedState(t);
    let server = await state.serve();
    const id = await startService(server);
    const plain = (await call(server, 'process_start', { command: 'sleep 600' })).structuredContent.process_id;
    assert.deepEqual(await starts(server), [LINE]);

    // 1. Idle teardown, then the next call restores the workspace.
    await waitForTeardown(server);
    const first = await exec(server, 'true');
    assert.match(first.structuredContent.notice ?? '', new RegExp(`services started again: ${id} \\(`),
      `the restoring call says so: ${JSON.stringify(first.structuredContent)}`);
    assert.ok(await portReady(server, id), 'listening again after the idle restore');
    assert.deepEqual(await starts(server), [LINE, LINE], 'same cwd and environment after the idle restore');
    assert.equal((await listed(server, id))?.status, 'running');
    assert.equal((await listed(server, plain))?.status, 'lost', 'an ordinary process is lost, not restarted');

    // 2. sandbox_restore of a snapshot taken while it ran.
    const snap = await call(server, 'sandbox_snapshot', { label: 'with-service' });
    await call(server, 'sandbox_restore', { snapshot: snap.structuredContent.snapshot });
    assert.ok(await portReady(server, id), 'listening again after sandbox_restore');
    assert.equal((await starts(server)).length, 3, 'started once more by sandbox_restore');

    // 3. A new server on the same state directory.
    await server.close();
    server = await state.serve();
    await exec(server, 'true');
    assert.ok(await portReady(server, id), 'listening again after a server restart');
    const lines = await starts(server);
    assert.equal(lines.length, 4, `started once more after the restart: ${lines}`);
    assert.ok(lines.every((l) => l === LINE), `every start had the same cwd and environment: ${lines}`);

    // 4. process_kill stops it for good.
    await call(server, 'process_kill', { process_id: id });
    assert.equal((await listed(server, id))?.restart, undefined, 'a killed service is no longer one');
    await waitForTeardown(server);
    await exec(server, 'true');
    await sleep(500);
    assert.equal((await starts(server)).length, 4, 'a killed service is not started again');
    assert.notEqual((await listed(server, id))?.status, 'running');
  });

  test('a services file the sandbox damaged starts nothing and the restoring call says why', async (t) => {
    const server = await serve(t);
    await call(server, 'process_start', { command: 'sleep 600', restart: 'on-restore' });
    await exec(server, 'echo "{\\"services\\": [{\\"process_id\\": \\"../../x\\"}]}" > ~/.local/state/agentbox/services.json');
    await waitForTeardown(server);
    const first = await exec(server, 'echo alive');
    assert.equal(first.structuredContent.stdout, 'alive\n');
    assert.match(first.structuredContent.notice ?? '', /services file .* has an entry without a string command/,
      JSON.stringify(first.structuredContent));
    const r = await call(server, 'process_list');
    assert.ok(!r.structuredContent.processes.some((p) => p.status === 'running'), 'nothing was started');
  });

  test('restart takes "never" or "on-restore" only', async (t) => {
    const server = await serve(t);
    const r = await server.client.callTool({ name: 'process_start', arguments: { command: 'true', restart: 'always' } }, undefined, CALL);
    assert.ok(r.isError, 'refused');
    assert.match(r.content[0].text, /restart/);
  });
});
