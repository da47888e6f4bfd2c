// `--network proxy` (docs/network.md) through the official MCP SDK client
// after listTools (results checked against the output schemas), against the
// real server, real sandboxes and a real HTTP origin on the host's loopback
// reached through the policy's `resolve`: an allowed host answers, a denied
// one gets 403 and the exec result says why (network_denied), network_status
// shows the policy and the denial, the secret reaches its host only and the
// box holds only its placeholder, and a bad policy stops the server with a
// sentence.
import { test as baseTest } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { AGENTBOX_BIN, startServer, tail, tempDir } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function origin(t) {
  const server = createServer((req, res) => {
    res.end(`origin saw ${req.url} auth=${req.headers.authorization ?? 'none'}`);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  t.after(() => server.close());
  return server.address().port;
}

function policyFile(t, policy) {
  const dir = tempDir('agentbox-policy-');
  t.after(dir.cleanup);
  const path = join(dir.dir, 'policy.json');
  writeFileSync(path, JSON.stringify(policy));
  return path;
}

async function serve(t, port) {
  const path = policyFile(t, {
    allow: [`origin.test:${port}`, `secret.test:${port}`],
    resolve: { 'origin.test': '127.0.0.1', 'secret.test': '127.0.0.1' },
    secrets: [{ host: 'secret.test', header: 'Authorization', value_from_env: 'AGENTBOX_TEST_TOKEN', format: 'Bearer {}' }],
  });
  const server = await startServer({
    testTools: false,
    extraArgs: ['--network', 'proxy', '--network-policy', path],
    env: { AGENTBOX_TEST_TOKEN: 'tok-123' },
  });
  t.after(() => server.close());
  const tools = await server.client.listTools();
  assert.ok(tools.tools.some((tool) => tool.name === 'network_status'), 'network_status is listed');
  return server;
}

async function call(server, name, args = {}) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
  return r;
}

test('allowed hosts answer, denied ones say why, secrets stay outside the box', async (t) => {
  const port = await origin(t);
  const server = await serve(t, port);
  let r = await call(server, 'exec', { command: `curl -sS http://origin.test:${port}/hi` });
  assert.equal(r.structuredContent.stdout, 'origin saw /hi auth=none');
  assert.equal(r.structuredContent.network_denied, undefined);

  r = await call(server, 'exec', { command: 'curl -sS -o /dev/null -w "%{http_code}" https://blocked.test/' });
  assert.deepEqual(
    r.structuredContent.network_denied.map((d) => [d.host, d.port]),
    [['blocked.test', 443]],
  );
  assert.match(r.structuredContent.network_denied[0].reason, /blocked\.test/);
  assert.match(r.content[0].text, /network denied: .*blocked\.test/);

  r = await call(server, 'exec', { command: `curl -sS http://secret.test:${port}/; echo; echo "$AGENTBOX_TEST_TOKEN"; env | grep -c tok-123` });
  assert.equal(r.structuredContent.stdout, 'origin saw / auth=Bearer tok-123\nagentbox-secret:AGENTBOX_TEST_TOKEN\n0\n');

  // Nowhere in the box's files (searched for in two halves, so the command
  // itself does not hold it), nor in a snapshot's contents, nor anywhere in
  // the state directory (the catalog keeps the policy, never the value).
  r = await call(server, 'exec', {
    command: "echo agentbox-marker-$((6*7)) > /workspace/marker; a=tok; b=-123; grep -rlF -D skip -e \"$a$b\" / " +
      '--exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=opt 2>/dev/null; echo searched',
    timeout_ms: 120_000,
  });
  assert.equal(r.structuredContent.stdout, 'searched\n');
  await call(server, 'sandbox_snapshot');
  const archives = spawnSync('find', [server.stateDir, '-name', '*.tar*', '-type', 'f'], { encoding: 'utf8' }).stdout.trim().split('\n');
  assert.ok(archives.length > 0 && archives[0] !== '', `no archive in ${server.stateDir}`);
  const inArchives = (needle) => archives.map((a) => spawnSync('sh', ['-c', `tar --zstd -xOf '${a}' | grep -caF -e '${needle}'`],
    { encoding: 'utf8' }).stdout.trim()).join(',');
  assert.match(inArchives('agentbox-marker-42'), /[1-9]/, `the search finds what the box wrote: ${archives}`);
  assert.doesNotMatch(inArchives('tok-123'), /[1-9]/);
  // The disk pool (disks.pool, a sparse file the size of the host's filesystem:
  // 252 GB here, 132 s for grep -a to read its holes) holds the boxes' own
  // filesystems, searched from inside the box above; everything else is read.
  assert.equal(spawnSync('grep', ['-rlaF', '--exclude=disks.pool', '--exclude=*.img', 'tok-123', server.stateDir],
    { encoding: 'utf8' }).stdout, '');

  r = await call(server, 'network_status');
  const status = r.structuredContent;
  assert.equal(status.mode, 'proxy');
  assert.equal(status.proxy, 'http://127.0.0.1:3128');
  assert.deepEqual(status.policy.allow, [`origin.test:${port}`, `secret.test:${port}`]);
  assert.ok(!JSON.stringify(status).includes('tok-123'), 'the secret value never shows');
  assert.ok(status.denied.some((d) => d.host === 'blocked.test' && d.port === 443 && d.at.endsWith('Z')));
});

test('a background process that is denied says so in its process_output, and only in its own', async (t) => {
  const port = await origin(t);
  const server = await serve(t, port);
  const started = await call(server, 'process_start', { command: 'curl -sS -o /dev/null http://refused.test/' });
  const id = started.structuredContent.process_id;
  await call(server, 'process_wait', { process_id: id, timeout_ms: 30_000 });
  let r = await call(server, 'process_output', { process_id: id });
  assert.deepEqual(r.structuredContent.network_denied?.map((d) => [d.host, d.port]), [['refused.test', 80]]);
  assert.match(r.content[0].text, /network denied: .*refused\.test/);
  assert.equal(r.structuredContent.started_unix_ms, undefined, 'the span stays between agent and server');
  // A denial after the process ended is not its.
  await call(server, 'exec', { command: 'curl -sS -o /dev/null http://later.test/' });
  r = await call(server, 'process_output', { process_id: id });
  assert.deepEqual(r.structuredContent.network_denied.map((d) => d.host), ['refused.test']);
  const quiet = await call(server, 'process_start', { command: `curl -sS http://origin.test:${port}/ok` });
  await call(server, 'process_wait', { process_id: quiet.structuredContent.process_id, timeout_ms: 30_000 });
  r = await call(server, 'process_output', { process_id: quiet.structuredContent.process_id });
  assert.equal(r.structuredContent.stdout, 'origin saw /ok auth=none');
  assert.equal(r.structuredContent.network_denied, undefined);
});

test('network_status without the proxy says there is no network', async (t) => {
  const server = await startServer({ testTools: false });
  t.after(() => server.close());
  await server.client.listTools();
  const r = await call(server, 'network_status');
  assert.equal(r.structuredContent.mode, 'none');
  assert.deepEqual(r.structuredContent.denied, []);
});

test('a policy that does not parse stops the server with a sentence', (t) => {
  const path = policyFile(t, { allow: ['*.'] });
  const run = spawnSync(AGENTBOX_BIN, ['serve', '--network', 'proxy', '--network-policy', path], { input: '', encoding: 'utf8' });
  assert.equal(run.status, 2, run.stderr);
  assert.match(run.stderr, /policy .*allow\[0\]/);
  const missing = spawnSync(AGENTBOX_BIN, ['serve', '--network', 'proxy'], { input: '', encoding: 'utf8' });
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /--network-policy/);
});
