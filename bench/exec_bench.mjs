#!/usr/bin/env node
// MCP-level sandbox benchmark (issue 6): everything goes through the real
// server over stdio with the official SDK client, and every figure is a ratio
// against a baseline measured in the same run, interleaved with it:
//   1. exec of /bin/true in a warm session vs spawning /bin/true from Node
//      (spawnSync, and execFile for an asynchronous spawn);
//   2. first call of a new conversation (sandbox cold start + exec) vs a bare
//      bwrap with the same plan running /bin/true, with a server for
//      each --spare setting (none, prepared = default, warm);
//   3. RSS and PSS (/proc/PID/smaps_rollup) of the server and of one idle
//      sandbox (every process under its bwrap), with its session shell alive
//      and, on a server started with --shell-idle-timeout 300ms, after the
//      shell idled out; and what the next exec pays for a fresh shell.
// Usage: node bench/exec_bench.mjs [--bin build/agentbox] [--iterations 200]
//        [--cold 20] [--json] [--bench-plan BIN_DIR/agentbox-bench-plan]
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';

import { BIN, Client, JSON_OUT, StdioClientTransport, median, option, round } from './common.mjs';

// The baseline's bwrap argv comes from a bench program built next to agentbox.
const BENCH_PLAN = resolve(option('bench-plan', join(dirname(BIN), 'agentbox-bench-plan')));
const N = Number(option('iterations', 200));
const COLD = Number(option('cold', 20));

const now = () => performance.now();

// The kB figures of /proc/PID/smaps_rollup (Rss, Pss...).
function memory(pid) {
  const out = {};
  for (const line of readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8').split('\n')) {
    const m = /^(\w+):\s+(\d+) kB/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return { rss_kib: out.Rss ?? 0, pss_kib: out.Pss ?? 0 };
}

function children(pid) {
  const out = [];
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    const text = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
    if (text) out.push(...text.split(/\s+/).map(Number));
  }
  return out;
}

function tree(pid) {
  const all = [pid];
  for (let i = 0; i < all.length; i++) all.push(...children(all[i]));
  return all;
}

const comm = (pid) => readFileSync(`/proc/${pid}/comm`, 'utf8').trim();

async function callExec(client, args) {
  const result = await client.callTool({ name: 'exec', arguments: { command: '/bin/true', ...args } });
  if (result.isError || result.structuredContent?.exit_code !== 0)
    throw new Error(`exec failed: ${JSON.stringify(result).slice(0, 500)}`);
  return result;
}

// The baseline: bwrap with the very plan a sandbox gets (namespaces, binds,
// generated /etc; as root, run as the sandbox uid as sandboxes are), running
// /bin/true instead of the agent (`agentbox-bench-plan`, bench/bare_plan.h).
function barePlan(dir) {
  const argv = JSON.parse(execFileSync(BENCH_PLAN, [dir], { encoding: 'utf8' }));
  const asSandboxUser = process.getuid() === 0 ? { uid: 65534, gid: 65534 } : {};
  return () => spawnSync(argv[0], argv.slice(1), asSandboxUser);
}

// One server started with --spare SPARE; COLD first calls of new
// conversations, each right after a bare bwrap run. New conversations do not
// arrive back to back: the server replaces its spare 50 ms after the last
// start, so iterations are 150 ms apart (the same for every setting).
async function coldRun(spare) {
  const state = mkdtempSync(join(tmpdir(), 'agentbox-exec-bench-cold-'));
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['serve', '--state-dir', state, '--log-level', 'warn', '--spare', spare],
    stderr: 'ignore',
  });
  const client = new Client({ name: 'agentbox-exec-bench', version: '1.0.0' });
  await client.connect(transport);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const cold = [], bare = [];
  let ready = 0;
  chmodSync(state, 0o711);  // as root the baseline runs as the sandbox uid, which must reach its dirs
  const runBare = barePlan(join(state, 'bare'));
  try {
    await sleep(300);  // a server that has been up a moment
    for (let i = 0; i < COLD; i++) {
      await sleep(150);
      let t = now();
      const b = runBare();
      bare.push(now() - t);
      if (b.status !== 0) throw new Error(`bare bwrap failed: ${b.stderr}`);
      ready += spareReady(transport.pid);
      t = now();
      await callExec(client, { conversation: `cold-${i}` });
      cold.push(now() - t);
      await client.callTool({ name: 'sandbox_destroy', arguments: { conversation: `cold-${i}` } });
    }
  } finally {
    await client.close();
    rmSync(state, { recursive: true, force: true });
  }
  return {
    cold_ms: round(median(cold)), bare_ms: round(median(bare)), ratio: round(median(cold) / median(bare)),
    iterations: COLD, spare_ready: ready,
  };
}

// A server whose idle shells exit after 300 ms: the idle sandbox without its
// shell, and the exec that follows (a fresh shell from the saved state)
// against a warm one, interleaved.
async function idleShellRun() {
  const state = mkdtempSync(join(tmpdir(), 'agentbox-exec-bench-idle-'));
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['serve', '--state-dir', state, '--log-level', 'warn', '--shell-idle-timeout', '300ms'],
    stderr: 'ignore',
  });
  const client = new Client({ name: 'agentbox-exec-bench', version: '1.0.0' });
  await client.connect(transport);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  try {
    await callExec(client, { conversation: 'idle' });
    await sleep(1000);
    const roots = children(transport.pid).filter((p) => comm(p) === 'bwrap');
    if (roots.length !== 1) throw new Error(`expected one sandbox, found ${roots.length}`);
    const processes = tree(roots[0]).map((pid) => ({ pid, comm: comm(pid), ...memory(pid) }));
    const sum = (k) => processes.reduce((a, p) => a + p[k], 0);
    const restart = [], warm = [];
    for (let i = 0; i < 10; i++) {
      await sleep(700);
      let t = now();
      await callExec(client, { conversation: 'idle' });
      restart.push(now() - t);
      t = now();
      await callExec(client, { conversation: 'idle' });
      warm.push(now() - t);
    }
    return {
      rss_mib: round(sum('rss_kib') / 1024, 1), pss_mib: round(sum('pss_kib') / 1024, 1),
      processes: processes.map((p) => ({ comm: p.comm, rss_kib: p.rss_kib, pss_kib: p.pss_kib })),
      exec_after_idle_ms: round(median(restart)), exec_warm_ms: round(median(warm)),
    };
  } finally {
    await client.close();
    rmSync(state, { recursive: true, force: true });
  }
}

// Whether the server has a spare ready: a launcher (sh waiting to exec bwrap)
// or a spare bwrap among its children.
function spareReady(pid) {
  try {
    return children(pid).some((p) => {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
      return cmd.includes('agentbox-launcher') || comm(p) === 'bwrap';
    }) ? 1 : 0;
  } catch {
    return 0;
  }
}

async function main() {
  const state = mkdtempSync(join(tmpdir(), 'agentbox-exec-bench-'));
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['serve', '--state-dir', state, '--log-level', 'warn'],
    stderr: 'ignore',
  });
  const client = new Client({ name: 'agentbox-exec-bench', version: '1.0.0' });
  await client.connect(transport);
  const serverPid = transport.pid;
  const execFileAsync = promisify(execFile);
  try {
    // 1. Warm exec vs direct spawn, interleaved so drift hits both alike.
    await callExec(client, { conversation: 'warm' });
    const warm = [], spawn = [], spawnAsync = [];
    for (let i = 0; i < N; i++) {
      let t = now();
      spawnSync('/bin/true');
      spawn.push(now() - t);
      t = now();
      await execFileAsync('/bin/true');
      spawnAsync.push(now() - t);
      t = now();
      await callExec(client, { conversation: 'warm' });
      warm.push(now() - t);
    }

    // 2. Cold start vs bare bwrap, for each --spare setting (a server each):
    // "none" builds the whole sandbox on the call's path; "prepared" (the
    // default, also what this main server runs) has the directories, cgroup
    // and a launcher in the cgroup ready; "warm" (an extra, off by default)
    // claims a running spare sandbox.
    const coldBySpare = {};
    for (const spare of ['none', 'prepared', 'warm']) coldBySpare[spare] = await coldRun(spare);

    // 3. Memory: the server alone, and the idle "warm" sandbox (its default
    // shell included, as after any first call).
    await new Promise((r) => setTimeout(r, 300));
    const sandboxRoots = children(serverPid).filter((p) => comm(p) === 'bwrap');
    if (sandboxRoots.length !== 1) throw new Error(`expected one sandbox, found ${sandboxRoots.length}`);
    const processes = tree(sandboxRoots[0]).map((pid) => ({ pid, comm: comm(pid), ...memory(pid) }));
    const sum = (k) => processes.reduce((a, p) => a + p[k], 0);
    const server = memory(serverPid);
    const idled = await idleShellRun();

    const report = {
      load_average_1m: round(loadavg()[0]),
      iterations: N,
      warm_exec_ms: round(median(warm)),
      direct_spawn_sync_ms: round(median(spawn)),
      direct_exec_file_ms: round(median(spawnAsync)),
      warm_ratio_vs_spawn_sync: round(median(warm) / median(spawn)),
      warm_ratio_vs_exec_file: round(median(warm) / median(spawnAsync)),
      cold_iterations: COLD,
      // The default (--spare prepared); the other settings below.
      cold_first_call_ms: coldBySpare.prepared.cold_ms,
      bare_bwrap_ms: coldBySpare.prepared.bare_ms,
      cold_ratio: coldBySpare.prepared.ratio,
      cold_by_spare: coldBySpare,
      server_rss_mib: round(server.rss_kib / 1024, 1),
      server_pss_mib: round(server.pss_kib / 1024, 1),
      sandbox_rss_mib: round(sum('rss_kib') / 1024, 1),
      sandbox_pss_mib: round(sum('pss_kib') / 1024, 1),
      sandbox_processes: processes.map((p) => ({ comm: p.comm, rss_kib: p.rss_kib, pss_kib: p.pss_kib })),
      sandbox_idle_shell_rss_mib: idled.rss_mib,
      sandbox_idle_shell_pss_mib: idled.pss_mib,
      sandbox_idle_shell_processes: idled.processes,
      exec_after_idle_shell_ms: idled.exec_after_idle_ms,
      exec_warm_same_server_ms: idled.exec_warm_ms,
      targets: { warm_ratio: 1.5, cold_ratio: 1.5, server_rss_mib: 10, sandbox_mib: 5 },
    };
    if (JSON_OUT) {
      console.log(JSON.stringify(report, null, 2));
    } else {
      const r = report;
      console.log(`load average ${r.load_average_1m}`);
      console.log(`exec /bin/true, warm session: median ${r.warm_exec_ms} ms; spawnSync ${r.direct_spawn_sync_ms} ms ` +
        `(ratio ${r.warm_ratio_vs_spawn_sync}); execFile ${r.direct_exec_file_ms} ms (ratio ${r.warm_ratio_vs_exec_file}); target <= 1.5`);
      for (const [spare, c] of Object.entries(r.cold_by_spare))
        console.log(`first call of a new conversation [--spare ${spare}${spare === 'prepared' ? ', default' : ''}]: ` +
          `median ${c.cold_ms} ms; bare bwrap: ${c.bare_ms} ms; ratio ${c.ratio} (target <= 1.5; spare ready ${c.spare_ready}/${c.iterations})`);
      console.log(`server: RSS ${r.server_rss_mib} MiB, PSS ${r.server_pss_mib} MiB (target < 10)`);
      const parts = (list) => list.map((p) => `${p.comm} ${round(p.rss_kib / 1024, 1)}/${round(p.pss_kib / 1024, 1)}`).join(', ');
      console.log(`idle sandbox, session shell alive: RSS ${r.sandbox_rss_mib} MiB, PSS ${r.sandbox_pss_mib} MiB ` +
        `(target RSS < 5): ${parts(r.sandbox_processes)}`);
      console.log(`idle sandbox, shell idled out: RSS ${r.sandbox_idle_shell_rss_mib} MiB, PSS ` +
        `${r.sandbox_idle_shell_pss_mib} MiB (target RSS < 5): ${parts(r.sandbox_idle_shell_processes)}`);
      console.log(`exec after the shell idled out: median ${r.exec_after_idle_shell_ms} ms; warm: ${r.exec_warm_same_server_ms} ms`);
    }
  } finally {
    await client.close();
    rmSync(state, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
