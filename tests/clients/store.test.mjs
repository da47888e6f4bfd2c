// The S3 snapshot store (docs/scale-out.md, "Snapshots in S3"; `serve
// --snapshot-store s3://bucket/prefix`) through the official SDK client after
// listTools, against a local S3 server that checks SigV4 signatures
// (tests/s3/server.mjs, s3rver): a conversation restored on a server with an
// empty state directory from the store alone (files, cwd, exports; 20 MB of
// random bytes, so a multipart upload); a wrong secret and a store that went
// down keep the snapshot local, say so in snapshot_list's store object, and
// (the store back) catch up; an archive changed in the store is refused as
// SNAPSHOT_CORRUPT; sandbox_destroy empties the store of the conversation; a
// store nobody answers at is a tool error for a new conversation, never a
// silently empty sandbox; a manifest that does not check is refused and
// writes nothing; no store, no store object.
import { after, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, readdirSync, rmSync, statSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

import { execFileSync } from 'node:child_process';

import { AGENTBOX_BIN, callOk, startS3, startServer, tail, sleep } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };  // a first call restores from the store: 20 MB down and unpacked
const WAIT_MS = 30_000;            // retries back off to ~5 s; a store state gets this long
const BUCKET = 'agentbox';

// One S3 server for the tests that do not stop theirs; each test keeps to its
// own prefix in the bucket.
let shared;
const sharedS3 = () => (shared ??= startS3({ bucket: BUCKET }));
after(async () => {
  if (shared) await (await shared.catch(() => undefined))?.stop();
});

/**
 * What a test starts, stopped in one after hook in a safe order: agentbox
 * servers (their sandboxes use the state directories), then S3 servers, then
 * the directories.
 */
function scope(t) {
  const servers = [];
  const stores = [];
  const dirs = [];
  t.after(async () => {
    for (const s of servers) await s.close().catch(() => {});
    for (const s of stores) await s.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  return {
    /** A directory removed after the test; 0711 so a root server's sandboxes reach into a state directory. */
    dir(prefix) {
      const d = mkdtempSync(join(tmpdir(), prefix));
      chmodSync(d, 0o711);
      dirs.push(d);
      return d;
    },
    async s3(options) {
      const s = await startS3({ bucket: BUCKET, ...options });
      stores.push(s);
      return s;
    },
    /**
     * `agentbox serve --snapshot-store s3://agentbox/<prefix>` (no store
     * without a prefix) with `env` (the store's endpoint and credentials),
     * on a fresh state directory unless stateDir; listTools done.
     */
    async serve({ prefix, env, stateDir } = {}) {
      const extraArgs = prefix ? ['--snapshot-store', storeUrl(prefix)] : [];
      const server = await startServer({ testTools: false, extraArgs, stateDir, env });
      servers.push(server);
      await server.client.listTools();
      return server;
    },
  };
}

const storeUrl = (prefix) => `s3://${BUCKET}/${prefix}`;

const call = (server, name, args = {}) => callOk(server, name, args, CALL);

/** A call expected to fail as a tool error (isError), not a protocol error. */
async function callFails(server, name, args = {}) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
  assert.equal(r.isError, true, `${name} ${JSON.stringify(args)} was expected to fail: ${JSON.stringify(r.structuredContent)}\n${tail(server.stderr())}`);
  return r;
}

async function stdout(server, command, conversation) {
  const r = await call(server, 'exec', { command, conversation });
  assert.equal(r.exit_code, 0, `${command} in ${conversation}: ${r.stderr}\n${tail(server.stderr())}`);
  return r.stdout;
}

/**
 * Polls snapshot_list until its store object is in `state` ("synced" also
 * means pending 0; `error` a pattern its error must match), at most WAIT_MS.
 * Returns that snapshot_list result.
 */
async function storeBecomes(server, conversation, state, { error, url } = {}) {
  const deadline = Date.now() + WAIT_MS;
  let last;
  for (;;) {
    const listed = await call(server, 'snapshot_list', { conversation });
    last = listed.store;
    if (last) {
      assert.equal(typeof last.url, 'string', `store.url: ${JSON.stringify(last)}`);
      if (url) assert.equal(last.url, url);
      assert.ok(Number.isInteger(last.pending) && last.pending >= 0, `store.pending: ${JSON.stringify(last)}`);
      assert.match(last.state, /^(synced|pending|failing)$/);
    }
    if (last?.state === state && (state !== 'synced' || last.pending === 0) && (!error || error.test(last.error ?? ''))) {
      return listed;
    }
    if (Date.now() > deadline) {
      assert.fail(`snapshot_list's store never became ${state}${error ? ` with an error matching ${error}` : ''} ` +
        `in ${WAIT_MS} ms; last: ${JSON.stringify(last)}\n${tail(server.stderr())}`);
    }
    await sleep(250);
  }
}

// s3rver's directory: <dir>/<bucket>/<key>._S3rver_object holds an object's
// bytes (with ._S3rver_object.md5 and ._S3rver_metadata.json beside it; key
// slashes are directories, emptied ones removed with the last object);
// unfinished multipart uploads are under <dir>/<bucket>/._S3rver_uploads/.
const OBJECT = '._S3rver_object';
const objectFile = (s3, key) => join(s3.dir, s3.bucket, key + OBJECT);
const manifestKey = (prefix, conversation) =>
  `${prefix}/conversations/${createHash('sha256').update(conversation).digest('hex')}.json`;

/** The keys of the objects s3rver holds under `prefix/`, sorted. */
function storedKeys(s3, prefix) {
  const root = join(s3.dir, s3.bucket, prefix);
  if (!existsSync(root)) return [];
  return readdirSync(root, { recursive: true })
    .filter((f) => f.endsWith(OBJECT))
    .map((f) => `${prefix}/${f.slice(0, -OBJECT.length)}`)
    .sort();
}

const archiveKeys = (s3, prefix) => storedKeys(s3, prefix).filter((k) => /^[^/]+(\/[^/]+)*\/sandboxes\/[^/]+\/[^/]+\.tar\.zst$/.test(k));

/** Inverts 64 bytes in the middle of a file, its length kept. */
function flipMiddle(file) {
  const size = statSync(file).size;
  assert.ok(size > 0, `${file} is empty`);
  const at = Math.max(0, Math.floor(size / 2) - 32);
  const bytes = Buffer.alloc(Math.min(64, size - at));
  const fd = openSync(file, 'r+');
  try {
    readSync(fd, bytes, 0, bytes.length, at);
    for (let i = 0; i < bytes.length; i++) bytes[i] ^= 0xff;
    writeSync(fd, bytes, 0, bytes.length, at);
  } finally {
    closeSync(fd);
  }
  assert.equal(statSync(file).size, size);
}

/** A port nothing listens on (bound once, then closed). */
async function closedPort() {
  const server = net.createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

const sha256 = (file) => createHash('sha256').update(readFileSync(file)).digest('hex');

test('a conversation comes back on an empty state directory from the store alone', async (t) => {
  const s3 = await sharedS3();
  const { serve } = scope(t);
  const prefix = 'restore';
  const a = await serve({ prefix, env: s3.env() });
  await stdout(a, 'mkdir -p proj && cd proj && head -c 20000000 /dev/urandom > big && md5sum big > sum && export TOKEN=abc', 'c1');
  const snap = await call(a, 'sandbox_snapshot', { conversation: 'c1' });
  const listed = await storeBecomes(a, 'c1', 'synced', { url: storeUrl(prefix) });
  assert.ok(listed.snapshots.some((s) => s.snapshot === snap.snapshot), `${snap.snapshot} is listed`);
  assert.ok(!listed.store.error, `no error once synced: ${JSON.stringify(listed.store)}`);

  // In the bucket: the manifest at the conversation's key and the archive
  // (20 MB of random bytes do not compress: a multipart upload) under the
  // sandbox's, its digest the manifest's; no upload left unfinished.
  const keys = storedKeys(s3, prefix);
  const manifest = manifestKey(prefix, 'c1');
  assert.ok(keys.includes(manifest), `${manifest} among ${JSON.stringify(keys)}`);
  const archives = archiveKeys(s3, prefix);
  assert.ok(archives.length >= 1, `an archive among ${JSON.stringify(keys)}`);
  const biggest = archives.map((k) => ({ k, size: statSync(objectFile(s3, k)).size })).sort((x, y) => y.size - x.size)[0];
  assert.ok(biggest.size >= 20_000_000, `${biggest.k} is ${biggest.size} bytes`);
  const manifestText = readFileSync(objectFile(s3, manifest), 'utf8');
  assert.doesNotThrow(() => JSON.parse(manifestText), 'the manifest is JSON');
  assert.ok(manifestText.includes(snap.snapshot), `the manifest names ${snap.snapshot}: ${manifestText.slice(0, 2000)}`);
  assert.ok(manifestText.includes(sha256(objectFile(s3, biggest.k))), `the manifest has ${biggest.k}'s sha256`);
  const uploads = join(s3.dir, s3.bucket, '._S3rver_uploads');
  assert.deepEqual(existsSync(uploads) ? readdirSync(uploads) : [], [], 'no multipart upload left open');
  await a.close();

  // Another server, nothing in its state directory: the first call restores
  // the conversation from the store.
  const b = await serve({ prefix, env: s3.env() });
  assert.equal(await stdout(b, 'pwd; echo $TOKEN; md5sum -c sum', 'c1'), '/workspace/proj\nabc\nbig: OK\n', tail(b.stderr()));
  const there = await call(b, 'snapshot_list', { conversation: 'c1' });
  assert.ok(there.snapshots.some((s) => s.snapshot === snap.snapshot), `${snap.snapshot} is listed on the second server`);
  assert.equal(there.store?.url, storeUrl(prefix));
});

/** The mount points under dir, from /proc/self/mountinfo (a root server's sandboxes mount their filesystems there). */
const mountsUnder = (dir) => readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
  .map((line) => line.split(' ')[4]).filter((m) => m && (m === dir || m.startsWith(dir + '/')));

test('a server closed during an upload exits at once and leaves nothing mounted', async (t) => {
  const s3 = await sharedS3();
  const { serve, dir } = scope(t);
  const state = dir('agentbox-store-state-');
  const server = await serve({ prefix: 'closed-mid-upload', env: s3.env(), stateDir: state });
  // 200 MB of random bytes: seconds of multipart upload to s3rver.
  await stdout(server, 'head -c 200000000 /dev/urandom > big', 'up');
  await call(server, 'sandbox_snapshot', { conversation: 'up' });
  const listed = await call(server, 'snapshot_list', { conversation: 'up' });
  assert.equal(listed.store?.state, 'pending', `the upload is under way: ${JSON.stringify(listed.store)}`);
  // Closed once the helper is sending parts: a multipart upload is open in s3rver.
  const uploads = join(s3.dir, s3.bucket, '._S3rver_uploads');
  for (const deadline = Date.now() + WAIT_MS; !(existsSync(uploads) && readdirSync(uploads).length > 0);) {
    assert.ok(Date.now() < deadline, `no multipart upload began in ${WAIT_MS} ms\n${tail(server.stderr())}`);
    await sleep(50);
  }

  const started = Date.now();
  await server.close();
  const took = Date.now() - started;
  assert.doesNotMatch(server.stderr(), /shutdown took longer/, tail(server.stderr()));
  assert.ok(took < 4000, `closing took ${took} ms\n${tail(server.stderr())}`);
  assert.deepEqual(mountsUnder(state), [], `nothing mounted under ${state}\n${tail(server.stderr())}`);

  // The next server on that state directory finishes the upload.
  const again = await serve({ prefix: 'closed-mid-upload', env: s3.env(), stateDir: state });
  await storeBecomes(again, 'up', 'synced');
});

test('a wrong secret: the snapshot stays local, restorable, and snapshot_list says why', async (t) => {
  const s3 = await sharedS3();
  const { serve, dir } = scope(t);
  const prefix = 'wrong-secret';
  // The conversation is made with the right secret (a new conversation is
  // first looked up in the store, which a wrong secret cannot do), then
  // served on the same state directory with a wrong one.
  const state = dir('agentbox-store-state-');
  const first = await serve({ prefix, env: s3.env(), stateDir: state });
  await stdout(first, 'echo one > f', 'ws');
  await first.close();

  const server = await serve({ prefix, env: s3.env('wrong'), stateDir: state });
  await stdout(server, 'echo two > f', 'ws');
  const snap = await call(server, 'sandbox_snapshot', { conversation: 'ws' });
  const listed = await storeBecomes(server, 'ws', 'failing', { error: /SignatureDoesNotMatch|signature/i, url: storeUrl(prefix) });
  assert.ok(listed.store.pending >= 1, `the snapshot is pending: ${JSON.stringify(listed.store)}`);
  assert.ok(listed.snapshots.some((s) => s.snapshot === snap.snapshot), `${snap.snapshot} is listed`);

  await stdout(server, 'echo three > f', 'ws');
  const restored = await call(server, 'sandbox_restore', { snapshot: snap.snapshot, conversation: 'ws' });
  assert.equal(restored.snapshot, snap.snapshot);
  assert.equal(await stdout(server, 'cat f', 'ws'), 'two\n');
});

test('a store that went down: failing while down, synced once it is back', async (t) => {
  const { serve, s3, dir } = scope(t);
  const prefix = 'down-and-back';
  const objects = dir('agentbox-s3-');
  let store = await s3({ dir: objects });
  const port = store.port;
  const server = await serve({ prefix, env: store.env() });
  await stdout(server, 'echo kept > f', 'db');  // a new conversation: asks the store first
  await store.stop();

  const snap = await call(server, 'sandbox_snapshot', { conversation: 'db' });
  const failing = await storeBecomes(server, 'db', 'failing', { error: /reach|connect/i });
  assert.ok(failing.snapshots.some((s) => s.snapshot === snap.snapshot), `${snap.snapshot} is listed while the store is down`);
  assert.ok(failing.store.pending >= 1, JSON.stringify(failing.store));

  // Same port, same objects: the retries (backing off to ~5 s) find it.
  store = await s3({ dir: objects, port });
  assert.equal(store.port, port);
  await storeBecomes(server, 'db', 'synced');
  assert.ok(storedKeys(store, prefix).includes(manifestKey(prefix, 'db')), JSON.stringify(storedKeys(store, prefix)));
  assert.ok(archiveKeys(store, prefix).length >= 1, JSON.stringify(storedKeys(store, prefix)));
});

test('an archive changed in the store is refused: SNAPSHOT_CORRUPT, nothing restored', async (t) => {
  const s3 = await sharedS3();
  const { serve } = scope(t);
  const prefix = 'corrupt';
  const a = await serve({ prefix, env: s3.env() });
  await stdout(a, 'echo precious > f && head -c 50000 /dev/urandom > noise', 'cx');
  const snap = await call(a, 'sandbox_snapshot', { conversation: 'cx' });
  const listed = await storeBecomes(a, 'cx', 'synced');
  const ids = listed.snapshots.map((s) => s.snapshot);
  assert.ok(ids.includes(snap.snapshot));
  await a.close();

  const archives = archiveKeys(s3, prefix);
  assert.ok(archives.length >= 1, JSON.stringify(storedKeys(s3, prefix)));
  for (const key of archives) flipMiddle(objectFile(s3, key));

  const b = await serve({ prefix, env: s3.env() });
  for (const attempt of ['first', 'second']) {
    const r = await callFails(b, 'exec', { command: 'cat f', conversation: 'cx' });
    const text = r.content?.[0]?.text ?? '';
    assert.match(text, new RegExp(ids.join('|')), `the ${attempt} call's error names the snapshot: ${text}`);
    assert.match(text, /SNAPSHOT_CORRUPT|digest/, `the ${attempt} call: ${text}`);
    const code = r._meta?.['agentbox/error']?.code;
    if (code !== undefined) assert.equal(code, 'SNAPSHOT_CORRUPT', text);
  }
});

test('sandbox_destroy takes the conversation out of the store', async (t) => {
  const s3 = await sharedS3();
  const { serve } = scope(t);
  const prefix = 'destroy';
  const a = await serve({ prefix, env: s3.env() });
  await stdout(a, 'echo old > f', 'dx');
  await call(a, 'sandbox_snapshot', { conversation: 'dx' });
  await storeBecomes(a, 'dx', 'synced');
  const manifest = manifestKey(prefix, 'dx');
  assert.ok(storedKeys(s3, prefix).includes(manifest));
  assert.ok(archiveKeys(s3, prefix).length >= 1);

  await call(a, 'sandbox_destroy', { conversation: 'dx' });
  // Erased now or by the replicator shortly after: at most WAIT_MS.
  const deadline = Date.now() + WAIT_MS;
  while (storedKeys(s3, prefix).length > 0) {
    assert.ok(Date.now() < deadline, `still in the bucket ${WAIT_MS} ms after sandbox_destroy: ` +
      `${JSON.stringify(storedKeys(s3, prefix))}\n${tail(a.stderr())}`);
    await sleep(250);
  }
  assert.equal(existsSync(objectFile(s3, manifest)), false);
  await a.close();

  const b = await serve({ prefix, env: s3.env() });
  assert.equal(await stdout(b, 'test -e f && echo present || echo absent; pwd', 'dx'), 'absent\n/workspace\n');
});

test('a store nobody answers at: a new conversation is a tool error naming it', async (t) => {
  const { serve } = scope(t);
  const prefix = 'unreachable';
  const endpoint = `http://127.0.0.1:${await closedPort()}`;
  const server = await serve({
    prefix,
    env: { AWS_ENDPOINT_URL: endpoint, AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1' },
  });
  // Twice: the first failure did not leave an empty sandbox behind.
  for (const attempt of ['first', 'second']) {
    const r = await callFails(server, 'exec', { command: 'echo hi', conversation: 'nc' });
    const text = r.content?.[0]?.text ?? '';
    assert.ok(text.includes(storeUrl(prefix)) || text.includes(endpoint), `the ${attempt} error names the store: ${text}`);
  }
});

test('without --snapshot-store snapshot_list has no store object', async (t) => {
  const { serve } = scope(t);
  const server = await serve();
  await stdout(server, 'echo x > f', 'plain');
  await call(server, 'sandbox_snapshot', { conversation: 'plain' });
  const listed = await call(server, 'snapshot_list', { conversation: 'plain' });
  assert.equal(listed.snapshots.length >= 1, true);
  assert.equal('store' in listed, false, JSON.stringify(listed));
});

test('a manifest in the store is untrusted: each bad one is refused, naming why, and nothing is written', async (t) => {
  const s3 = await sharedS3();
  const { serve, dir } = scope(t);
  const prefix = 'hostile';
  const scratch = dir('agentbox-hostile-');
  // Written with the snapshot helper's own signed PUT (s3_transfer.h).
  const put = (key, text) => {
    const file = join(scratch, 'body');
    writeFileSync(file, text);
    execFileSync(join(dirname(AGENTBOX_BIN), 'agentbox-archive'), ['s3', 'put', s3.bucket, key, file], {
      env: { ...process.env, ...s3.env() },
    });
  };
  const snap = (over = {}) => ({
    id: 'snap-0123456789ab', parent: '', digest: `sha256:${'0'.repeat(64)}`, file: 'snap-0123456789ab.tar.zst',
    bytes: 10, files: 1, created_at: '2026-12-07T00:00:00Z', label: '', reason: 'manual', ...over,
  });
  const manifest = (conversation, over = {}, snaps = [snap()]) => JSON.stringify({
    format: 'agentbox-store-manifest 1', conversation, sandbox: '0123456789ab', snapshots: snaps, sessions: [], ...over,
  });
  const cases = {
    'not-json': () => '{"format": ',
    'other-conversation': (c) => manifest(`${c}-other`),
    'sandbox-path': (c) => manifest(c, { sandbox: '../../../tmp' }),
    'file-path': (c) => manifest(c, {}, [snap({ file: '../../../../tmp/agentbox-hostile.tar.zst' })]),
    'reason': (c) => manifest(c, {}, [snap({ reason: 'x'.repeat(10) })]),
    'parent-missing': (c) => manifest(c, {}, [snap({ parent: 'snap-ba9876543210' })]),
    'bytes-string': (c) => manifest(c, {}, [snap({ bytes: '10' })]),
    'session-no-name': (c) => manifest(c, { sessions: [{ name: '', cwd: '/', state: '' }] }),
  };
  for (const [name, make] of Object.entries(cases)) put(manifestKey(prefix, `h-${name}`), make(`h-${name}`));
  const state = dir('agentbox-hostile-state-');
  const server = await serve({ prefix, env: s3.env(), stateDir: state });
  for (const name of Object.keys(cases)) {
    const r = await callFails(server, 'exec', { command: 'true', conversation: `h-${name}` });
    const text = r.content?.[0]?.text ?? '';
    assert.match(text, /manifest for conversation 'h-[a-z-]+' cannot be used/, `${name}: ${text}`);
    assert.equal(r._meta?.['agentbox/error']?.code, 'SNAPSHOT_CORRUPT', `${name}: ${text}`);
  }
  assert.equal(existsSync('/tmp/agentbox-hostile.tar.zst'), false);
  assert.deepEqual(readdirSync(join(state, 'snapshots')), [], 'no sandbox was brought in');
  // The server is fine after all that: a conversation the store does not know starts.
  assert.equal(await stdout(server, 'echo fine', 'h-new'), 'fine\n');
});
