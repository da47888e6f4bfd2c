#!/usr/bin/env node
// The egress proxy's cost (docs/network.md), measured through the real
// server and a real box, as ratios against the same requests made directly
// on the host's loopback in the same run, interleaved:
//   1. throughput: a 100 MB body (curl to /dev/null) through the proxy from
//      inside a box vs the same curl in a box on the host's network (the
//      same CPU cap and filter) straight to the origin;
//   2. latency: the p50 of 50 small GETs (curl's time_total) through the
//      proxy vs direct;
// for plain HTTP, for HTTPS through a CONNECT tunnel (the origin's
// certificate from a test CA made with openssl here), and for HTTPS to a
// host with a secret, which the proxy intercepts (the box trusts the
// proxy's CA through its environment; the server trusts the test CA
// through SSL_CERT_FILE); each against direct TLS to the same origin.
// Each 100 MB transfer also reports the whole machine's CPU (from
// /proc/stat): the cores busy during it and the CPU seconds it cost per GB,
// which tells whether a ratio is bounded by the machine's cores.
// Usage: node bench/network_bench.mjs [--bin build/agentbox] [--mb 100] [--rounds 3] [--json]
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttp } from 'node:http';
import { createServer as createHttps } from 'node:https';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';

import { BIN, Client, JSON_OUT, StdioClientTransport, median, option, round } from './common.mjs';

const MB = Number(option('mb', 100));
const ROUNDS = Number(option('rounds', 3));

const work = mkdtempSync(join(tmpdir(), 'agentbox-netbench-'));
const openssl = (...args) => execFileSync('openssl', args, { cwd: work, stdio: ['ignore', 'ignore', 'pipe'] });
openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=bench CA');
openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'origin.key', '-out', 'origin.csr', '-subj', '/CN=origin.test');
writeFileSync(join(work, 'san.ext'), 'subjectAltName=DNS:origin.test,DNS:secret.test\n');
openssl('x509', '-req', '-in', 'origin.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'origin.pem', '-days', '2', '-extfile', 'san.ext');

const chunk = Buffer.alloc(1 << 20, 'x');
function handler(req, res) {
  if (req.url === '/big') {
    res.writeHead(200, { 'Content-Length': MB * chunk.length });
    let left = MB;
    const pump = () => {
      while (left > 0) {
        left--;
        if (!res.write(chunk)) return res.once('drain', pump);
      }
      res.end();
    };
    return pump();
  }
  res.end('ok');
}
const listen = (server) => new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server.address().port)));
const http = createHttp(handler);
const https = createHttps({ key: readFileSync(join(work, 'origin.key')), cert: readFileSync(join(work, 'origin.pem')) }, handler);
const httpPort = await listen(http);
const httpsPort = await listen(https);

writeFileSync(join(work, 'policy.json'), JSON.stringify({
  allow: [`origin.test:${httpPort}`, `origin.test:${httpsPort}`, `secret.test:${httpsPort}`],
  resolve: { 'origin.test': '127.0.0.1', 'secret.test': '127.0.0.1' },
  secrets: [{ host: 'secret.test', header: 'Authorization', value_from_env: 'BENCH_TOKEN', format: 'Bearer {}' }],
}));
// Two servers: one in proxy mode, and one whose boxes share the host's
// network, so "direct" is the same curl in the same kind of box (the same
// CPU cap, all CPUs but one, and the same seccomp filter) with only the
// proxy taken away. curl on the host is shown as well, for reference: it
// has no cap, so against it the figure would be the box's limit, not the proxy's.
async function server(network, extra) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ['serve', '--state-dir', join(work, `state-${network}`), '--network', network, ...extra],
    env: { PATH: process.env.PATH, HOME: process.env.HOME ?? '/root', BENCH_TOKEN: 'bench', SSL_CERT_FILE: join(work, 'ca.pem') },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'network-bench', version: '0' }, { capabilities: {} });
  await client.connect(transport);
  await client.listTools();
  const run = async (command) => {
    const r = await client.callTool({ name: 'exec', arguments: { command, timeout_ms: 300_000 } }, undefined, { timeout: 300_000 });
    if (r.isError || r.structuredContent.exit_code !== 0) throw new Error(`exec failed: ${r.content[0].text}`);
    return r.structuredContent.stdout;
  };
  // The CA file goes into the box through the workspace (the box cannot read the host's /tmp).
  await client.callTool({ name: 'file_write', arguments: { path: '/workspace/ca.pem', content: readFileSync(join(work, 'ca.pem'), 'utf8') } });
  return { client, run };
}
const proxyServer = await server('proxy', ['--network-policy', join(work, 'policy.json')]);
const hostServer = await server('host', []);
const inBox = proxyServer.run;
const inHostBox = hostServer.run;

// Each curl trusts one CA, so each loads the same small file: in the box an
// intercepted host is checked against the proxy's CA alone (/etc/agentbox-ca.pem),
// not the bundle SSL_CERT_FILE names, whose ~140 roots curl would parse on every
// run (~25 ms, the box's cost rather than the proxy's).
// `where`: 'host' (curl on the host), 'direct' (a box on the host's network), 'proxy'.
const pin = (url) => `--resolve ${new URL(url).hostname}:${new URL(url).port}:127.0.0.1`;
const trust = (url, where) =>
  where === 'host' ? `--cacert ${join(work, 'ca.pem')} ${pin(url)}`
    : where === 'direct' ? `--cacert /workspace/ca.pem ${pin(url)}`
      : new URL(url).hostname === 'secret.test' ? '--cacert /etc/agentbox-ca.pem' : '--cacert /workspace/ca.pem';
const curlBig = (url, direct) => `curl -sS ${trust(url, direct)} -o /dev/null -w '%{speed_download}' ${url}`;
const curlSmall = (url, direct) =>
  `for i in $(seq 50); do curl -sS ${trust(url, direct)} -o /dev/null -w '%{time_total}\\n' ${url}; done`;
// Asynchronous: the origins run in this process, so a synchronous child would wait on itself.
const host = async (command) =>
  (await promisify(execFile)('bash', ['-c', command], { encoding: 'utf8', env: { PATH: process.env.PATH }, maxBuffer: 1 << 20 })).stdout;

// The machine's busy and total CPU time so far, in clock ticks (all CPUs).
function cpuTicks() {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  return { busy: total - fields[3] - fields[4], total };
}
const TICKS_PER_S = 100;  // USER_HZ, 100 on Linux
// One big download: its speed in bytes/s, the cores busy meanwhile and the CPU seconds per GB moved.
async function measured(run) {
  const before = cpuTicks(), start = process.hrtime.bigint();
  const speed = Number(await run());
  const seconds = Number(process.hrtime.bigint() - start) / 1e9, after = cpuTicks();
  const busyS = (after.busy - before.busy) / TICKS_PER_S;
  return { speed, cores: busyS / seconds, cpuSPerGb: busyS / (MB / 1000) };
}

const results = {};
for (const [label, scheme, name, port] of [['http', 'http', 'origin.test', httpPort], ['https', 'https', 'origin.test', httpsPort],
  ['https-intercepted', 'https', 'secret.test', httpsPort]]) {
  const big = `${scheme}://${name}:${port}/big`;
  const small = `${scheme}://${name}:${port}/small`;
  const proxied = [], direct = [], onHost = [], proxiedMs = [], directMs = [], onHostMs = [];
  const directCpu = [], proxiedCpu = [];
  const times = (text) => text.trim().split('\n').map((s) => Number(s) * 1000);
  for (let round_ = 0; round_ < ROUNDS; round_++) {
    onHost.push(Number(await host(curlBig(big, 'host'))));
    const d = await measured(() => inHostBox(curlBig(big, 'direct')));
    const p = await measured(() => inBox(curlBig(big, 'proxy')));
    direct.push(d.speed);
    proxied.push(p.speed);
    directCpu.push(d);
    proxiedCpu.push(p);
    onHostMs.push(...times(await host(curlSmall(small, 'host'))));
    directMs.push(...times(await inHostBox(curlSmall(small, 'direct'))));
    proxiedMs.push(...times(await inBox(curlSmall(small, 'proxy'))));
  }
  results[label] = {
    host_mb_s: round(median(onHost) / 1e6, 1),
    host_p50_ms: round(median(onHostMs), 3),
    direct_mb_s: round(median(direct) / 1e6, 1),
    proxy_mb_s: round(median(proxied) / 1e6, 1),
    throughput_ratio: round(median(proxied) / median(direct)),
    direct_p50_ms: round(median(directMs), 3),
    proxy_p50_ms: round(median(proxiedMs), 3),
    added_p50_ms: round(median(proxiedMs) - median(directMs), 3),
    direct_cores_busy: round(median(directCpu.map((c) => c.cores))),
    proxy_cores_busy: round(median(proxiedCpu.map((c) => c.cores))),
    direct_cpu_s_per_gb: round(median(directCpu.map((c) => c.cpuSPerGb))),
    proxy_cpu_s_per_gb: round(median(proxiedCpu.map((c) => c.cpuSPerGb))),
  };
}
await proxyServer.client.close();
await hostServer.client.close();
http.close();
https.close();
rmSync(work, { recursive: true, force: true });
if (JSON_OUT) {
  console.log(JSON.stringify({ mb: MB, rounds: ROUNDS, ...results }));
} else {
  for (const [scheme, r] of Object.entries(results))
    console.log(`${scheme}: ${MB} MB direct ${r.direct_mb_s} MB/s, through the proxy ${r.proxy_mb_s} MB/s (${r.throughput_ratio}x; target >= 0.8); ` +
      `small GET p50 direct ${r.direct_p50_ms} ms, proxy ${r.proxy_p50_ms} ms (+${r.added_p50_ms} ms; target <= 1); ` +
      `curl on the host, uncapped: ${r.host_mb_s} MB/s, p50 ${r.host_p50_ms} ms; ` +
      `machine CPU during the 100 MB: direct ${r.direct_cores_busy} cores busy, ${r.direct_cpu_s_per_gb} CPU s/GB, ` +
      `through the proxy ${r.proxy_cores_busy} cores, ${r.proxy_cpu_s_per_gb} CPU s/GB (of ${cpus().length} cores)`);
}
process.exit(0);
