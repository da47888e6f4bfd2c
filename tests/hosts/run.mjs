// Drives each host through the scenario against agentbox and reports, per
// host and per step, whether the result the host handed back to the model is
// what the contract says. Usage (run.sh sets PATH to the pinned hosts):
//   node run.mjs AGENTBOX_BIN [--keep] [--open-home] [--timeout SECONDS] [host ...]
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Endpoint } from './endpoint.mjs';
import { verdicts, steps, PROMPT, FINAL_TEXT } from './scenario.mjs';
import * as hosts from './hosts.mjs';

// What a host's own output or log says when the MCP connection or a call broke.
// A tool's own error result is not trouble (Claude Code logs those as "Tool 'x'
// failed after 0s: <text>"), nor is a clean close at exit.
const MCP_TROUBLE = /MCP error -?\d+|-32602|Structured content does not match|connection dropped|unknown token|McpError|Failed to (connect|start)|Connection closed(?! after \d+s \(cleanly\))|(server|agentbox)[^\n]{0,40}(crashed|disconnected)/i;
const NOT_TROUBLE = /Tool '[a-z_]+' failed after [\d.]+m?s: (?!MCP error)/;

function parseArgs(argv) {
  const o = { bin: null, keep: false, openHome: false, timeout: 240, hosts: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--keep') o.keep = true;
    else if (argv[i] === '--open-home') o.openHome = true;
    else if (argv[i] === '--timeout') o.timeout = Number(argv[++i]);
    else if (!o.bin) o.bin = path.resolve(argv[i]);
    else o.hosts.push(argv[i]);
  }
  return o;
}

// Runs argv with env in cwd; resolves {code, signal, ms}. The child leads its
// own process group so a timeout ends the host and everything it started.
function run(argv, { env, cwd, out, err, timeoutMs }) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn(argv[0], argv.slice(1), { env, cwd, detached: true,
      stdio: ['ignore', fs.openSync(out, 'a'), fs.openSync(err, 'a')] });
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } }, timeoutMs);
    child.on('error', (e) => { clearTimeout(timer); resolve({ code: null, error: String(e), ms: Date.now() - t0 }); });
    child.on('exit', (code, signal) => { clearTimeout(timer); resolve({ code, signal, timedOut, ms: Date.now() - t0 }); });
  });
}

function hostEnv(host, ctx) {
  return {
    PATH: `${ctx.bindir}:/usr/local/bin:/usr/bin:/bin`, HOME: ctx.home, USER: os.userInfo().username,
    LANG: 'C.UTF-8', TMPDIR: ctx.tmp, SHELL: '/bin/bash',
    NO_UPDATE_NOTIFIER: '1', DO_NOT_TRACK: '1', CI: '1', NO_COLOR: '1', TERM: 'dumb',
    ...host.env(ctx),
  };
}

async function runHost(host, opts, bindir) {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), `agentbox-hosts-${host.name}.`));
  const ctx = { bin: opts.bin, home, project: path.join(home, 'project'), tmp: path.join(home, 'tmp'), bindir, port: 0 };
  // mkdtemp makes the HOME 0700, as a host or a fresh account may hand it to
  // the server; --open-home (0755) is for looking past that on a server that
  // cannot start sandboxes under a 0700 parent.
  if (opts.openHome) fs.chmodSync(home, 0o755);
  fs.mkdirSync(ctx.project); fs.mkdirSync(ctx.tmp);
  const endpoint = new Endpoint(path.join(home, 'requests.jsonl'));
  ctx.port = await endpoint.listen();
  const env = hostEnv(host, ctx);
  const out = path.join(home, 'host.stdout'), err = path.join(home, 'host.stderr');
  const report = { host, home, problems: [] };
  try {
    for (const argv of host.register(ctx)) {
      const r = await run(argv, { env, cwd: ctx.project, out: path.join(home, 'register.log'), err: path.join(home, 'register.log'), timeoutMs: 60000 });
      if (r.code !== 0) report.problems.push(`registering failed (${argv.join(' ')}): exit ${r.code ?? r.error} — ${tail(path.join(home, 'register.log'))}`);
    }
    const r = await run(host.run(ctx, PROMPT), { env, cwd: ctx.project, out, err, timeoutMs: opts.timeout * 1000 });
    report.exit = r;
    if (r.timedOut) report.problems.push(`did not finish within ${opts.timeout} s`);
    else if (r.code !== 0) report.problems.push(`exited with ${r.code ?? r.signal ?? r.error}: ${tail(err)}`);
  } finally {
    await endpoint.close();
  }
  report.problems.push(...endpoint.problems);
  if (endpoint.agentRequests === 0) report.problems.push(`never sent a model request offering agentbox's tools (${endpoint.requests} requests in all)`);
  else if (!endpoint.finished) report.problems.push(`stopped after ${endpoint.seen.filter(Boolean).length} of ${steps.length} tool results`);
  if (report.exit && !report.exit.timedOut && endpoint.finished && !fs.readFileSync(out, 'utf8').includes(FINAL_TEXT))
    report.problems.push('the final answer is not in the host\'s output');
  if (host.errorFlags) {
    const flags = host.errorFlags(fs.readFileSync(out, 'utf8'));
    endpoint.seen.forEach((r, i) => { if (r && r.isError === undefined && flags[i] !== undefined) r.isError = flags[i]; });
  }
  report.names = endpoint.names;
  report.verdicts = verdicts(endpoint.seen);
  report.mcpTrouble = mcpTrouble([out, err, ...host.logs(ctx)]);
  return report;
}

function tail(file, n = 600) {
  try { const t = fs.readFileSync(file, 'utf8'); return JSON.stringify(t.slice(-n)); } catch { return '(no output)'; }
}

function mcpTrouble(files) {
  const found = [];
  for (const f of files) {
    let text;
    try { text = fs.readFileSync(f, 'utf8'); } catch { continue; }
    for (const line of text.split('\n')) if (MCP_TROUBLE.test(line) && !NOT_TROUBLE.test(line)) found.push(`${path.basename(f)}: ${line.slice(0, 300)}`);
  }
  return found;
}

function print(report) {
  const { host, verdicts: vs } = report;
  const names = report.names ? Object.values(report.names).filter(Boolean).map((n) => n.deferred ?? n) : [];
  console.log(`\n--- ${host.title} (${host.dialect}) — home ${report.home}`);
  if (names.length) console.log(`tool names: ${names.slice(0, 3).join(', ')}, …`);
  for (const v of vs) {
    const size = v.result ? `${v.result.payload} chars${v.result.isError === true ? ', error' : ''}` : 'no result';
    console.log(`  ${v.failures.length ? 'FAIL' : 'ok  '} ${v.step.label.padEnd(26)} (${size})`);
    for (const f of v.failures) console.log(`         ${f}`);
  }
  for (const t of report.mcpTrouble.slice(0, 10)) console.log(`  FAIL MCP trouble in the host's log: ${t}`);
  if (report.mcpTrouble.length > 10) console.log(`       … ${report.mcpTrouble.length - 10} more lines`);
  for (const p of report.problems) console.log(`  FAIL ${p}`);
  const secs = report.exit ? (report.exit.ms / 1000).toFixed(1) : '?';
  console.log(`  ${host.title}: ${passed(report) ? 'PASS' : 'FAIL'} — ${vs.filter((v) => !v.failures.length).length}/${vs.length} steps as meant, ${secs} s`);
}

// The real HOME's config of the hosts must stay as it was: every host runs in
// its own temporary HOME. (~/.claude is left out: the machine's own tooling may
// use it while this runs.)
const REAL_HOME_PATHS = ['.codex', '.gemini', '.qwen', '.config/opencode', '.local/share/opencode', '.cache/opencode'];
function realHomeState() {
  return REAL_HOME_PATHS.map((p) => {
    try { const st = fs.statSync(path.join(os.homedir(), p)); return `${p} ${st.mtimeMs}`; } catch { return `${p} absent`; }
  });
}

const passed = (r) => !r.problems.length && !r.mcpTrouble.length && r.verdicts.every((v) => !v.failures.length);

// As root each sandbox's directory is the mount point of its own
// filesystem, and the mount outlives a server the host killed or one still
// shutting down (docs/design.md section 2): unmount what is left under the
// throwaway HOME, deepest first, before deleting it.
function removeHome(home) {
  const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
    .map((line) => line.split(' ')[4]).filter((mp) => mp && (mp === home || mp.startsWith(home + '/')))
    .sort((a, b) => b.length - a.length);
  for (const mp of mounts) spawnSync('umount', ['-l', mp]);
  fs.rmSync(home, { recursive: true, force: true });
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (!opts.bin || !fs.existsSync(opts.bin)) { console.error(`hosts: agentbox binary not found: ${opts.bin}`); process.exit(2); }
  const bindir = path.join(path.dirname(new URL(import.meta.url).pathname), 'node_modules', '.bin');
  const chosen = opts.hosts.length ? hosts.all.filter((h) => opts.hosts.includes(h.name)) : hosts.all;
  if (!chosen.length) { console.error(`hosts: unknown host(s) ${opts.hosts.join(' ')}`); process.exit(2); }
  const reports = [];
  const homeBefore = realHomeState();
  for (const host of chosen) {
    const report = await runHost(host, opts, bindir);
    print(report);
    reports.push(report);
    if (!opts.keep) removeHome(report.home);
  }
  const touched = realHomeState().filter((s, i) => s !== homeBefore[i]);
  for (const t of touched) console.log(`FAIL  a host changed the real HOME: ~/${t.split(' ')[0]}`);
  console.log('\n=== hosts summary ===');
  for (const r of reports) console.log(`${passed(r) ? 'PASS' : 'FAIL'}  ${r.host.title.padEnd(12)} ${r.verdicts.filter((v) => !v.failures.length).length}/${steps.length} steps, ${r.problems.length + r.mcpTrouble.length} other problems`);
  process.exit(reports.every(passed) && !touched.length ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(2); });
