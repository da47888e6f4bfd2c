#!/usr/bin/env node
// The relay of exposed ports (docs/design.md section 12), through the real
// server and a real box, as ratios against the same requests made directly
// on the host's loopback in the same run, interleaved:
//   1. throughput: a 100 MB body (curl to /dev/null) from an origin in the
//      box through its port_expose URL vs the same origin program run on
//      the host, fetched directly;
//   2. first-byte latency: the p50 of 50 small GETs (curl's
//      time_starttransfer, each a new connection) through the URL vs direct;
//      the difference is what the relay adds.
// The origin is the same small Node server in both places, each in a box
// (the same CPU cap and seccomp filter): "direct" is a box of a second
// server run with --network host, whose origin curl on the host reaches
// straight; so the relay is the difference. (Node is the host's, which a
// box sees read-only.)
// Usage: node bench/port_bench.mjs [--bin build/agentbox] [--mb 100] [--rounds 3] [--json]
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { BIN, Client, JSON_OUT, StdioClientTransport, median, option, round } from './common.mjs';

const MB = Number(option('mb', 100));
const ROUNDS = Number(option('rounds', 3));
const run = promisify(execFile);

const ORIGIN = `
const http = require('node:http');
const chunk = Buffer.alloc(1 << 20, 'x');
const mb = Number(process.argv[3]);
http.createServer((req, res) => {
  if (req.url === '/big') {
    res.writeHead(200, { 'Content-Length': mb * chunk.length });
    let left = mb;
    const pump = () => { while (left > 0) { left--; if (!res.write(chunk)) return res.once('drain', pump); } res.end(); };
    return pump();
  }
  res.writeHead(200, { 'Content-Length': 2 }); res.end('ok');
}).listen(Number(process.argv[2]), '127.0.0.1');
`;

const work = mkdtempSync(join(tmpdir(), 'agentbox-portbench-'));
async function serve(name, extra) {
  const transport = new StdioClientTransport({
    command: BIN, args: ['serve', '--state-dir', join(work, name), ...extra], stderr: process.env.BENCH_STDERR ? 'inherit' : 'ignore',
  });
  const client = new Client({ name: 'port-bench', version: '0' }, { capabilities: {} });
  await client.connect(transport);
  const call = async (tool, args) => {
    const r = await client.callTool({ name: tool, arguments: args }, undefined, { timeout: 120_000 });
    if (r.isError) throw new Error(`${tool}: ${r.content[0].text}`);
    return r.structuredContent;
  };
  return { client, call };
}

async function origin(call, port) {
  await call('file_write', { path: 'origin.js', content: ORIGIN });
  const started = await call('process_start', { command: `exec node /workspace/origin.js ${port} ${MB}` });
  const ready = await call('process_wait', { process_id: started.process_id, port, timeout_ms: 20_000 });
  if (!ready.port_ready) throw new Error(`the origin in the box does not listen on ${port}`);
}

const relayed = await serve('relayed', []);
const hostNet = await serve('host-network', ['--network', 'host']);
try {
  await origin(relayed.call, 8080);
  const { url } = await relayed.call('port_expose', { port: 8080 });
  await origin(hostNet.call, 18931);
  const direct = 'http://127.0.0.1:18931';

  const curl = async (args) => (await run('curl', ['-sS', '-o', '/dev/null', ...args], { maxBuffer: 1 << 20 })).stdout;
  const speed = async (base) => Number(await curl(['-w', '%{speed_download}', `${base}/big`])) / 1e6;
  const firstByte = async (base) => {
    const times = [];
    for (let i = 0; i < 50; i++) times.push(Number(await curl(['-w', '%{time_starttransfer}', `${base}/small`])) * 1000);
    return median(times);
  };
  await speed(url), await speed(direct);  // warm both paths
  const through = { speed: [], first: [] };
  const straight = { speed: [], first: [] };
  for (let r = 0; r < ROUNDS; r++) {
    straight.speed.push(await speed(direct));
    through.speed.push(await speed(url));
    straight.first.push(await firstByte(direct));
    through.first.push(await firstByte(url));
  }
  const result = {
    mb: MB,
    rounds: ROUNDS,
    direct_mb_s: round(median(straight.speed), 0),
    relay_mb_s: round(median(through.speed), 0),
    throughput_ratio: round(median(through.speed) / median(straight.speed)),
    direct_first_byte_ms: round(median(straight.first), 3),
    relay_first_byte_ms: round(median(through.first), 3),
    first_byte_added_ms: round(median(through.first) - median(straight.first), 3),
  };
  if (JSON_OUT) console.log(JSON.stringify(result));
  else {
    console.log(`exposed port relay, ${MB} MB body, ${ROUNDS} rounds (medians)`);
    console.log(`  throughput: direct ${result.direct_mb_s} MB/s, through the URL ${result.relay_mb_s} MB/s: ratio ${result.throughput_ratio} (target >= 0.8)`);
    console.log(`  first byte (p50 of 50 new connections): direct ${result.direct_first_byte_ms} ms, through the URL ${result.relay_first_byte_ms} ms: +${result.first_byte_added_ms} ms (target <= 1 ms)`);
  }
} finally {
  await relayed.client.close();
  await hostNet.client.close();
  await new Promise((r) => setTimeout(r, 500));
  rmSync(work, { recursive: true, force: true });
}
