#!/usr/bin/env node
// agentbox against the MCP servers an agent would otherwise use to run
// commands, all driven by the same official SDK client (tests/clients) over
// stdio, measured in the same run:
//
//   exec round trip   the same command (`echo hi`) through each server's tool,
//                     after warm-up (agentbox: a warm session, sandboxed);
//   start → initialized  spawn the server until the SDK's connect() resolves
//                     (initialize + notifications/initialized);
//   idle RSS          the server's whole process tree after tools/list.
//
// Peers are installed from npm into bench/.cache/peers (git-ignored), pinned:
//   @wonderwhy-er/desktop-commander  tool start_process {command, timeout_ms}
//   @openai/codex-shell-tool-mcp     tool shell {command, workdir}, twice: with its
//       default login shell (bash -lc) and with login:false (bash -c); after the `codex/sandbox-state/update` request Codex sends, with the
//       danger-full-access policy (Linux sandboxing there needs Codex's own
//       codex-linux-sandbox helper, which the package does not ship).
// Both peers run unsandboxed. A peer that cannot be installed or started is
// reported as such, with the reason, never given numbers.
//
// Usage: node bench/peers.mjs [--bin PATH] [--n 50] [--starts 8] [--json] [--no-install]
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const CACHE = join(HERE, '.cache', 'peers');
const PEER_VERSIONS = {
  '@wonderwhy-er/desktop-commander': '0.2.52',
  '@openai/codex-shell-tool-mcp': '0.97.0',
};
const COMMAND = 'echo hi';
const EXPECTED = 'hi';
const CALL_TIMEOUT_MS = 30_000;

const sdkRequire = createRequire(resolve(HERE, '../tests/clients/package.json'));
const sdk = async (path) => import(pathToFileURL(sdkRequire.resolve(`@modelcontextprotocol/sdk/${path}`)).href);

function parseArgs(argv) {
  const opts = {
    n: 50,
    starts: 8,
    json: false,
    install: true,
    bin: process.env.AGENTBOX_BIN ? resolve(process.env.AGENTBOX_BIN) : resolve(HERE, '../build/agentbox'),
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => argv[++i] ?? (() => { throw new Error(`${arg} needs a value`); })();
    if (arg === '--n') opts.n = Number(value());
    else if (arg === '--starts') opts.starts = Number(value());
    else if (arg === '--bin') opts.bin = resolve(value());
    else if (arg === '--json') opts.json = true;
    else if (arg === '--no-install') opts.install = false;
    else throw new Error(`unknown argument ${arg} (see the header of bench/peers.mjs)`);
  }
  return opts;
}

const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s[(s.length - 1) >> 1] + s[s.length >> 1]) / 2 : NaN;
};
const round = (x, d = 2) => Math.round(x * 10 ** d) / 10 ** d;

// ---- installing the peers --------------------------------------------------------

function installedVersion(name) {
  try {
    return JSON.parse(readFileSync(join(CACHE, 'node_modules', name, 'package.json'), 'utf8')).version;
  } catch {
    return undefined;
  }
}

/** Returns {name: reason} for the peers that could not be installed. */
function installPeers(install) {
  const missing = Object.entries(PEER_VERSIONS).filter(([name, v]) => installedVersion(name) !== v);
  if (!missing.length || !install) {
    return Object.fromEntries(missing.map(([name, v]) => [name, `not installed (${v}); run without --no-install`]));
  }
  mkdirSync(CACHE, { recursive: true });
  writeFileSync(join(CACHE, 'package.json'), JSON.stringify({ name: 'agentbox-bench-peers', private: true, version: '0.0.0', dependencies: PEER_VERSIONS }, null, 2));
  // --ignore-scripts: desktop-commander's dependencies (ripgrep, puppeteer)
  // download binaries from outside npm in postinstall; the exec path needs none.
  const r = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], { cwd: CACHE, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const failed = {};
  for (const [name, v] of Object.entries(PEER_VERSIONS)) {
    if (installedVersion(name) !== v) failed[name] = `npm install failed: ${(r.stderr || r.stdout || '').trim().split('\n').slice(-3).join(' ')}`;
  }
  return failed;
}

// ---- the servers -------------------------------------------------------------------

function servers(opts, work, stateDir) {
  const peerBin = (name, rel) => join(CACHE, 'node_modules', name, rel);
  const workdir = join(work, 'workdir');
  mkdirSync(workdir, { recursive: true });
  return [
    {
      name: 'agentbox',
      label: 'agentbox (sandboxed, warm session)',
      command: opts.bin,
      // Not under `work` (0700): when the server runs as root, sandboxes run as
      // an unprivileged uid that must reach the state directory.
      args: () => ['serve', '--state-dir', stateDir()],
      env: {},
      tool: 'exec',
      toolArgs: { command: COMMAND },
      output: (r) => r.structuredContent?.stdout,
    },
    {
      name: '@wonderwhy-er/desktop-commander',
      label: `desktop-commander ${PEER_VERSIONS['@wonderwhy-er/desktop-commander']} (unsandboxed)`,
      command: process.execPath,
      args: () => [peerBin('@wonderwhy-er/desktop-commander', 'dist/index.js')],
      // Its own HOME (it writes config and logs there); no telemetry; its
      // feature-flag fetch goes to a closed loopback port instead of the internet.
      env: { HOME: join(work, 'dc-home'), DESKTOP_COMMANDER_DISABLE_TELEMETRY: '1', DC_FLAG_URL: 'http://127.0.0.1:9/flags.json' },
      tool: 'start_process',
      toolArgs: { command: COMMAND, timeout_ms: 10_000 },
      output: (r) => r.content?.map((c) => c.text).join(''),
    },
    ...[true, false].map((login) => ({
      name: '@openai/codex-shell-tool-mcp',
      label: `codex-shell-tool-mcp ${PEER_VERSIONS['@openai/codex-shell-tool-mcp']} (unsandboxed${login ? ', default bash -lc' : ', login:false'})`,
      command: process.execPath,
      args: () => [peerBin('@openai/codex-shell-tool-mcp', 'bin/mcp-server.js')],
      env: { CODEX_HOME: join(work, 'codex-home') },
      tool: 'shell',
      toolArgs: { command: COMMAND, workdir, login },
      output: (r) => r.content?.map((c) => c.text).join(''),
      async setup(client, EmptyResultSchema) {
        await client.request(
          { method: 'codex/sandbox-state/update', params: { sandboxPolicy: { type: 'danger-full-access' }, sandboxCwd: workdir } },
          EmptyResultSchema,
        );
      },
    })),
  ];
}

// ---- measuring -----------------------------------------------------------------------

function treeRssMiB(pid) {
  const kids = new Map();
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(p));
    } catch {}
  }
  let kib = 0;
  const queue = [pid];
  while (queue.length) {
    const p = queue.shift();
    try {
      kib += Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/status`, 'utf8'))?.[1] ?? 0);
    } catch {}
    queue.push(...(kids.get(p) ?? []));
  }
  return kib / 1024;
}

async function start(server, lib) {
  const env = { ...process.env, ...server.env };
  for (const dir of [server.env.HOME, server.env.CODEX_HOME]) if (dir) mkdirSync(dir, { recursive: true });
  const transport = new lib.StdioClientTransport({ command: server.command, args: server.args(), env, stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (d) => { stderr = (stderr + d).slice(-4000); });
  const client = new lib.Client({ name: 'agentbox-peer-bench', version: '0.0.0' }, { capabilities: {} });
  const t0 = now();
  try {
    await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  } catch (err) {
    await transport.close().catch(() => {});
    throw new Error(`${err.message}; stderr: ${stderr.trim().slice(-400)}`);
  }
  const initMs = now() - t0;
  return { client, transport, initMs, stderr: () => stderr };
}

async function execOnce(server, client) {
  const t0 = now();
  const r = await client.callTool({ name: server.tool, arguments: server.toolArgs }, undefined, { timeout: CALL_TIMEOUT_MS });
  const ms = now() - t0;
  const out = server.output(r) ?? '';
  if (r.isError || !out.includes(EXPECTED)) throw new Error(`${server.tool} did not echo: ${JSON.stringify(r).slice(0, 300)}`);
  return ms;
}

async function measure(server, opts, lib) {
  // Start-up: fresh processes, each closed before the next.
  const inits = [];
  const rss = [];
  for (let i = 0; i < opts.starts + 1; i++) {
    const s = await start(server, lib);
    try {
      await s.client.listTools();
      if (i > 0) inits.push(s.initMs); // the first start warms the page cache
      await sleep(300);
      if (i > 0) rss.push(treeRssMiB(s.transport.pid));
    } finally {
      await s.client.close();
    }
  }
  // Exec round trip on one long-lived server.
  const s = await start(server, lib);
  try {
    await server.setup?.(s.client, lib.EmptyResultSchema);
    for (let i = 0; i < 5; i++) await execOnce(server, s.client);
    const calls = [];
    for (let i = 0; i < opts.n; i++) calls.push(await execOnce(server, s.client));
    return { init_ms: round(median(inits)), idle_rss_mib: round(median(rss), 1), exec_ms: round(median(calls)), exec_p90_ms: round([...calls].sort((a, b) => a - b)[Math.floor(calls.length * 0.9)]) };
  } finally {
    await s.client.close();
  }
}

/** The floor any of them pays: spawn `sh -c 'echo hi'` from this process. */
async function directSpawn(n) {
  const once = () => new Promise((res, rej) => {
    const t0 = now();
    const c = spawn('/bin/sh', ['-c', COMMAND], { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    c.stdout.on('data', (d) => { out += d; });
    c.on('error', rej);
    c.on('close', () => (out.trim() === EXPECTED ? res(now() - t0) : rej(new Error(`sh printed ${out}`))));
  });
  for (let i = 0; i < 5; i++) await once();
  const xs = [];
  for (let i = 0; i < n; i++) xs.push(await once());
  return round(median(xs));
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (!existsSync(opts.bin)) {
    console.error(`peers: agentbox binary not found at ${opts.bin}`);
    process.exit(2);
  }
  const lib = {
    ...(await sdk('client/index.js')),
    ...(await sdk('client/stdio.js')),
    EmptyResultSchema: (await sdk('types.js')).EmptyResultSchema,
  };
  const installFailures = installPeers(opts.install);
  const work = mkdtempSync(join(tmpdir(), 'agentbox-peers-'));
  const stateDirs = [];
  const stateDir = () => {
    stateDirs.push(mkdtempSync(join(tmpdir(), 'agentbox-peers-state-')));
    return stateDirs[stateDirs.length - 1];
  };
  const results = { command: COMMAND, n: opts.n, starts: opts.starts, binary: opts.bin, servers: [] };
  try {
    results.direct_spawn_ms = await directSpawn(opts.n);
    for (const server of servers(opts, work, stateDir)) {
      const row = { name: server.name, label: server.label };
      if (installFailures[server.name]) row.unavailable = installFailures[server.name];
      else {
        try {
          Object.assign(row, await measure(server, opts, lib));
        } catch (err) {
          row.unavailable = `failed to run: ${err.message}`;
        }
      }
      results.servers.push(row);
    }
  } finally {
    for (const dir of [work, ...stateDirs]) rmSync(dir, { recursive: true, force: true });
  }
  const ours = results.servers[0];
  const peers = results.servers.slice(1).filter((p) => !p.unavailable);
  if (!ours.unavailable && peers.length) {
    const fastestExec = Math.min(...peers.map((p) => p.exec_ms));
    const fastestInit = Math.min(...peers.map((p) => p.init_ms));
    const smallestRss = Math.min(...peers.map((p) => p.idle_rss_mib));
    results.ratios = {
      exec_fastest_peer_over_agentbox: round(fastestExec / ours.exec_ms),
      init_fastest_peer_over_agentbox: round(fastestInit / ours.init_ms),
      rss_smallest_peer_over_agentbox: round(smallestRss / ours.idle_rss_mib),
    };
    results.targets = {
      exec_at_least_2x: results.ratios.exec_fastest_peer_over_agentbox >= 2,
      init_at_least_5x: results.ratios.init_fastest_peer_over_agentbox >= 5,
      rss_at_least_4x: results.ratios.rss_smallest_peer_over_agentbox >= 4,
    };
  }
  if (opts.json) console.log(JSON.stringify(results, null, 2));
  else print(results);
  process.exit(ours.unavailable ? 1 : 0);
}

function print(r) {
  const ours = r.servers[0];
  const cell = (v, w = 12) => String(v).padStart(w);
  const ratio = (peer, key, inverse = false) => (peer === ours || ours.unavailable ? '' : `${round(inverse ? peer[key] / ours[key] : ours[key] / peer[key])}x`);
  console.log(`exec round trip of \`${r.command}\` through the MCP SDK client, median of ${r.n}; start-up and RSS median of ${r.starts} starts`);
  console.log(`${'server'.padEnd(58)}${cell('exec ms')}${cell('vs agentbox')}${cell('init ms')}${cell('vs agentbox')}${cell('RSS MiB')}${cell('vs agentbox')}`);
  for (const s of r.servers) {
    if (s.unavailable) {
      console.log(`${s.label.padEnd(58)}  not measured: ${s.unavailable}`);
      continue;
    }
    console.log(`${s.label.padEnd(58)}${cell(s.exec_ms)}${cell(ratio(s, 'exec_ms', true))}${cell(s.init_ms)}${cell(ratio(s, 'init_ms', true))}${cell(s.idle_rss_mib)}${cell(ratio(s, 'idle_rss_mib', true))}`);
  }
  console.log(`${'direct spawn of sh -c (no MCP, no sandbox)'.padEnd(58)}${cell(r.direct_spawn_ms)}`);
  if (r.ratios) {
    const t = r.targets;
    console.log(`targets: exec ${r.ratios.exec_fastest_peer_over_agentbox}x faster than the fastest peer (>= 2: ${t.exec_at_least_2x ? 'met' : 'NOT met'}); ` +
      `start-up ${r.ratios.init_fastest_peer_over_agentbox}x (>= 5: ${t.init_at_least_5x ? 'met' : 'NOT met'}); ` +
      `RSS ${r.ratios.rss_smallest_peer_over_agentbox}x smaller (>= 4: ${t.rss_at_least_4x ? 'met' : 'NOT met'})`);
  }
}

main().catch((err) => {
  console.error(`peers: ${err.stack ?? err.message}`);
  process.exit(2);
});
