#!/usr/bin/env node
// Snapshots in S3 (`serve --snapshot-store`, docs/scale-out.md), through the
// real server and the SDK client, against a local S3 server that checks SigV4
// (tests/s3/server.mjs, s3rver under its own Node 24), as ratios against local
// baselines measured in the same round:
//   1. upload: server A (fresh state directory, --snapshot-store
//      s3://agentbox/bench-<round>) writes N MB of random bytes (they do not
//      compress, so the archive is the transfer) in conversation 'b'; then
//      sandbox_snapshot is timed (the archive written to the state
//      directory: the local baseline), then the time from its return until
//      snapshot_list's store is synced with pending 0 (polled every 50 ms;
//      the replicator looks at the catalog once a second and a snapshot does
//      not wake it, so up to ~1 s of this is waiting to be noticed). For
//      scale, the same archive is then PUT to the same s3rver by curl
//      (one signed request, UNSIGNED-PAYLOAD) and fetched back (GET to a
//      file), and as a multipart upload in 8 MiB parts (what agentbox
//      sends above 8 MiB): what the local S3 server itself takes for them;
//   2. restore: on A, sandbox_restore of that snapshot (the local baseline);
//      A closed; server B on a new empty state directory with the same store:
//      the first `exec true` in 'b' (manifest and archive downloaded, digests
//      checked, extracted, box started), then a second one (warm).
// Reported: medians over the rounds of upload MB/s vs local snapshot MB/s
// (archive bytes / time) and remote vs local restore ms, with their ratios.
// Usage: node bench/store_bench.mjs [--bin build/agentbox] [--mb 200] [--rounds 3] [--json]
// BENCH_STDERR=1 passes the servers' stderr through.
import { execFile, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { promisify } from 'node:util';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { BIN, Client, JSON_OUT, ROOT, StdioClientTransport, median, option, round } from './common.mjs';

const { startS3 } = await import(join(ROOT, 'tests/clients/helpers.mjs'));

const MB = Number(option('mb', 200));
const ROUNDS = Number(option('rounds', 3));
const BUCKET = 'agentbox';
const CALL = { timeout: 600_000 };   // a first call on B downloads and unpacks the whole archive
const SYNC_DEADLINE_MS = 600_000;
const log = (...a) => console.error(...a);
const run = promisify(execFile);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Everything the run starts, stopped in a safe order on exit or error:
// agentbox servers (their sandboxes live in the state directories), then
// s3rver, then the directories.
const servers = new Set();
let s3;
let work;
let cleaning;
async function cleanup() {
  cleaning ??= (async () => {
    for (const s of [...servers]) await s.close().catch(() => {});
    await s3?.stop().catch(() => {});
    if (work) removeWork();
  })();
  return cleaning;
}
// A server that exits past its shutdown deadline (it does when its stdin
// closes during an upload: the replicator's join waits for the transfer)
// leaves its workspace mounts in the state directory; they are unmounted
// here, deepest first, so the directory can go.
function removeWork() {
  try {
    rmSync(work, { recursive: true, force: true });
    return;
  } catch (err) {
    if (err.code !== 'EBUSY') throw err;
  }
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4])
    .filter((m) => m?.startsWith(`${work}/`)).sort().reverse();
  log(`a server left ${mounts.length} mounts under ${work}; unmounting them`);
  for (const m of mounts) spawnSync('umount', [m], { stdio: 'inherit' });
  rmSync(work, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => { log(`${sig}: cleaning up`); cleanup().finally(() => process.exit(130)); });
}

/** A directory under the run's one, 0711 so a root server's sandboxes reach into it. */
function dir(name) {
  const d = join(work, name);
  mkdirSync(d, { mode: 0o711 });
  chmodSync(d, 0o711);
  return d;
}

/** `agentbox serve --state-dir STATE --snapshot-store s3://agentbox/PREFIX`, listTools done. */
async function serve(name, state, prefix) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['serve', '--state-dir', state, '--snapshot-store', `s3://${BUCKET}/${prefix}`],
    env: { ...process.env, ...s3.env() },
    stderr: process.env.BENCH_STDERR ? 'inherit' : 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (d) => { stderr = (stderr + d).slice(-1_000_000); });
  const client = new Client({ name: 'store-bench', version: '0' }, { capabilities: {} });
  await client.connect(transport);
  await client.listTools();
  const pid = transport.pid;
  const server = {
    name,
    stderr: () => stderr,
    async call(tool, args) {
      const r = await client.callTool({ name: tool, arguments: args }, undefined, CALL);
      if (r.isError) throw new Error(`${name}: ${tool} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${stderr.slice(-4000)}`);
      return r.structuredContent;
    },
    async close() {
      servers.delete(server);
      await client.close().catch(() => {});
      // The SDK stops waiting after its SIGKILL; wait for the process itself,
      // so its sandboxes are gone before their directories are removed.
      for (let i = 0; pid && i < 200; i++) {
        try { process.kill(pid, 0); } catch { break; }
        await sleep(50);
      }
      notes.push(...warnings(name, stderr));
    },
  };
  servers.add(server);
  return server;
}

// What the servers said at warning level or worse, once per distinct text.
const notes = [];
function warnings(name, text) {
  const seen = new Set();
  const out = [];
  for (const line of text.split('\n')) {
    if (!/^\[[^\]]*\] \[[^\]]*\] \[(warning|error|critical)\]/.test(line)) continue;
    const key = line.replace(/^\[[^\]]*\] /, '').replace(/\d+/g, 'N');
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(`${name}: ${line.trim()}`);
  }
  return out;
}

/** s3rver's files for the objects under `prefix/`: {key, bytes, mtime}. */
function storedObjects(prefix) {
  const root = join(s3.dir, BUCKET, prefix);
  if (!existsSync(root)) return [];
  return readdirSync(root, { recursive: true })
    .filter((f) => f.endsWith('._S3rver_object'))
    .map((f) => {
      const st = statSync(join(root, f));
      return { key: f.slice(0, -'._S3rver_object'.length), bytes: st.size, mtime: st.mtimeMs };
    });
}

const ms = (t0) => performance.now() - t0;

/** The last `... in N ms` the server logged on a line matching `pattern` (its own timing), else undefined. */
function logged(server, pattern) {
  const lines = server.stderr().split('\n').filter((l) => pattern.test(l));
  const m = /in (\d+) ms/.exec(lines.at(-1) ?? '');
  return m ? Number(m[1]) : undefined;
}

/**
 * Polls snapshot_list every 50 ms until its store object is synced with
 * pending 0; returns {ms, polls, states, listed, begun}. With `watch`, begun
 * is when s3rver first held an unfinished multipart upload (its
 * ._S3rver_uploads directory not empty): when the archive's transfer had begun.
 */
async function untilSynced(server, t0, watch = false) {
  const states = [];
  const uploads = join(s3.dir, BUCKET, '._S3rver_uploads');
  let begun;
  for (let polls = 1; ; polls++) {
    if (watch && begun === undefined && existsSync(uploads) && readdirSync(uploads).length) begun = ms(t0);
    const listed = await server.call('snapshot_list', { conversation: 'b' });
    const st = listed.store;
    const seen = st ? `${st.state}/${st.pending}${st.error ? ` (${st.error})` : ''}` : 'no store object';
    if (states.at(-1) !== seen) states.push(seen);
    if (st?.state === 'synced' && st.pending === 0) return { ms: ms(t0), polls, states, listed, begun };
    if (ms(t0) > SYNC_DEADLINE_MS) throw new Error(`the store was not synced after ${SYNC_DEADLINE_MS} ms: ${states.join(' → ')}`);
    await sleep(50);
  }
}

async function round1(r) {
  const prefix = `bench-${r}`;
  const a = await serve(`A${r}`, dir(`a${r}`), prefix);
  let t0 = performance.now();
  const wrote = await a.call('exec', {
    conversation: 'b', timeout_ms: 600_000,
    command: `head -c ${MB * 1_000_000} /dev/urandom > blob && stat -c %s blob`,
  });
  if (wrote.exit_code !== 0 || Number(wrote.stdout) !== MB * 1_000_000) throw new Error(`writing the workspace: ${JSON.stringify(wrote)}`);
  const writeMs = ms(t0);
  // Whatever the first call left for the replicator (a new conversation), out of the way first.
  const before = await untilSynced(a, performance.now());

  t0 = performance.now();
  const snap = await a.call('sandbox_snapshot', { conversation: 'b' });
  const snapshotMs = ms(t0);
  const snapshotReturned = Date.now();
  const up = await untilSynced(a, performance.now(), true);
  const entry = up.listed.snapshots.find((s) => s.snapshot === snap.snapshot);
  if (!entry) throw new Error(`${snap.snapshot} is not in snapshot_list: ${JSON.stringify(up.listed.snapshots)}`);
  const bytes = entry.bytes;
  const objects = storedObjects(prefix);
  const stored = objects.find((o) => o.key.endsWith('.tar.zst') && o.bytes === bytes);
  if (!stored) throw new Error(`no ${bytes}-byte archive in the store under ${prefix}/: ${JSON.stringify(objects)}`);
  const manifest = objects.find((o) => o.key.startsWith('conversations/'));
  if (!up.states.some((s) => !s.startsWith('synced'))) {
    log(`  round ${r}: the first snapshot_list after the snapshot already said synced (${up.states.join(' → ')})`);
  }

  // The local S3 server's own speed for the same bytes, by curl: one PUT,
  // a multipart upload, one GET.
  const stateA = join(work, `a${r}`);
  const found = (await run('find', [stateA, '-xdev', '-name', '*.tar.zst', '-size', `${bytes}c`])).stdout.trim().split('\n').filter(Boolean);
  if (!found.length) throw new Error(`no ${bytes}-byte .tar.zst under ${stateA}`);
  const curlS3 = (extra, key) => run('curl', ['-sS', '--fail', '--aws-sigv4', 'aws:amz:us-east-1:s3', '--user', 'S3RVER:S3RVER',
    '-H', 'x-amz-content-sha256: UNSIGNED-PAYLOAD', ...extra, `${s3.endpoint}/${BUCKET}/curl-${r}/${key}`], { maxBuffer: 1 << 20 });
  t0 = performance.now();
  await curlS3(['-o', '/dev/null', '-T', found[0]], 'archive');
  const curlPutMs = ms(t0);
  // The same as a multipart upload in 8 MiB parts, one after another, as
  // agentbox sends it (s3rver stores each part, then joins them on
  // CompleteMultipartUpload). `?uploads=`: curl 7.88 signs a bare `?uploads`
  // wrongly.
  const partsDir = dir(`parts${r}`);
  await run('split', ['-b', String(8 << 20), '-d', '-a', '4', found[0], join(partsDir, 'p.')]);
  const parts = readdirSync(partsDir).sort();
  t0 = performance.now();
  const created = (await curlS3(['-X', 'POST'], 'multipart?uploads=')).stdout;
  const uploadId = /<UploadId>([^<]+)<\/UploadId>/.exec(created)?.[1];
  if (!uploadId) throw new Error(`CreateMultipartUpload by curl: ${created}`);
  let complete = '<CompleteMultipartUpload>';
  for (const [i, part] of parts.entries()) {
    const head = (await curlS3(['-D', '-', '-o', '/dev/null', '-T', join(partsDir, part)],
      `multipart?partNumber=${i + 1}&uploadId=${encodeURIComponent(uploadId)}`)).stdout;
    const etag = /^etag: *(\S+)/im.exec(head)?.[1];
    if (!etag) throw new Error(`UploadPart ${i + 1} by curl gave no ETag: ${head}`);
    complete += `<Part><PartNumber>${i + 1}</PartNumber><ETag>${etag}</ETag></Part>`;
  }
  await curlS3(['-o', '/dev/null', '-X', 'POST', '--data-binary', `${complete}</CompleteMultipartUpload>`],
    `multipart?uploadId=${encodeURIComponent(uploadId)}`);
  const curlMultipartMs = ms(t0);
  rmSync(partsDir, { recursive: true, force: true });
  const got = join(work, `got${r}`);
  t0 = performance.now();
  await curlS3(['-o', got], 'archive');
  const curlGetMs = ms(t0);
  if (statSync(got).size !== bytes) throw new Error(`curl GET gave ${statSync(got).size} bytes, not ${bytes}`);
  rmSync(got);

  t0 = performance.now();
  const restored = await a.call('sandbox_restore', { conversation: 'b', snapshot: snap.snapshot });
  const localRestoreMs = ms(t0);
  if (restored.snapshot !== snap.snapshot) throw new Error(`sandbox_restore gave ${JSON.stringify(restored)}`);
  // Anything the restore made (e.g. a snapshot of what it replaced) synced
  // before A goes, so that B restores what the manifest says, not a race.
  const after = await untilSynced(a, performance.now());
  const localExtractMs = logged(a, /restored snapshot .* from the archive in/);
  const snapshotsOnA = after.listed.snapshots.map((s) => `${s.snapshot}:${s.reason ?? '?'}:${s.bytes}`);
  await a.close();

  const b = await serve(`B${r}`, dir(`b${r}`), prefix);
  t0 = performance.now();
  const first = await b.call('exec', { conversation: 'b', command: 'true' });
  const remoteRestoreMs = ms(t0);
  t0 = performance.now();
  const second = await b.call('exec', { conversation: 'b', command: 'true' });
  const warmMs = ms(t0);
  if (first.exit_code !== 0 || second.exit_code !== 0) throw new Error(`exec true on B: ${JSON.stringify({ first, second })}`);
  const check = await b.call('exec', { conversation: 'b', command: 'stat -c %s blob' });
  if (Number(check.stdout) !== MB * 1_000_000) throw new Error(`B's workspace: ${JSON.stringify(check)}`);
  const listedB = await b.call('snapshot_list', { conversation: 'b' });
  const broughtMs = logged(b, /brought from the snapshot store in/);
  const remoteExtractMs = logged(b, /restored snapshot .* from the archive in/);
  await b.close();

  return {
    round: r,
    archive_bytes: bytes,
    files: snap.files,
    write_ms: writeMs,
    presync: before.states,
    local_snapshot_ms: snapshotMs,
    local_snapshot_tool_ms: snap.duration_ms,
    frozen_ms: snap.frozen_ms,
    upload_ms: up.ms,
    upload_polls: up.polls,
    upload_begun_ms: up.begun,
    // s3rver's files' mtimes, from the snapshot's return (wall clock).
    archive_stored_ms: stored.mtime - snapshotReturned,
    manifest_stored_ms: manifest ? manifest.mtime - snapshotReturned : undefined,
    upload_states: up.states,
    curl_put_ms: curlPutMs,
    curl_multipart_ms: curlMultipartMs,
    curl_get_ms: curlGetMs,
    local_restore_ms: localRestoreMs,
    local_restore_tool_ms: restored.duration_ms,
    local_extract_logged_ms: localExtractMs,
    after_restore_states: after.states,
    snapshots_on_a: snapshotsOnA,
    remote_restore_ms: remoteRestoreMs,
    remote_fetch_logged_ms: broughtMs,
    remote_extract_logged_ms: remoteExtractMs,
    remote_first_notice: first.notice,
    warm_exec_ms: warmMs,
    snapshots_on_b: listedB.snapshots.map((s) => `${s.snapshot}:${s.reason ?? '?'}:${s.bytes}`),
  };
}

try {
  work = mkdtempSync(join(tmpdir(), 'agentbox-storebench-'));
  chmodSync(work, 0o711);
  s3 = await startS3({ bucket: BUCKET });
  const rounds = [];
  for (let r = 1; r <= ROUNDS; r++) {
    const x = await round1(r);
    rounds.push(x);
    const mbs = (t) => round(x.archive_bytes / 1e6 / (t / 1000), 1);
    log(`round ${r}: archive ${round(x.archive_bytes / 1e6, 1)} MB; snapshot ${round(x.local_snapshot_ms, 0)} ms (${mbs(x.local_snapshot_ms)} MB/s), ` +
      `upload ${round(x.upload_ms, 0)} ms (${mbs(x.upload_ms)} MB/s; ${x.upload_states.join(' → ')}); curl PUT ${round(x.curl_put_ms, 0)} ms, multipart ${round(x.curl_multipart_ms, 0)} ms, GET ${round(x.curl_get_ms, 0)} ms; ` +
      `restore local ${round(x.local_restore_ms, 0)} ms, remote ${round(x.remote_restore_ms, 0)} ms, warm exec ${round(x.warm_exec_ms, 1)} ms`);
  }
  const med = (k) => median(rounds.map((x) => x[k]));
  const medOpt = (k, d = 0) => (rounds.every((x) => Number.isFinite(x[k])) ? round(med(k), d) : undefined);
  const mbsOf = (k) => median(rounds.map((x) => x.archive_bytes / 1e6 / (x[k] / 1000)));
  const uploadMbs = mbsOf('upload_ms');
  const snapshotMbs = mbsOf('local_snapshot_ms');
  const result = {
    mb: MB,
    rounds: ROUNDS,
    archive_mb: round(med('archive_bytes') / 1e6, 1),
    local_snapshot_ms: round(med('local_snapshot_ms'), 0),
    local_snapshot_mb_s: round(snapshotMbs, 1),
    upload_ms: round(med('upload_ms'), 0),
    upload_mb_s: round(uploadMbs, 1),
    upload_over_snapshot_throughput: round(uploadMbs / snapshotMbs),
    // Where the upload's time went: until s3rver first held a multipart
    // upload (the replicator's next look, its GET of the old manifest, the
    // upload's creation), until the archive object was complete, until the
    // manifest was written (s3rver's files' mtimes).
    upload_begun_ms: medOpt('upload_begun_ms'),
    archive_stored_ms: medOpt('archive_stored_ms'),
    manifest_stored_ms: medOpt('manifest_stored_ms'),
    curl_put_ms: round(med('curl_put_ms'), 0),
    curl_put_mb_s: round(mbsOf('curl_put_ms'), 1),
    curl_multipart_ms: round(med('curl_multipart_ms'), 0),
    curl_multipart_mb_s: round(mbsOf('curl_multipart_ms'), 1),
    upload_over_curl_multipart_throughput: round(uploadMbs / mbsOf('curl_multipart_ms')),
    curl_get_ms: round(med('curl_get_ms'), 0),
    curl_get_mb_s: round(mbsOf('curl_get_ms'), 1),
    upload_over_curl_put_throughput: round(uploadMbs / mbsOf('curl_put_ms')),
    local_restore_ms: round(med('local_restore_ms'), 0),
    remote_restore_ms: round(med('remote_restore_ms'), 0),
    remote_over_local_restore: round(med('remote_restore_ms') / med('local_restore_ms')),
    warm_exec_ms: round(med('warm_exec_ms'), 2),
    // The servers' own log lines (absent with BENCH_STDERR): B's first call
    // broken down, and A's extraction inside sandbox_restore.
    remote_fetch_logged_ms: medOpt('remote_fetch_logged_ms'),
    remote_extract_logged_ms: medOpt('remote_extract_logged_ms'),
    local_extract_logged_ms: medOpt('local_extract_logged_ms'),
    per_round: rounds.map((x) => Object.fromEntries(Object.entries(x).map(([k, v]) => [k, typeof v === 'number' ? round(v, 1) : v]))),
    server_warnings: notes,
  };
  result.rows = [
    { name: `upload to the store (local s3rver) vs sandbox_snapshot, ${result.archive_mb} MB archive (MB/s)`, agentbox: result.upload_mb_s, baseline: `${result.local_snapshot_mb_s} (sandbox_snapshot)`, unit: 'MB/s', ratio: result.upload_over_snapshot_throughput },
    { name: `upload to the store vs curl PUT of the same archive to the same s3rver (MB/s)`, agentbox: result.upload_mb_s, baseline: `${result.curl_put_mb_s} (curl PUT)`, unit: 'MB/s', ratio: result.upload_over_curl_put_throughput },
    { name: `upload to the store vs curl multipart upload (8 MiB parts) of the same archive to the same s3rver (MB/s)`, agentbox: result.upload_mb_s, baseline: `${result.curl_multipart_mb_s} (curl multipart)`, unit: 'MB/s', ratio: result.upload_over_curl_multipart_throughput },
    { name: `first call on an empty state directory (restore from the store) vs sandbox_restore (ms)`, agentbox: result.remote_restore_ms, baseline: `${result.local_restore_ms} (sandbox_restore)`, unit: 'ms', ratio: result.remote_over_local_restore },
  ];
  if (JSON_OUT) console.log(JSON.stringify(result));
  else {
    const line = (what, a = '', b = '', ratio = '') => console.log(`  ${what.padEnd(50)} ${String(a ?? '-').padStart(9)} ${String(b ?? '-').padStart(9)}  ${ratio}`);
    console.log(`snapshots in S3 (local s3rver), ${MB} MB of random bytes, archive ${result.archive_mb} MB, ${ROUNDS} rounds (medians)`);
    line('', 'store', 'baseline', 'ratio');
    line('upload vs sandbox_snapshot (MB/s)', result.upload_mb_s, result.local_snapshot_mb_s, `${result.upload_over_snapshot_throughput}x`);
    line('  the same in ms', result.upload_ms, result.local_snapshot_ms);
    line('  upload begun / archive stored / manifest (ms)', `${result.upload_begun_ms}/${result.archive_stored_ms}/${result.manifest_stored_ms}`);
    line('upload vs curl PUT, same s3rver (MB/s)', result.upload_mb_s, result.curl_put_mb_s, `${result.upload_over_curl_put_throughput}x`);
    line('upload vs curl multipart, 8 MiB parts (MB/s)', result.upload_mb_s, result.curl_multipart_mb_s, `${result.upload_over_curl_multipart_throughput}x`);
    line('restore: first exec on B vs sandbox_restore (ms)', result.remote_restore_ms, result.local_restore_ms, `${result.remote_over_local_restore}x`);
    if (result.remote_fetch_logged_ms !== undefined) {
      line('  B: fetched from the store (log) vs curl GET (ms)', result.remote_fetch_logged_ms, result.curl_get_ms);
      line('  extracted (log): B vs A (ms)', result.remote_extract_logged_ms, result.local_extract_logged_ms);
    }
    line('warm exec on B after it (ms)', result.warm_exec_ms);
    if (notes.length) console.log(`server warnings/errors (distinct):\n  ${notes.join('\n  ')}`);
  }
} finally {
  await cleanup();
}
