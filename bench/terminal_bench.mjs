#!/usr/bin/env node
// Terminal keystroke -> screen update round trip through MCP, against a
// direct pseudo-terminal round trip on the host, interleaved in one run so
// load drift hits every series alike. Each iteration types a fresh marker
// (`k<i>x`, nothing else, no Enter) into `cat` on a pseudo-terminal with
// default termios; the line discipline's echo brings it back (cat itself
// sees the line only at Enter, in both the sandbox and the baseline).
//   1. agentbox, waited: terminal_write {data, wait_ms: 2000, pattern} through
//      the official SDK client, one call; it must come back matched with the
//      marker on its screen. The agent returns only once output has been
//      quiet for kSettle (50 ms, agent/terminals.cpp) after the match, so
//      this figure includes that settle by design.
//   2. agentbox, raw: terminal_write without a wait, then terminal_read
//      {cursor, wait_ms: 0} polled back to back until the marker is in the
//      output after the cursor: the round trip without the settle (plus at
//      most one poll call).
//   3. baseline: a python3 helper (pty.fork running cat) asked over a pipe
//      to write the marker to the master and read it back; timed in Node
//      (pipe hop both ways + the pty round trip), and by the helper's own
//      clock (write to the master -> echo read back, the pty alone).
//   4. (reference) one terminal_read {cursor: end, wait_ms: 0}: what any
//      terminal call costs (SDK, server, agent hop) with nothing to wait for.
// Every 10 iterations Enter is sent to both (untimed) so the line stays short.
// Usage: node bench/terminal_bench.mjs [--bin build/agentbox] [--iterations 200]
//        [--json] [--quick]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';

import { BIN, Client, JSON_OUT, StdioClientTransport, median, option, percentile } from './common.mjs';

const QUICK = process.argv.includes('--quick');
const N = Number(option('iterations', QUICK ? 40 : 200));
const RESET_EVERY = 10;  // two short markers per iteration: a line stays well under 200 columns

const now = () => performance.now();
const round = (x, d = 3) => Math.round(x * 10 ** d) / 10 ** d;
const stats = (v) => ({ p50_ms: round(median(v)), p90_ms: round(percentile(v, 90)), min_ms: round(Math.min(...v)) });

// The baseline helper: one line in ("w MARKER" or "r" for Enter), one line
// out (the helper's own nanoseconds for the pty round trip).
const HELPER = String.raw`
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp('cat', ['cat'])
def drain(quiet):
    while select.select([fd], [], [], quiet)[0]:
        os.read(fd, 65536)
for line in iter(sys.stdin.buffer.readline, b''):
    req = line.rstrip(b'\n')
    if req.startswith(b'w '):
        m, buf = req[2:], b''
        t = time.perf_counter_ns()
        os.write(fd, m)
        while m not in buf:
            buf += os.read(fd, 65536)
        dt = time.perf_counter_ns() - t
    else:
        os.write(fd, b'\r')
        drain(0.05)
        dt = 0
    sys.stdout.write('%d\n' % dt)
    sys.stdout.flush()
`;

function startHelper() {
  const child = spawn('python3', ['-c', HELPER], { stdio: ['pipe', 'pipe', 'inherit'] });
  let buffer = '';
  const waiting = [];
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    buffer += chunk;
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      waiting.shift()?.resolve(Number(line));
    }
  });
  child.on('exit', (code) => {
    for (const w of waiting.splice(0)) w.reject(new Error(`pty helper exited (${code})`));
  });
  const ask = (line) => new Promise((resolve, reject) => {
    waiting.push({ resolve, reject });
    child.stdin.write(line + '\n');
  });
  return { child, ask };
}

async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) throw new Error(`${name} failed: ${JSON.stringify(result).slice(0, 500)}`);
  return result.structuredContent;
}

async function main() {
  const state = mkdtempSync(join(tmpdir(), 'agentbox-terminal-bench-'));
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['serve', '--state-dir', state, '--log-level', 'warn'],
    stderr: 'ignore',
  });
  const client = new Client({ name: 'agentbox-terminal-bench', version: '1.0.0' });
  const helper = startHelper();
  try {
    await client.connect(transport);
    await client.listTools();
    const { terminal_id } = await call(client, 'terminal_start', { command: 'cat', cols: 200, rows: 24 });
    if (!terminal_id) throw new Error('terminal_start gave no terminal_id');
    await call(client, 'terminal_read', { terminal_id, wait_ms: 5000 });  // cat prints nothing: the full wait

    // Waited: one terminal_write that returns once the marker is seen and the output has settled.
    const waited = async (marker) => {
      const r = await call(client, 'terminal_write', { terminal_id, data: marker, wait_ms: 2000, pattern: marker });
      if (r.matched !== true || !String(r.screen).includes(marker))
        throw new Error(`marker ${marker} not echoed: ${JSON.stringify(r).slice(0, 500)}`);
    };
    // Raw: a write without a wait, then reads without a wait from its cursor until the echo is there.
    let polls = 0, end = 0;
    const raw = async (marker) => {
      let r = await call(client, 'terminal_write', { terminal_id, data: marker });
      let seen = r.output, cursor = r.next_cursor;
      const give_up = now() + 2000;
      while (!seen.includes(marker)) {
        if (now() > give_up) throw new Error(`marker ${marker} not echoed within 2 s: ${JSON.stringify(r).slice(0, 500)}`);
        r = await call(client, 'terminal_read', { terminal_id, cursor, wait_ms: 0 });
        polls++;
        seen += r.output;
        cursor = r.next_cursor;
      }
      end = r.output_bytes;
    };
    const reset = async () => {
      await call(client, 'terminal_write', { terminal_id, data: '\r' });
      await call(client, 'terminal_read', { terminal_id, wait_ms: 200 });
      await helper.ask('r');
    };

    // Warm-up, untimed: both paths echo, the sandbox and the SDK are warm.
    for (let i = 0; i < 5; i++) {
      await helper.ask(`w w${i}x`);
      await waited(`w${i}x`);
      await raw(`w${i}y`);
    }
    await reset();
    polls = 0;

    const series = { agentbox_waited: [], agentbox_raw: [], agentbox_call: [], baseline: [], baseline_pty: [] };
    for (let i = 0; i < N; i++) {
      if (i > 0 && i % RESET_EVERY === 0) await reset();
      let t = now();
      const ns = await helper.ask(`w k${i}x`);
      series.baseline.push(now() - t);
      series.baseline_pty.push(ns / 1e6);
      t = now();
      await waited(`k${i}x`);
      series.agentbox_waited.push(now() - t);
      t = now();
      await raw(`k${i}y`);
      series.agentbox_raw.push(now() - t);
      t = now();
      await call(client, 'terminal_read', { terminal_id, cursor: end, wait_ms: 0 });
      series.agentbox_call.push(now() - t);
    }
    await call(client, 'terminal_kill', { terminal_id });

    const base = median(series.baseline);
    const s = Object.fromEntries(Object.entries(series).map(([k, v]) => [k, stats(v)]));
    const report = {
      load_average_1m: round(loadavg()[0], 2),
      iterations: N,
      ...s,
      agentbox_raw_polls_per_iteration: round(polls / N, 2),
      ratio_waited_vs_baseline: round(s.agentbox_waited.p50_ms / base, 2),
      ratio_raw_vs_baseline: round(s.agentbox_raw.p50_ms / base, 2),
      agent_settle_ms: 50,
      rows: [
        { name: 'terminal keystroke -> screen (terminal_write wait+pattern) vs host pty', agentbox: s.agentbox_waited.p50_ms,
          baseline: round(base), unit: 'ms', ratio: round(s.agentbox_waited.p50_ms / base, 2) },
        { name: 'terminal keystroke -> echo (write, then read polled) vs host pty', agentbox: s.agentbox_raw.p50_ms,
          baseline: round(base), unit: 'ms', ratio: round(s.agentbox_raw.p50_ms / base, 2) },
      ],
    };
    if (JSON_OUT) {
      console.log(JSON.stringify(report, null, 2));
    } else {
      console.log(`load average ${report.load_average_1m}, ${N} iterations, interleaved`);
      const label = {
        agentbox_waited: 'agentbox terminal_write wait+pattern',
        agentbox_raw: 'agentbox write + terminal_read polls',
        agentbox_call: 'agentbox one terminal_read, no wait',
        baseline: 'host pty via helper (Node-timed)',
        baseline_pty: 'host pty alone (helper-timed)',
      };
      console.log(`${'series'.padEnd(40)}${'p50 ms'.padStart(10)}${'p90 ms'.padStart(10)}${'min ms'.padStart(10)}` +
        `${'p50/base'.padStart(10)}`);
      for (const [k, v] of Object.entries(s))
        console.log(`${label[k].padEnd(40)}${v.p50_ms.toFixed(3).padStart(10)}${v.p90_ms.toFixed(3).padStart(10)}` +
          `${v.min_ms.toFixed(3).padStart(10)}${(v.p50_ms / base).toFixed(2).padStart(10)}`);
      console.log(`(base = host pty via helper, Node-timed; raw series: ${report.agentbox_raw_polls_per_iteration} ` +
        `terminal_read polls per iteration; the waited series includes the agent's ${report.agent_settle_ms} ms settle)`);
    }
  } finally {
    helper.child.stdin.end();
    helper.child.kill();
    await client.close();
    rmSync(state, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
