#!/usr/bin/env node
// Runs every benchmark under bench/ against one build and prints one table of
// ratios, all measured in this run. Called by bench/run after the Release build.
//
// Usage: node bench/report.mjs --build DIR [--quick] [--json FILE]
//        [--only startup,sandbox_bench,peers,exec_bench,files_bench,snapshot_bench,freeze_bench,restore_bench,terminal_bench]
//
// Benchmarks written later plug in by convention: `node bench/NAME.mjs --json
// --bin AGENTBOX` prints one JSON object whose `rows` array holds
// {name, agentbox, baseline, unit, ratio, target?, met?} (see bench/README.md).
// A benchmark file that is absent is reported as "not present"; one that fails
// is reported with its error. No number here comes from anywhere but this run.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const opts = { build: resolve(HERE, '../build-release'), quick: false, json: undefined, only: undefined };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--build') opts.build = resolve(argv[++i]);
    else if (arg === '--quick') opts.quick = true;
    else if (arg === '--json') opts.json = resolve(argv[++i]);
    else if (arg === '--only') opts.only = argv[++i].split(',');
    else throw new Error(`unknown argument ${arg}`);
  }
  return opts;
}

const r2 = (x) => (Number.isFinite(x) ? Math.round(x * 100) / 100 : x);

/** Runs a command; returns {ok, stdout, error}. Output goes to our stderr as it is captured. */
function run(cmd, args, timeoutMs) {
  process.stderr.write(`\n$ ${[cmd, ...args].join(' ')}\n`);
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 << 20 });
  process.stderr.write(r.stdout ?? '');
  process.stderr.write(r.stderr ?? '');
  if (r.error) return { ok: false, error: r.error.message };
  if (r.status !== 0) {
    const tail = `${r.stderr ?? ''}${r.stdout ?? ''}`.trim().split('\n').slice(-1)[0] ?? '';
    return { ok: false, stdout: r.stdout, error: `exit ${r.status ?? r.signal}: ${tail.slice(0, 160)}` };
  }
  return { ok: true, stdout: r.stdout };
}

const row = (group, name, agentbox, baseline, unit, ratio, target, met) => ({ group, name, agentbox: r2(agentbox), baseline, unit, ratio: r2(ratio), target, met });
const missing = (group, what) => ({ group, name: what, note: 'not present' });
const failed = (group, what, error) => ({ group, name: what, note: `failed: ${error}` });

// ---- each benchmark -------------------------------------------------------------

function startup(opts, bin) {
  const g = 'startup.mjs';
  const r = run(process.execPath, [join(HERE, 'startup.mjs'), '--json', '--bin', bin, '--n', opts.quick ? '5' : '20'], 300_000);
  if (!r.ok) return [failed(g, 'start → initialize response', r.error)];
  const j = JSON.parse(r.stdout);
  return [
    row(g, 'start → initialize response (raw stdio)', j.startup_to_initialized_ms.median, `${r2(j.baseline_spawn_true_ms.median)} (spawn /bin/true)`, 'ms', j.startup_over_baseline_ratio),
    row(g, 'idle server RSS after tools/list', j.idle_rss_mib.median, '', 'MiB'),
  ];
}

function sandboxBench(opts, buildDir) {
  const g = 'sandbox_bench';
  const bin = join(buildDir, 'bench', 'sandbox_bench');
  if (!existsSync(bin)) return [missing(g, 'sandbox_bench binary')];
  // The in-sandbox agent: its own binary where the build makes one.
  const agent = [join(buildDir, 'agentbox-agent'), join(buildDir, 'tests', 'sandbox', 'agentbox_test_agent')].find(existsSync);
  if (!agent) return [failed(g, 'sandbox_bench', `no agent binary in ${buildDir}`)];
  const r = run(bin, [agent, opts.quick ? '50' : '200'], 600_000);
  if (!r.ok) return [failed(g, 'sandbox_bench', r.error)];
  const out = r.stdout;
  const rows = [];
  let m = /exec \/bin\/true, warm session: median ([\d.]+) ms; direct spawn: median ([\d.]+) ms; ratio ([\d.]+)/.exec(out);
  rows.push(m ? row(g, 'exec /bin/true in a warm session (manager → agent)', +m[1], `${m[2]} (direct spawn)`, 'ms', +m[3], '<= 1.5', +m[3] <= 1.5) : failed(g, 'warm exec', 'output not understood'));
  // One line per --spare setting: none (all on the call's path), prepared
  // (the default), warm (an extra: a running spare is claimed, no target).
  const cold = [...out.matchAll(/first call of a new conversation \[spare (\w+)[^\]]*\]: median ([\d.]+) ms.*?bare bwrap true: median ([\d.]+) ms; ratio ([\d.]+)/g)];
  if (!cold.length) rows.push(failed(g, 'cold start', 'output not understood'));
  for (const [, spare, ms, bare, ratio] of cold) {
    const label = spare === 'none' ? 'cold start, spare none: new sandbox + first exec'
      : spare === 'prepared' ? 'cold start, spare prepared (default): new sandbox + first exec'
      : `cold start, spare ${spare} (extra): claimed spare + first exec`;
    const target = spare === 'warm' ? undefined : '<= 1.5';
    rows.push(row(g, label, +ms, `${bare} (bare bwrap true)`, 'ms', +ratio, target, target ? +ratio <= 1.5 : undefined));
  }
  // Memory: RSS is the measure (target < 5 MB for an idle sandbox); PSS alongside.
  m = /memory: server side \(this process\): RSS ([\d.]+) MiB, PSS ([\d.]+) MiB/.exec(out);
  if (m) rows.push(row(g, 'server-side process RSS (PSS)', +m[1], `PSS ${m[2]}`, 'MiB'));
  for (const [re, label] of [[/memory: idle sandbox, session shell alive: RSS ([\d.]+) MiB, PSS ([\d.]+) MiB/, 'idle sandbox RSS (PSS), session shell alive'],
                             [/memory: idle sandbox, shell idled out: RSS ([\d.]+) MiB, PSS ([\d.]+) MiB/, 'idle sandbox RSS (PSS), shell idled out']]) {
    m = re.exec(out);
    rows.push(m ? row(g, label, +m[1], `PSS ${m[2]}`, 'MiB', undefined, '< 5', +m[1] < 5) : failed(g, label, 'output not understood'));
  }
  m = /exec after the shell idled out: median ([\d.]+) ms; warm session: median ([\d.]+) ms/.exec(out);
  if (m) rows.push(row(g, 'exec after the shell idled out (fresh shell from saved state)', +m[1], `${m[2]} (warm session)`, 'ms', +m[1] / +m[2]));
  return rows;
}

function peers(opts, bin) {
  const g = 'peers.mjs';
  const args = [join(HERE, 'peers.mjs'), '--json', '--bin', bin];
  if (opts.quick) args.push('--n', '20', '--starts', '3');
  const r = run(process.execPath, args, 900_000);
  if (!r.ok) return [failed(g, 'peer comparison', r.error)];
  const j = JSON.parse(r.stdout);
  const ours = j.servers[0];
  const rows = [row(g, `exec \`${j.command}\` via SDK client vs direct spawn`, ours.exec_ms, `${j.direct_spawn_ms} (sh -c from node)`, 'ms', ours.exec_ms / j.direct_spawn_ms)];
  for (const p of j.servers.slice(1)) {
    if (p.unavailable) {
      rows.push({ group: g, name: `vs ${p.label}`, note: p.unavailable });
      continue;
    }
    rows.push(row(g, `exec round trip vs ${p.label}`, ours.exec_ms, `${p.exec_ms}`, 'ms', p.exec_ms / ours.exec_ms, 'peer/agentbox >= 2', p.exec_ms / ours.exec_ms >= 2));
    rows.push(row(g, `start → initialized vs ${p.label}`, ours.init_ms, `${p.init_ms}`, 'ms', p.init_ms / ours.init_ms, 'peer/agentbox >= 5', p.init_ms / ours.init_ms >= 5));
    rows.push(row(g, `idle RSS vs ${p.label}`, ours.idle_rss_mib, `${p.idle_rss_mib}`, 'MiB', p.idle_rss_mib / ours.idle_rss_mib, 'peer/agentbox >= 4', p.idle_rss_mib / ours.idle_rss_mib >= 4));
  }
  return rows;
}

/** A teammate's benchmark following the `--json` / `rows` convention. */
function conventional(opts, group, command, args) {
  const r = run(command, [...args, ...(opts.quick ? ['--quick'] : [])], 900_000);
  if (!r.ok) return [failed(group, group, r.error)];
  let j;
  try {
    j = JSON.parse(r.stdout);
  } catch {
    return [failed(group, group, 'printed no JSON object (see bench/README.md for the --json convention)')];
  }
  if (!Array.isArray(j.rows)) return [failed(group, group, 'JSON has no `rows` array (see bench/README.md)')];
  return j.rows.map((x) => row(group, x.name, x.agentbox, x.baseline ?? '', x.unit ?? '', x.ratio, x.target, x.met));
}

function teammate(opts, file, bin) {
  const script = join(HERE, file);
  if (existsSync(script)) return conventional(opts, file, process.execPath, [script, '--json', '--bin', bin]);
  return [missing(file, file)];
}

/** exec_bench.mjs prints its own flat JSON (keys below), not the `rows` convention. */
function execBench(opts, bin) {
  const g = 'exec_bench.mjs';
  const script = join(HERE, g);
  if (!existsSync(script)) return [missing(g, g)];
  // The cold-start baseline's argv (bench/bare_plan.h), a bench program of its own.
  const plan = join(opts.build, 'agentbox-bench-plan');
  if (!existsSync(plan)) return [missing(g, 'agentbox-bench-plan binary')];
  const args = [script, '--json', '--bin', bin, '--bench-plan', plan,
    ...(opts.quick ? ['--iterations', '50', '--cold', '10'] : [])];
  const r = run(process.execPath, args, 900_000);
  if (!r.ok) return [failed(g, g, r.error)];
  let j;
  try {
    j = JSON.parse(r.stdout);
  } catch {
    return [failed(g, g, 'printed no JSON object')];
  }
  if (Array.isArray(j.rows)) return j.rows.map((x) => row(g, x.name, x.agentbox, x.baseline ?? '', x.unit ?? '', x.ratio, x.target, x.met));
  const t = j.targets ?? {};
  const le = (v, limit) => (limit === undefined ? undefined : v <= limit);
  const tgt = (limit) => (limit === undefined ? undefined : `<= ${limit}`);
  return [
    row(g, 'exec /bin/true, warm session, via MCP SDK client', j.warm_exec_ms, `${j.direct_spawn_sync_ms} (spawnSync from node)`, 'ms', j.warm_ratio_vs_spawn_sync, tgt(t.warm_ratio), le(j.warm_ratio_vs_spawn_sync, t.warm_ratio)),
    row(g, 'exec /bin/true, warm session, vs async spawn', j.warm_exec_ms, `${j.direct_exec_file_ms} (execFile from node)`, 'ms', j.warm_ratio_vs_exec_file),
    ...Object.entries(j.cold_by_spare ?? { prepared: { cold_ms: j.cold_first_call_ms, bare_ms: j.bare_bwrap_ms, ratio: j.cold_ratio } }).map(([spare, c]) =>
      spare === 'warm'
        ? row(g, 'cold start via MCP, spare warm (extra): claimed spare + exec', c.cold_ms, `${c.bare_ms} (bare bwrap true)`, 'ms', c.ratio)
        : row(g, `cold start via MCP, spare ${spare}${spare === 'prepared' ? ' (default)' : ''}: new conversation + exec`, c.cold_ms,
              `${c.bare_ms} (bare bwrap true)`, 'ms', c.ratio, tgt(t.cold_ratio), le(c.ratio, t.cold_ratio))),
    row(g, 'server RSS (PSS)', j.server_rss_mib, `PSS ${j.server_pss_mib}`, 'MiB', undefined, tgt(t.server_rss_mib), le(j.server_rss_mib, t.server_rss_mib)),
    row(g, 'idle sandbox RSS (PSS), session shell alive', j.sandbox_rss_mib, `PSS ${j.sandbox_pss_mib}`, 'MiB', undefined, tgt(t.sandbox_mib), le(j.sandbox_rss_mib, t.sandbox_mib)),
    ...(j.sandbox_idle_shell_rss_mib === undefined ? [] : [
      row(g, 'idle sandbox RSS (PSS), shell idled out', j.sandbox_idle_shell_rss_mib, `PSS ${j.sandbox_idle_shell_pss_mib}`, 'MiB', undefined, tgt(t.sandbox_mib), le(j.sandbox_idle_shell_rss_mib, t.sandbox_mib)),
      row(g, 'exec after the shell idled out via MCP', j.exec_after_idle_shell_ms, `${j.exec_warm_same_server_ms} (warm exec, same server)`, 'ms', j.exec_after_idle_shell_ms / j.exec_warm_same_server_ms),
    ]),
  ];
}

/** bench/snapshot_bench (native) prints text lines: parse them, as for sandbox_bench. */
function snapshot(opts, buildDir) {
  const g = 'snapshot_bench';
  const native = join(buildDir, 'bench', 'snapshot_bench');
  if (!existsSync(join(HERE, 'snapshot_bench.cpp'))) return [missing(g, g)];
  if (!existsSync(native)) return [failed(g, g, `${native} not built`)];
  const work = mkdtempSync(join(tmpdir(), 'agentbox-snapshot-bench-'));
  try {
    const r = run(native, [join(work, 'w'), opts.quick ? '1' : '3'], 900_000);
    if (!r.ok) return [failed(g, g, r.error)];
    const rows = [];
    const size = /workspace: (\d+) entries, ([\d.]+) MB/.exec(r.stdout);
    const what = size ? ` (${size[1]} entries, ${size[2]} MB)` : '';
    for (const [label, key] of [['snapshot (create)', 'snapshot'], ['restore (extract)', 'restore']]) {
      const m = new RegExp(`${key} \\([a-z]+\\): agentbox +([\\d.]+) s +([\\d.]+) MB/s \\| tar --zstd +([\\d.]+) s +([\\d.]+) MB/s \\| ratio ([\\d.]+)x`).exec(r.stdout);
      rows.push(m ? row(g, `${label}${what} vs tar --zstd (tar time / agentbox time)`, +m[2], `${m[4]} (tar --zstd)`, 'MB/s', +m[5], '>= 1', +m[5] >= 1) : failed(g, label, 'output not understood'));
    }
    return rows;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** bench/freeze_bench (native): how long a snapshot of a running sandbox keeps it frozen. */
function freezeBench(opts, buildDir) {
  const g = 'freeze_bench';
  const native = join(buildDir, 'bench', 'freeze_bench');
  if (!existsSync(join(HERE, 'freeze_bench.cpp'))) return [missing(g, g)];
  if (!existsSync(native)) return [failed(g, g, `${native} not built`)];
  const r = run(native, [join(buildDir, 'agentbox-agent'), opts.quick ? '20000' : '100000', opts.quick ? '1' : '3'], 900_000);
  if (!r.ok) return [failed(g, g, r.error)];
  const m = /running sandbox, (\d+) files: frozen median (\d+) ms \(([^;]+); whole snapshot (\d+) ms\); tar --zstd -cf of the tree: median (\d+) ms; ratio ([\d.]+)/.exec(r.stdout);
  if (!m) return [failed(g, g, 'output not understood')];
  return [row(g, `snapshot of a running sandbox, ${m[1]} files: processes frozen (${m[3]}) vs tar --zstd -cf of the tree`, +m[2], `${m[5]} (tar --zstd -cf)`, 'ms', +m[6], '<= 1', +m[6] <= 1)];
}

/** bench/restore_bench (native): restore -> first command after an idle teardown, warm and from the archive. */
function restoreBench(opts, buildDir) {
  const g = 'restore_bench';
  const native = join(buildDir, 'bench', 'restore_bench');
  if (!existsSync(join(HERE, 'restore_bench.cpp'))) return [missing(g, g)];
  if (!existsSync(native)) return [failed(g, g, `${native} not built`)];
  const args = [join(buildDir, 'agentbox-agent'), opts.quick ? '10000' : '100000', '10000', opts.quick ? '1' : '3'];
  const r = run(native, args, 1_800_000);
  if (!r.ok) return [failed(g, g, r.error)];
  const m = /first command of (\d+) files: warm copy median (\d+) ms \(target <= 100\); from the archive median (\d+) ms; tar --zstd -xf of the same tree median (\d+) ms; archive\/tar ratio ([\d.]+)/.exec(r.stdout);
  if (!m) return [failed(g, g, 'output not understood')];
  return [
    row(g, `restore -> first command, ${m[1]} files of 10 KB, warm copy`, +m[2], `${m[4]} (tar --zstd -xf)`, 'ms',
        +(m[2] / m[4]).toFixed(3), '<= 100 ms', +m[2] <= 100),
    row(g, `restore -> first command, ${m[1]} files of 10 KB, from the archive`, +m[3], `${m[4]} (tar --zstd -xf)`, 'ms',
        +m[5], '<= 1', +m[5] <= 1),
  ];
}

// ---- the table ------------------------------------------------------------------------

function table(rows) {
  const cols = [
    ['benchmark', (r) => r.group],
    ['measure', (r) => r.name],
    ['agentbox', (r) => (r.note ? '' : `${r.agentbox ?? ''}`)],
    ['baseline', (r) => (r.note ? '' : `${r.baseline ?? ''}`)],
    ['unit', (r) => r.unit ?? ''],
    ['ratio', (r) => (r.note ? r.note : r.ratio === undefined ? '' : `${r.ratio}x`)],
    ['target', (r) => r.target ?? ''],
    ['met', (r) => (r.met === undefined ? '' : r.met ? 'yes' : 'NO')],
  ];
  const cells = rows.map((r) => cols.map(([, f]) => String(f(r))));
  const widths = cols.map(([h], i) => Math.min(70, Math.max(h.length, ...cells.map((c) => c[i].length))));
  const line = (vals) => `| ${vals.map((v, i) => v.padEnd(widths[i])).join(' | ')} |`;
  return [line(cols.map(([h]) => h)), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...cells.map(line)].join('\n');
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const bin = join(opts.build, 'agentbox');
  if (!existsSync(bin)) {
    console.error(`bench: ${bin} not found; build first (bench/run does)`);
    process.exit(2);
  }
  const started = new Date();
  // files_bench first: the others create and delete thousands of files (sandboxes, a
  // 20,000-file workspace), after which this host's disk stays slow for minutes (a file
  // create 20 → 600 µs); both file servers then mostly wait on the disk and the ratio
  // says little about either (docs/files.md, "The 5x target").
  const benches = [
    ['files_bench', () => teammate(opts, 'files_bench.mjs', bin)],
    ['startup', () => startup(opts, bin)],
    ['sandbox_bench', () => sandboxBench(opts, opts.build)],
    ['peers', () => peers(opts, bin)],
    ['exec_bench', () => execBench(opts, bin)],
    ['snapshot_bench', () => snapshot(opts, opts.build)],
    ['freeze_bench', () => freezeBench(opts, opts.build)],
    ['restore_bench', () => restoreBench(opts, opts.build)],
    ['terminal_bench', () => teammate(opts, 'terminal_bench.mjs', bin)],
  ];
  const rows = benches.filter(([name]) => !opts.only || opts.only.includes(name)).flatMap(([, f]) => f());
  const header = `agentbox benchmarks — ${started.toISOString()} — ${bin}${opts.quick ? ' (quick)' : ''}\n` +
    `ratio = agentbox/baseline for "vs direct/bare" rows, peer/agentbox for peer rows (higher is better there)`;
  console.log(`\n${header}\n${table(rows)}`);
  if (opts.json) writeFileSync(opts.json, JSON.stringify({ started, binary: bin, quick: opts.quick, rows }, null, 2));
  const misses = rows.filter((r) => r.met === false).length;
  const failures = rows.filter((r) => r.note?.startsWith('failed')).length;
  console.log(`\n${rows.length} rows; ${misses} targets not met; ${failures} benchmarks failed; ` +
    `${rows.filter((r) => r.note === 'not present').length} not present`);
  process.exit(failures ? 1 : 0);
}

main();
