// The README's quick start as a new user meets it: `agentbox serve` with no
// --state-dir, so the default ~/.local/state/agentbox, in a fresh 0700 HOME
// (root's /root is 0700; hosts may hand the server such a HOME) and no
// XDG_STATE_HOME, driven by the official SDK client; then `agentbox doctor`
// in that same HOME. As root, also as the normal user agentbox-test (made if
// missing, as tests/sandbox/run_unprivileged.sh does). docs/sandbox.md
// "State directory anywhere".
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';


import { AGENTBOX_BIN, connectStdio, requireBinary, tail } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL_TIMEOUT_MS = 60_000;
const USER = 'agentbox-test';
const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const isRoot = process.getuid() === 0;

function run(command, args, options = {}) {
  return spawnSync(command, args, { encoding: 'utf8', timeout: 60_000, ...options });
}

/** The uid and gid of the normal user, created when missing. */
function normalUser() {
  if (run('id', ['-u', USER]).status !== 0) {
    // A group of that name left behind (its user deleted by hand) is reused.
    const group = run('getent', ['group', USER]).status === 0 ? ['-g', USER] : [];
    const made = run('useradd', ['--create-home', '--shell', '/bin/bash', ...group, USER]);
    assert.equal(made.status, 0, `cannot create the user ${USER}: ${made.stderr}`);
  }
  return { uid: Number(run('id', ['-u', USER]).stdout), gid: Number(run('id', ['-g', USER]).stdout) };
}

/**
 * Who runs the server: this process's user, or (as root) the normal user
 * through runuser with a clean environment. Returns how to start a command
 * as them with HOME set and nothing else of ours, and a cleanup.
 */
function account(asUser) {
  requireBinary();
  const home = mkdtempSync(join(tmpdir(), 'agentbox-default-home-'));
  chmodSync(home, 0o700);
  const made = [home];
  let bin = AGENTBOX_BIN;
  let owner = null;
  if (asUser) {
    owner = normalUser();
    chownSync(home, owner.uid, owner.gid);
    // A build under /root is out of the user's reach: copies (with the agent next to it) in a directory it can read.
    if (run('runuser', ['-u', USER, '--', 'test', '-x', bin]).status !== 0) {
      const copies = mkdtempSync(join(tmpdir(), 'agentbox-default-bin-'));
      chmodSync(copies, 0o755);
      made.push(copies);
      for (const name of [basename(bin), 'agentbox-agent']) {
        const from = join(dirname(AGENTBOX_BIN), name);
        if (existsSync(from)) copyFileSync(from, join(copies, name));
        if (existsSync(join(copies, name))) chmodSync(join(copies, name), 0o755);
      }
      bin = join(copies, basename(bin));
    }
  }
  const env = { HOME: home, PATH, LANG: 'C.UTF-8' };  // no XDG_STATE_HOME
  const command = (args) =>
    asUser
      ? { command: 'runuser', args: ['-u', USER, '--', 'env', '-i', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), bin, ...args], env: { PATH } }
      : { command: bin, args, env };
  return {
    home,
    owner,
    stateDir: join(home, '.local', 'state', 'agentbox'),
    command,
    cleanup: () => made.forEach((dir) => rmSync(dir, { recursive: true, force: true })),
  };
}

function serveDefaults(who) {
  const { command, args, env } = who.command(['serve']);
  return connectStdio({ command, args, env, cwd: who.home, name: 'agentbox-defaults-test',
    timeout: CALL_TIMEOUT_MS, exitWaitMs: 10_000 });
}

async function ok(server, name, args) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS });
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)} failed: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
  return r;
}

function doctor(who, extra = []) {
  const { command, args, env } = who.command(['doctor', ...extra]);
  return run(command, args, { env, cwd: who.home });
}

const accounts = isRoot ? [['root', false], [USER, true]] : [['this unprivileged user', false]];

for (const [label, asUser] of accounts) {
  describe(`defaults as ${label}, HOME a fresh 0700 directory`, () => {
    test('serve with no --state-dir: listTools, exec, file_write, file_read', async (t) => {
      const who = account(asUser);
      let server;
      t.after(async () => {
        await server?.close();
        who.cleanup();
      });
      server = await serveDefaults(who);

      const { tools } = await server.client.listTools();
      for (const name of ['exec', 'file_write', 'file_read']) assert.ok(tools.some((tool) => tool.name === name), `no ${name} tool`);
      const echo = await ok(server, 'exec', { command: 'echo hi' });
      assert.equal(echo.structuredContent.stdout, 'hi\n');
      assert.equal(echo.structuredContent.exit_code, 0);
      await ok(server, 'file_write', { path: '/workspace/hello.txt', content: 'hello from the defaults\n' });
      const read = await ok(server, 'file_read', { path: '/workspace/hello.txt' });
      assert.equal(read.structuredContent.content, 'hello from the defaults\n');
      assert.match(read.content[0].text, /hello from the defaults/);
      // sandbox_status says which limits hold, and they are the ones that do:
      // a root server's workspace is its own filesystem, a normal user's is not.
      const status = (await ok(server, 'sandbox_status', {})).structuredContent;
      const limits = status.limits;
      assert.ok(limits, `no limits in ${JSON.stringify(status)}`);
      assert.equal(limits.tmpfs.bytes, 64 * 1024 * 1024);
      const rootServer = isRoot && !asUser;
      assert.equal(limits.workspace.enforced, rootServer ? 'filesystem' : 'none', JSON.stringify(limits));
      if (rootServer) assert.equal(limits.workspace.bytes, 10 * 1024 ** 3);
      else assert.match(limits.workspace.why, /./);
      assert.match(limits.memory.enforced, rootServer ? /^cgroup$/ : /^(cgroup|per-process)$/);
      const shm = await ok(server, 'exec', { command: 'df -B1 --output=size /dev/shm | tail -1' });
      assert.equal(Number(shm.structuredContent.stdout.trim()), limits.tmpfs.bytes);
      // It was the default state directory that served.
      assert.ok(existsSync(join(who.stateDir, 'sandboxes')), `no ${who.stateDir}/sandboxes\n${tail(server.stderr())}`);
    });

    test('doctor with no --state-dir checks that directory by starting a sandbox in it', (t) => {
      const who = account(asUser);
      t.after(who.cleanup);
      const r = doctor(who);
      assert.equal(r.status, 0, `doctor failed:\n${r.stdout}\n${tail(r.stderr)}`);
      assert.ok(r.stdout.includes(`started a sandbox in ${who.stateDir}`), r.stdout);
      assert.match(r.stdout, /agentbox can run sandboxes on this host/);
      // Not built (issue 14 point 7): doctor says whether CRIU would even work here, and why not.
      assert.match(r.stdout, /^warn +processes across teardown \(CRIU\): not (used|available): .*on-restore/m, r.stdout);
    });

    test('doctor on a state directory that cannot be made fails, naming it and why', (t) => {
      const who = account(asUser);
      t.after(who.cleanup);
      const file = join(who.home, 'a-file');
      writeFileSync(file, 'not a directory\n');
      if (who.owner) chownSync(file, who.owner.uid, who.owner.gid);
      const stateDir = join(file, 'state');
      const r = doctor(who, ['--state-dir', stateDir]);
      assert.notEqual(r.status, 0, r.stdout);
      assert.match(r.stdout, /FAIL/);
      assert.ok(r.stdout.includes(stateDir), r.stdout);
      assert.match(r.stdout, /Not a directory/);
    });

    test('doctor on a writable state directory where no sandbox can start fails, naming it and why', (t) => {
      const who = account(asUser);
      t.after(who.cleanup);
      // Its sandboxes/ is a file: the directory is there and writable, but
      // no sandbox directory can be made in it, by serve or by doctor.
      const stateDir = join(who.home, 'state');
      mkdirSync(stateDir, { mode: 0o700 });
      writeFileSync(join(stateDir, 'sandboxes'), '');
      if (who.owner) for (const p of [stateDir, join(stateDir, 'sandboxes')]) chownSync(p, who.owner.uid, who.owner.gid);
      const r = doctor(who, ['--state-dir', stateDir]);
      assert.notEqual(r.status, 0, r.stdout);
      assert.match(r.stdout, /^ok +state directory: .* is writable$/m);
      assert.match(r.stdout, /^FAIL +sandbox: cannot start a sandbox in /m);
      assert.ok(r.stdout.includes(stateDir), r.stdout);
      assert.match(r.stdout, /Not a directory/);
    });
  });
}
