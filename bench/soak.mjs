#!/usr/bin/env node
// Load and soak test for `agentbox serve`, driven by the official MCP SDK client
// over stdio (the package installed in tests/clients).
//
//   warm-up  one exec in each of the 16 conversations, a few create/destroy cycles;
//            then the baseline: the server's open fds, descendant processes, RSS.
//   load     10,000 `exec` calls spread over 16 conversations, 64 in flight; every
//            reply checked (its stdout is the number the command echoed).
//   cycles   500 sandbox create/destroy cycles: `exec` in a fresh conversation,
//            then `sandbox_destroy` (4 cycles in flight; --cycles-in-flight N).
//   after    fds, processes and RSS back near the baseline; every request id
//            answered exactly once; then every soak conversation is destroyed and
//            no sandbox directory (STATE/sandboxes/*) or cgroup (sandbox-<id>
//            under /sys/fs/cgroup/*/…/agentbox) of this server is left.
//
// Usage: node bench/soak.mjs [--quick] [--bin PATH] [--execs N] [--cycles N] [--conversations N]
//                            [--cycles-in-flight N] [--json]
//   --quick: 1,000 execs and 50 cycles (the scripts/test stage).
// Prints a summary; exits 1 on any violation, 2 on a setup error.
import { createRequire } from 'node:module';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const sdkRequire = createRequire(resolve(HERE, '../tests/clients/package.json'));
const sdk = async (path) => import(pathToFileURL(sdkRequire.resolve(`@modelcontextprotocol/sdk/${path}`)).href);

const IN_FLIGHT = 64;
const CALL_TIMEOUT_MS = 60_000;
const DEADLINE_MS = 15 * 60_000; // the whole run, whatever the counts
// "Back near the baseline": allowances for what a busy server may keep.
const FD_SLACK = 8;
const RSS_SLACK_MIB = 32;
const SETTLE_MS = 10_000;

function parseArgs(argv) {
  const opts = {
    execs: 10_000,
    conversations: 16,
    cycleWidth: 4,
    cycles: 500,
    json: false,
    bin: process.env.AGENTBOX_BIN ? resolve(process.env.AGENTBOX_BIN) : resolve(HERE, '../build/agentbox'),
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => argv[++i] ?? (() => { throw new Error(`${arg} needs a value`); })();
    if (arg === '--quick') Object.assign(opts, { execs: 1000, cycles: 50 });
    else if (arg === '--execs') opts.execs = Number(value());
    else if (arg === '--cycles') opts.cycles = Number(value());
    else if (arg === '--conversations') opts.conversations = Number(value());
    else if (arg === '--cycles-in-flight') opts.cycleWidth = Number(value());
    else if (arg === '--bin') opts.bin = resolve(value());
    else if (arg === '--json') opts.json = true;
    else throw new Error(`unknown argument ${arg} (see the header of bench/soak.mjs)`);
  }
  return opts;
}

const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- what the server holds, read from /proc --------------------------------

function fdCount(pid) {
  return readdirSync(`/proc/${pid}/fd`).length;
}

function rssMiB(pid) {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Every live process below `pid` (children, grandchildren, …). */
function descendants(pid) {
  const children = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // exited while we looked
    }
    // "pid (comm) state ppid ..." — comm may hold spaces and parentheses.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ppid = Number(rest[1]);
    if (!children.has(ppid)) children.set(ppid, []);
    children.get(ppid).push(Number(name));
  }
  const out = [];
  const queue = [pid];
  while (queue.length) {
    for (const c of children.get(queue.shift()) ?? []) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

function sample(pid) {
  return { fds: fdCount(pid), processes: descendants(pid).length, rss_mib: round(rssMiB(pid), 1) };
}

/** cgroup directories named sandbox-<id> for the given ids, anywhere under an agentbox parent. */
function leftoverCgroups(ids) {
  const wanted = new Set([...ids].map((id) => `sandbox-${id}`));
  const found = [];
  const walk = (dir, depth, underAgentbox) => {
    if (depth > 8) return;
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      const path = join(dir, e.name);
      if (underAgentbox && wanted.has(e.name)) found.push(path);
      else walk(path, depth + 1, underAgentbox || e.name === 'agentbox');
    }
  };
  walk('/sys/fs/cgroup', 0, false);
  return found;
}

// The server's spare (serve --spare prepared, the default): a launcher shell
// waiting to exec bwrap for the next new conversation, with its sandbox
// directory. It is expected while the server runs and must be gone once the
// server has exited.
// When the sandbox has its own filesystem (a root server's disk image,
// docs/design.md section 2), the staged mounts show a loop device: its
// backing file <state>/disks/<id>.img names the sandbox.
function imageOfStaging(p) {
  for (const line of readFileSync(`/proc/${p}/mountinfo`, 'utf8').split('\n')) {
    const f = line.split(' ');
    if (!f[4]?.startsWith('/run/agentbox-staging')) continue;
    try {
      const backing = readFileSync(`/sys/dev/block/${f[2]}/loop/backing_file`, 'utf8');
      const m = /\/disks\/([0-9a-f]+)\.img/.exec(backing);
      if (m) return m;
    } catch {
      // not a loop device
    }
  }
  return null;
}

function spareOf(pid) {
  for (const p of descendants(pid)) {
    let argv;
    try {
      argv = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    if (!argv.includes('agentbox-launcher')) continue;
    // A server that is not root names the sandbox's directories in bwrap's
    // arguments; a root server stages them (docs/sandbox.md, "State directory
    // anywhere"), so they show as the sources of the launcher's own mounts.
    const sandboxIn = (text) => /\/sandboxes\/([0-9a-f]+)\//.exec(text);
    let m = argv.map(sandboxIn).find(Boolean);
    if (!m) {
      try {
        m = sandboxIn(readFileSync(`/proc/${p}/mountinfo`, 'utf8')) ?? imageOfStaging(p);
      } catch {
        // gone meanwhile: no spare
      }
    }
    return { pid: p, id: m ? m[1] : null };
  }
  return null;
}

function alive(pid) {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

function sandboxDirs(stateDir) {
  const dir = join(stateDir, 'sandboxes');
  return existsSync(dir) ? readdirSync(dir) : [];
}

// ---- the client --------------------------------------------------------------

async function connect(bin, stateDir) {
  const { Client } = await sdk('client/index.js');
  const { StdioClientTransport } = await sdk('client/stdio.js');
  const transport = new StdioClientTransport({ command: bin, args: ['serve', '--state-dir', stateDir], stderr: 'pipe' });
  const stderr = { text: '', errors: 0 };
  transport.stderr?.on('data', (chunk) => {
    const s = chunk.toString('utf8');
    stderr.errors += (s.match(/\[(error|critical)\]/g) ?? []).length;
    stderr.text = (stderr.text + s).slice(-20_000);
  });
  // Count request ids on the wire in both directions: the SDK would hide a
  // duplicate reply (it drops responses it no longer waits for).
  const wire = { sent: new Map(), answered: new Map(), unknown: 0 };
  const client = new Client({ name: 'agentbox-soak', version: '0.0.0' }, { capabilities: {} });
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message.method === 'tools/call') wire.sent.set(message.id, (wire.sent.get(message.id) ?? 0) + 1);
    return send(message, options);
  };
  await client.connect(transport, { timeout: 10_000 });
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if ('id' in message && ('result' in message || 'error' in message)) {
      if (wire.sent.has(message.id)) wire.answered.set(message.id, (wire.answered.get(message.id) ?? 0) + 1);
      else if (message.id !== 0 && typeof message.id === 'number') wire.unknown++;
    }
    deliver?.(message, extra);
  };
  return { client, transport, pid: transport.pid, stderr, wire };
}

async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS });
  if (result.isError) throw new Error(`${name} failed: ${JSON.stringify(result.structuredContent ?? result.content)}`);
  return result.structuredContent;
}

/** Runs `total` jobs with at most `width` in flight; collects failures instead of stopping. */
async function pool(total, width, job, deadline) {
  let next = 0;
  const failures = [];
  const latencies = [];
  const worker = async () => {
    while (next < total && now() < deadline) {
      const i = next++;
      const t0 = now();
      try {
        await job(i);
        latencies.push(now() - t0);
      } catch (err) {
        failures.push({ i, error: err.message });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, total) }, worker));
  return { failures, latencies, started: next };
}

function quantile(values, p) {
  if (!values.length) return NaN;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((s.length - 1) * p))];
}
const round = (x, d = 2) => Math.round(x * 10 ** d) / 10 ** d;

// ---- the run -------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (!existsSync(opts.bin)) {
    console.error(`soak: agentbox binary not found at ${opts.bin}`);
    process.exit(2);
  }
  const deadline = now() + DEADLINE_MS;
  const stateDir = mkdtempSync(join(tmpdir(), 'agentbox-soak-'));
  const violations = [];
  const CONVERSATIONS = opts.conversations;
  const report = { binary: opts.bin, execs: opts.execs, conversations: CONVERSATIONS, in_flight: IN_FLIGHT, cycles: opts.cycles };
  const conv = (i) => `soak-${i % CONVERSATIONS}`;
  const server = await connect(opts.bin, stateDir);
  const { client, pid, wire } = server;
  const destroyedIds = new Set();
  let spare = null;

  try {
    // Warm-up: every soak conversation gets its sandbox; the thread pool and
    // allocator see real work before the baseline is taken.
    for (let i = 0; i < CONVERSATIONS; i++) await call(client, 'exec', { command: 'true', conversation: conv(i) });
    const warm = await pool(4 * IN_FLIGHT, IN_FLIGHT, (j) => call(client, 'exec', { command: `echo ${j}`, conversation: conv(j) }), deadline);
    report.warmup_failures = warm.failures.length;
    for (let i = 0; i < 3; i++) {
      await call(client, 'exec', { command: 'true', conversation: `warm-cycle-${i}` });
      const d = await call(client, 'sandbox_destroy', { conversation: `warm-cycle-${i}` });
      if (d.sandbox) destroyedIds.add(d.sandbox);
    }
    await sleep(500);
    report.baseline = sample(pid);

    // Load: 10,000 execs, 64 in flight, each checked.
    let t0 = now();
    const load = await pool(opts.execs, IN_FLIGHT, async (i) => {
      const r = await call(client, 'exec', { command: `echo ${i}`, conversation: conv(i) });
      if (r.exit_code !== 0 || r.stdout !== `${i}\n`) throw new Error(`exec ${i}: exit ${r.exit_code}, stdout ${JSON.stringify(r.stdout)}`);
    }, deadline);
    const loadSecs = (now() - t0) / 1000;
    report.load = {
      seconds: round(loadSecs, 1),
      calls_per_second: round(opts.execs / loadSecs, 0),
      latency_ms: { p50: round(quantile(load.latencies, 0.5)), p99: round(quantile(load.latencies, 0.99)), max: round(Math.max(...load.latencies)) },
      failures: load.failures.length,
      after: sample(pid),
    };
    if (load.started < opts.execs) violations.push(`load: deadline reached after ${load.started}/${opts.execs} calls`);
    for (const f of load.failures.slice(0, 5)) violations.push(`load call ${f.i}: ${f.error}`);
    if (load.failures.length > 5) violations.push(`load: ${load.failures.length - 5} more failed calls`);

    // Create/destroy cycles.
    t0 = now();
    const cycles = await pool(opts.cycles, opts.cycleWidth, async (i) => {
      const c = `cycle-${i}`;
      try {
        const r = await call(client, 'exec', { command: 'echo cycle', conversation: c });
        if (r.stdout !== 'cycle\n') throw new Error(`cycle ${i}: stdout ${JSON.stringify(r.stdout)}`);
      } finally {
        // Destroy even after a failed exec, so one failure is not also counted as a leak.
        const d = await call(client, 'sandbox_destroy', { conversation: c });
        if (!d.destroyed) throw new Error(`cycle ${i}: destroyed=false`);
        if (d.sandbox) destroyedIds.add(d.sandbox);
      }
    }, deadline);
    const cycleSecs = (now() - t0) / 1000;
    report.cycles_run = {
      seconds: round(cycleSecs, 1),
      ms_per_cycle: round(quantile(cycles.latencies, 0.5)),
      failures: cycles.failures.length,
    };
    if (cycles.started < opts.cycles) violations.push(`cycles: deadline reached after ${cycles.started}/${opts.cycles}`);
    for (const f of cycles.failures.slice(0, 5)) violations.push(`cycle ${f.i}: ${f.error}`);

    // Settle, then compare with the baseline (same 16 live sandboxes as then).
    const base = report.baseline;
    const near = (s) => s.fds <= base.fds + FD_SLACK && s.processes <= base.processes && s.rss_mib <= base.rss_mib + RSS_SLACK_MIB;
    let after = sample(pid);
    for (const settleEnd = now() + SETTLE_MS; !near(after) && now() < settleEnd; after = sample(pid)) await sleep(250);
    report.after = after;
    if (after.fds > base.fds + FD_SLACK) violations.push(`fds: ${after.fds} after vs ${base.fds} at baseline`);
    if (after.processes > base.processes) violations.push(`processes: ${after.processes} after vs ${base.processes} at baseline`);
    if (after.rss_mib > base.rss_mib + RSS_SLACK_MIB) violations.push(`RSS: ${after.rss_mib} MiB after vs ${base.rss_mib} MiB at baseline`);

    // Replies: every tools/call id answered exactly once.
    let lost = 0;
    let duplicated = 0;
    for (const [id, n] of wire.sent) {
      if (n !== 1) violations.push(`request id ${id} was sent ${n} times`);
      const a = wire.answered.get(id) ?? 0;
      if (a === 0) lost++;
      if (a > 1) duplicated++;
    }
    report.replies = { requests: wire.sent.size, answered: wire.answered.size, lost, duplicated, unknown_ids: wire.unknown };
    if (lost) violations.push(`${lost} replies lost`);
    if (duplicated) violations.push(`${duplicated} replies duplicated`);
    if (wire.unknown) violations.push(`${wire.unknown} replies to ids never sent`);

    // Tear down the soak conversations too: nothing of this server may remain.
    for (let i = 0; i < CONVERSATIONS; i++) {
      const d = await call(client, 'sandbox_destroy', { conversation: conv(i) });
      if (d.sandbox) destroyedIds.add(d.sandbox);
    }
    // Everything but the spare (checked after the server's exit, below).
    const left = () => {
      spare = spareOf(pid);
      return [
        sandboxDirs(stateDir).filter((d) => d !== spare?.id),
        leftoverCgroups(destroyedIds),
        descendants(pid).filter((p) => p !== spare?.pid),
      ];
    };
    let [leftDirs, leftGroups, leftProcs] = left();
    for (const end = now() + SETTLE_MS; (leftDirs.length || leftGroups.length || leftProcs.length) && now() < end; ) {
      await sleep(250);
      [leftDirs, leftGroups, leftProcs] = left();
    }
    report.teardown = {
      sandboxes_destroyed: destroyedIds.size,
      sandbox_dirs_left: leftDirs.length,
      cgroups_left: leftGroups.length,
      processes_left: leftProcs.length,
      fds: fdCount(pid),
      rss_mib: round(rssMiB(pid), 1),
    };
    if (leftDirs.length) violations.push(`sandbox directories left: ${leftDirs.slice(0, 5).join(', ')}`);
    if (leftGroups.length) violations.push(`cgroups left: ${leftGroups.slice(0, 5).join(', ')}`);
    if (leftProcs.length) violations.push(`processes left under the server: ${leftProcs.slice(0, 10).join(', ')}`);
    report.server_error_log_lines = server.stderr.errors;
  } catch (err) {
    violations.push(`aborted: ${err.message}`);
  } finally {
    await client.close().catch(() => {});
    // The server stops on EOF; its spare must go with it.
    for (const end = now() + SETTLE_MS; alive(pid) && now() < end; ) await sleep(100);
    if (spare) {
      const gone = () => !alive(spare.pid) && !(spare.id && existsSync(join(stateDir, 'sandboxes', spare.id))) &&
        !(spare.id && leftoverCgroups(new Set([spare.id])).length);
      for (const end = now() + SETTLE_MS; !gone() && now() < end; ) await sleep(100);
      report.spare = { ...spare, removed_at_exit: gone() };
      if (!gone()) violations.push(`the server's spare sandbox ${spare.id} (launcher pid ${spare.pid}) outlived the server`);
    }
    rmSync(stateDir, { recursive: true, force: true });
  }

  report.violations = violations;
  if (opts.json) console.log(JSON.stringify(report, null, 2));
  else printSummary(report);
  if (violations.length && server.stderr.text) console.error(`--- server stderr (tail) ---\n${server.stderr.text.slice(-3000)}`);
  process.exit(violations.length ? 1 : 0);
}

function printSummary(r) {
  const s = (x) => (x ? `fds ${x.fds}, processes ${x.processes}, RSS ${x.rss_mib} MiB` : 'n/a');
  console.log(`agentbox soak — ${r.binary}`);
  console.log(`baseline (after warm-up, ${r.conversations} live sandboxes): ${s(r.baseline)}`);
  if (r.load) {
    console.log(`load: ${r.execs} exec calls, ${r.conversations} conversations, ${r.in_flight} in flight: ${r.load.seconds} s, ` +
      `${r.load.calls_per_second} calls/s, latency p50 ${r.load.latency_ms.p50} ms p99 ${r.load.latency_ms.p99} ms max ${r.load.latency_ms.max} ms, ${r.load.failures} failed`);
    console.log(`      right after: ${s(r.load.after)}`);
  }
  if (r.cycles_run) console.log(`cycles: ${r.cycles} create/destroy: ${r.cycles_run.seconds} s, median ${r.cycles_run.ms_per_cycle} ms per cycle, ${r.cycles_run.failures} failed`);
  console.log(`after settle: ${s(r.after)}`);
  if (r.replies) console.log(`replies: ${r.replies.requests} tools/call sent, ${r.replies.answered} answered, ${r.replies.lost} lost, ${r.replies.duplicated} duplicated`);
  if (r.teardown) {
    const t = r.teardown;
    console.log(`teardown: ${t.sandboxes_destroyed} sandboxes destroyed; left: ${t.sandbox_dirs_left} sandbox dirs, ${t.cgroups_left} cgroups, ${t.processes_left} processes; server fds ${t.fds}, RSS ${t.rss_mib} MiB`);
    if (r.spare) console.log(`spare: ${r.spare.id} (launcher pid ${r.spare.pid}) ${r.spare.removed_at_exit ? 'removed when the server exited' : 'OUTLIVED THE SERVER'}`);
  }
  console.log(`server [error] log lines: ${r.server_error_log_lines ?? 'n/a'}`);
  if (r.violations.length) {
    console.log(`SOAK FAILED (${r.violations.length}):`);
    for (const v of r.violations) console.log(`  - ${v}`);
  } else console.log('soak passed: no violations');
}

main().catch((err) => {
  console.error(`soak: ${err.stack ?? err.message}`);
  process.exit(2);
});
