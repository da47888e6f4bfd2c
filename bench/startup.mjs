#!/usr/bin/env node
// Startup benchmark for `agentbox serve`, reported against a baseline measured
// in the same run (process creation is slow and noisy on some machines, so the
// ratio is the figure to compare across machines).
//
//   (a) start → initialized: spawn the server, write `initialize`, wait for the
//       response line. Raw child_process + JSON lines, no MCP SDK.
//   (b) baseline: spawn /bin/true and wait for it to exit.
//   (c) idle RSS: VmRSS of the server after initialize + tools/list.
//
// Usage: node bench/startup.mjs [--n 20] [--json] [--bin PATH] [--warmup 2]
//        (the binary defaults to $AGENTBOX_BIN, else build/agentbox next to bench/)
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const STEP_TIMEOUT_MS = 5000;

function parseArgs(argv) {
  const opts = {
    n: 20,
    warmup: 2,
    json: false,
    bin: process.env.AGENTBOX_BIN ? resolve(process.env.AGENTBOX_BIN) : resolve(HERE, '../build/agentbox'),
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--json') opts.json = true;
    else if (arg === '--n' || arg === '-n') opts.n = Number(value());
    else if (arg === '--warmup') opts.warmup = Number(value());
    else if (arg === '--bin') opts.bin = resolve(value());
    else if (arg === '--help' || arg === '-h') {
      console.log('usage: node bench/startup.mjs [--n 20] [--warmup 2] [--json] [--bin PATH]');
      process.exit(0);
    } else throw new Error(`unknown argument ${arg}`);
  }
  if (!Number.isInteger(opts.n) || opts.n < 1) throw new Error('--n must be a positive integer');
  if (!Number.isInteger(opts.warmup) || opts.warmup < 0) throw new Error('--warmup must be >= 0');
  return opts;
}

const now = () => Number(process.hrtime.bigint()) / 1e6; // ms

/** Reads newline-delimited JSON from a stream; waitFor(pred) resolves with the first match. */
class LineReader {
  constructor(stream) {
    this.buffer = '';
    this.waiters = [];
    this.seen = [];
    stream.setEncoding('utf8');
    stream.on('data', (chunk) => {
      this.buffer += chunk;
      let nl;
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        const line = this.buffer.slice(0, nl);
        this.buffer = this.buffer.slice(nl + 1);
        if (!line.trim()) continue;
        let message;
        try {
          message = JSON.parse(line);
        } catch {
          this.fail(new Error(`server wrote a non-JSON line to stdout: ${line.slice(0, 200)}`));
          continue;
        }
        const at = now();
        this.seen.push(message);
        for (const w of [...this.waiters]) {
          if (w.pred(message)) {
            this.waiters.splice(this.waiters.indexOf(w), 1);
            w.resolve({ message, at });
          }
        }
      }
    });
    stream.on('end', () => this.fail(new Error('server closed stdout')));
  }

  fail(err) {
    for (const w of this.waiters.splice(0)) w.reject(err);
  }

  waitFor(pred, what) {
    return new Promise((resolveWait, rejectWait) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w.resolve !== done);
        rejectWait(new Error(`timed out after ${STEP_TIMEOUT_MS} ms waiting for ${what}`));
      }, STEP_TIMEOUT_MS);
      const done = (v) => {
        clearTimeout(timer);
        resolveWait(v);
      };
      this.waiters.push({
        pred,
        resolve: done,
        reject: (e) => {
          clearTimeout(timer);
          rejectWait(e);
        },
      });
    });
  }
}

function exitOf(child) {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
}

function vmRssMiB(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!match) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(match[1]) / 1024;
}

const line = (obj) => `${JSON.stringify(obj)}\n`;

/** One server run: start→initialize response, then tools/list, RSS, shutdown. */
async function measureServer(bin) {
  const stateDir = mkdtempSync(join(tmpdir(), 'agentbox-bench-'));
  let child;
  try {
    const start = now();
    child = spawn(bin, ['serve', '--state-dir', stateDir], { stdio: ['pipe', 'pipe', 'ignore'] });
    const reader = new LineReader(child.stdout);
    const spawnError = new Promise((_, reject) => child.once('error', reject));
    const initReply = reader.waitFor((m) => m.id === 1, 'the initialize response');
    child.stdin.write(
      line({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: {
          protocolVersion: '2025-11-25',
          capabilities: {},
          clientInfo: { name: 'agentbox-startup-bench', version: '1' },
        },
      }),
    );
    const { message: init, at: initAt } = await Promise.race([initReply, spawnError]);
    if (!init.result) throw new Error(`initialize failed: ${JSON.stringify(init)}`);
    const startupMs = initAt - start;

    const listReply = reader.waitFor((m) => m.id === 2, 'the tools/list response');
    child.stdin.write(line({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    child.stdin.write(line({ jsonrpc: '2.0', id: 2, method: 'tools/list' }));
    const { message: list } = await listReply;
    if (!Array.isArray(list.result?.tools)) throw new Error(`tools/list failed: ${JSON.stringify(list)}`);
    // Let anything the server does right after answering settle before reading RSS.
    await new Promise((r) => setTimeout(r, 50));
    const rssMiB = vmRssMiB(child.pid);

    const closeStart = now();
    const exited = exitOf(child);
    child.stdin.end();
    const exit = await Promise.race([
      exited,
      new Promise((r) => setTimeout(() => r(undefined), STEP_TIMEOUT_MS)),
    ]);
    const shutdownMs = now() - closeStart;
    return { startupMs, rssMiB, shutdownMs, exit: exit ?? { code: null, signal: 'did not exit' }, tools: list.result.tools.length };
  } finally {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    rmSync(stateDir, { recursive: true, force: true });
  }
}

async function measureTrue() {
  const start = now();
  const child = spawn('/bin/true', [], { stdio: 'ignore' });
  const exit = await exitOf(child);
  if (exit.code !== 0) throw new Error(`/bin/true exited ${JSON.stringify(exit)}`);
  return now() - start;
}

function stats(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const q = (p) => {
    const idx = (sorted.length - 1) * p;
    const lo = Math.floor(idx);
    const hi = Math.ceil(idx);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - lo);
  };
  return { median: q(0.5), p10: q(0.1), p90: q(0.9), min: sorted[0], max: sorted[sorted.length - 1] };
}

const round = (x, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (!existsSync(opts.bin)) throw new Error(`agentbox binary not found at ${opts.bin} (build it or pass --bin)`);

  // Warm-up runs (page cache, dynamic loader) are discarded.
  for (let i = 0; i < opts.warmup; i++) {
    await measureTrue();
    await measureServer(opts.bin);
  }

  const server = [];
  const baseline = [];
  // Interleave so drift in machine load hits both series alike.
  for (let i = 0; i < opts.n; i++) {
    baseline.push(await measureTrue());
    server.push(await measureServer(opts.bin));
  }

  const startup = stats(server.map((s) => s.startupMs));
  const base = stats(baseline);
  const rss = stats(server.map((s) => s.rssMiB));
  const shutdown = stats(server.map((s) => s.shutdownMs));
  const badExits = server.filter((s) => s.exit.code !== 0 || s.exit.signal !== null).map((s) => s.exit);

  const report = {
    binary: opts.bin,
    repetitions: opts.n,
    warmup: opts.warmup,
    node: process.version,
    startup_to_initialized_ms: mapRound(startup),
    baseline_spawn_true_ms: mapRound(base),
    startup_over_baseline_ratio: round(startup.median / base.median),
    idle_rss_mib: mapRound(rss),
    shutdown_after_stdin_eof_ms: mapRound(shutdown),
    unclean_exits: badExits.length,
    unclean_exit_details: badExits,
  };

  if (opts.json) {
    console.log(JSON.stringify(report, null, 2));
  } else {
    const row = (name, s, unit) =>
      `${name.padEnd(34)} ${fmt(s.median)} ${fmt(s.p10)} ${fmt(s.p90)} ${fmt(s.min)} ${fmt(s.max)}  ${unit}`;
    const fmt = (x) => x.toFixed(2).padStart(8);
    console.log(`agentbox startup benchmark — ${opts.n} runs (+${opts.warmup} warm-up), ${opts.bin}`);
    console.log(`${''.padEnd(34)} ${'median'.padStart(8)} ${'p10'.padStart(8)} ${'p90'.padStart(8)} ${'min'.padStart(8)} ${'max'.padStart(8)}`);
    console.log(row('(a) spawn → initialize response', startup, 'ms'));
    console.log(row('(b) baseline: spawn /bin/true', base, 'ms'));
    console.log(row('(c) idle RSS after tools/list', rss, 'MiB'));
    console.log(row('    stdin EOF → exit', shutdown, 'ms'));
    console.log(`ratio (a)/(b) of medians: ${report.startup_over_baseline_ratio.toFixed(2)}`);
    if (badExits.length) {
      console.log(`WARNING: ${badExits.length}/${opts.n} server runs did not exit cleanly on stdin EOF: ${JSON.stringify(badExits)}`);
    }
  }
}

function mapRound(s) {
  return Object.fromEntries(Object.entries(s).map(([k, v]) => [k, round(v, 3)]));
}

main().catch((err) => {
  console.error(`startup bench failed: ${err.message}`);
  process.exit(1);
});
