#!/usr/bin/env node
// code_run round trip against exec, interleaved in one run so load drift
// hits both series alike (docs/benchmarks.md, "Code contexts"):
//   1. code_run {code: "1+1"} in the default python context (its
//      interpreter started by an untimed warm-up call): the SDK client,
//      server, agent, the driver's ast parse and eval, and back.
//   2. exec {command: "python3 -c 'print(1+1)'"}: the same answer from a
//      fresh interpreter each time, what a model does without contexts.
// Reported: median, p90 and min of each, and the ratio of the medians.
// Usage: node bench/code_bench.mjs [--bin build/agentbox] [--iterations 30] [--json]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { BIN, Client, JSON_OUT, StdioClientTransport, median, option, percentile, round } from './common.mjs';

const N = Number(option('iterations', 30));

const stats = (v) => ({ p50_ms: round(median(v)), p90_ms: round(percentile(v, 90)), min_ms: round(Math.min(...v)) });

const state = mkdtempSync(join(tmpdir(), 'agentbox-code-bench-'));
const transport = new StdioClientTransport({ command: BIN, args: ['serve', '--state-dir', state], stderr: 'ignore' });
const client = new Client({ name: 'code-bench', version: '0' });
try {
  await client.connect(transport);
  await client.listTools();
  const call = async (name, args) => {
    const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 60_000 });
    if (r.isError) throw new Error(`${name}: ${r.content[0].text}`);
    return r.structuredContent;
  };
  await call('exec', { command: 'true' });
  await call('code_run', { code: '0' });
  const code = [], exec = [];
  for (let i = 0; i < N; ++i) {
    let t = performance.now();
    const r = await call('code_run', { code: '1+1' });
    code.push(performance.now() - t);
    if (r.result !== '2') throw new Error(`code_run gave ${JSON.stringify(r.result)}`);
    t = performance.now();
    const e = await call('exec', { command: "python3 -c 'print(1+1)'" });
    exec.push(performance.now() - t);
    if (e.stdout !== '2\n') throw new Error(`exec gave ${JSON.stringify(e.stdout)}`);
  }
  const out = { iterations: N, code_run: stats(code), exec_python: stats(exec), ratio_p50: round(median(exec) / median(code)) };
  if (JSON_OUT) console.log(JSON.stringify(out));
  else {
    console.log(`code_run 1+1            p50 ${out.code_run.p50_ms} ms  p90 ${out.code_run.p90_ms}  min ${out.code_run.min_ms}`);
    console.log(`exec python3 -c ...     p50 ${out.exec_python.p50_ms} ms  p90 ${out.exec_python.p90_ms}  min ${out.exec_python.min_ms}`);
    console.log(`exec / code_run (p50)   ${out.ratio_p50}x over ${N} interleaved runs`);
  }
} finally {
  await client.close().catch(() => {});
  rmSync(state, { recursive: true, force: true });
}
