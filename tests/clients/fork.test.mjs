// sandbox_fork (docs/design.md section 9, "Fork") through the official MCP
// SDK client after listTools (so every result is checked against its output
// schema), against the real server and real sandboxes: forks made now and
// from a named snapshot start from the source's files and session, are
// used by passing their conversation id, see none of each other's changes;
// as root a fork made now is a copy-on-write clone of the box's disk (copy
// "clone", no snapshot), else it goes through a snapshot that snapshot_list
// in the fork shows (reason "fork"); bad arguments are tool errors, not
// protocol errors.
import { test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, tail } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function serve(t) {
  const server = await startServer({ testTools: false });
  t.after(() => server.close());
  const tools = await server.client.listTools();
  assert.ok(tools.tools.some((tool) => tool.name === 'sandbox_fork'), 'sandbox_fork is listed');
  return server;
}

async function call(server, name, args = {}) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
  return r.structuredContent;
}

// Every command here must succeed: a write refused in a fork (its files
// owned by ids the box does not map) once showed only as stale output.
async function stdout(server, command, conversation) {
  const r = await call(server, 'exec', conversation ? { command, conversation } : { command });
  assert.equal(r.exit_code, 0, `${command} in ${conversation ?? 'default'}: ${r.stderr}`);
  return r.stdout;
}

test('forks made now start from the workspace and session and stay apart', async (t) => {
  const server = await serve(t);
  await stdout(server, 'mkdir -p src && cd src && echo base > a && export GREETING=hello');
  const made = await call(server, 'sandbox_fork', { count: 2 });
  assert.equal(made.forks.length, 2);
  assert.equal(typeof made.frozen_ms, 'number');
  const [one, two] = made.forks.map((f) => f.conversation);
  // A mismatch here has been seen once under load: the server's stderr says what the fork did.
  const why = () => `server stderr:\n${tail(server.stderr())}`;
  assert.equal(await stdout(server, 'pwd; echo $GREETING; cat a', one), '/workspace/src\nhello\nbase\n', why());
  await stdout(server, 'echo changed > a', one);
  await stdout(server, 'echo later > b');
  assert.equal(await stdout(server, 'cat a; ls', two), 'base\na\n', why());
  assert.equal(await stdout(server, 'cat a; ls'), 'base\na\nb\n', why());
  assert.equal(await stdout(server, 'cat a', one), 'changed\n', why());
  const listed = await call(server, 'snapshot_list', { conversation: one });
  // Root servers keep disks in a pool that clones (sandbox/disk_pool.h); a
  // normal user's sandboxes are plain directories.
  const clones = process.getuid() === 0;
  assert.equal(made.copy, clones ? 'clone' : 'snapshot');
  if (clones) {
    assert.equal(made.snapshot, undefined);
    assert.equal(listed.snapshots.length, 0);
  } else {
    assert.equal(listed.snapshots.length, 1);
    assert.equal(listed.snapshots[0].reason, 'fork');
  }
});

test('a fork from a named snapshot, to a conversation id of our choosing', async (t) => {
  const server = await serve(t);
  await stdout(server, 'echo one > f');
  const snap = await call(server, 'sandbox_snapshot', { label: 'one' });
  await stdout(server, 'echo two > f');
  const made = await call(server, 'sandbox_fork', { snapshot: snap.snapshot, to_conversation: 'review' });
  assert.deepEqual(made.forks.map((f) => f.conversation), ['review']);
  assert.equal(made.copy, 'snapshot');
  assert.equal(made.snapshot, snap.snapshot);
  assert.equal(made.frozen_ms, null);
  assert.equal(await stdout(server, 'cat f', 'review'), 'one\n');
  assert.equal(await stdout(server, 'cat f'), 'two\n');
});

test('bad fork arguments are tool errors naming the problem', async (t) => {
  const server = await serve(t);
  await stdout(server, 'true');
  await stdout(server, 'true', 'taken');
  let r = await server.client.callTool({ name: 'sandbox_fork', arguments: { to_conversation: 'taken' } }, undefined, CALL);
  assert.ok(r.isError, 'an existing conversation is refused');
  assert.match(r.content[0].text, /already has a sandbox/);
  r = await server.client.callTool({ name: 'sandbox_fork', arguments: { snapshot: 'snap-nope' } }, undefined, CALL);
  assert.ok(r.isError);
  assert.match(r.content[0].text, /SNAPSHOT_NOT_FOUND|no snapshot/);
  r = await server.client.callTool({ name: 'sandbox_fork', arguments: { count: 99 } }, undefined, CALL);
  assert.ok(r.isError, 'count over 16 is refused by the schema');
});
