// Runs the MCP Inspector CLI (the devDependency pinned in package.json, found
// by npx in this package's node_modules) against the built agentbox server, in
// the legacy (initialize, 2025-11-25) and modern (2026-07-28, server/discover)
// protocol eras. The server records its traffic (--record) so each test can
// check which era was actually spoken, not just that the output looked right.
import { describe, test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

import { AGENTBOX_BIN, PACKAGE_DIR, requireBinary, tempDir } from './helpers.mjs';

const RUN_TIMEOUT_MS = 20_000;

/** Runs `npx @modelcontextprotocol/inspector ARGS` in this package; resolves with its outcome. */
function npxInspector(args, home) {
  return new Promise((resolveRun, rejectRun) => {
    const child = spawn('npx', ['@modelcontextprotocol/inspector', ...args], {
      cwd: PACKAGE_DIR,
      // Own process group so a hung run can be killed with everything it started.
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        // Keep the Inspector's catalog, client config and secrets out of the real home.
        HOME: home,
        MCP_CATALOG_PATH: join(home, 'mcp.json'),
        MCP_CLIENT_CONFIG_PATH: join(home, 'client.json'),
        MCP_INSPECTOR_SECRET_STORE: 'memory',
        npm_config_update_notifier: 'false',
        npm_config_cache: join(home, '.npm'),
        NO_COLOR: '1',
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, RUN_TIMEOUT_MS);
    child.on('error', (err) => {
      clearTimeout(timer);
      rejectRun(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolveRun({ code, signal, stdout, stderr, timedOut });
    });
  });
}

function describeRun(run) {
  const errTail = run.stderr
    .split('\n')
    .filter((l) => !/^\[\d{4}-\d\d-\d\dT/.test(l)) // drop the server's own log lines
    .slice(-20)
    .join('\n');
  return `exit=${run.code} signal=${run.signal} timedOut=${run.timedOut}\nstdout: ${run.stdout.slice(0, 2000)}\nstderr: ${errTail}`;
}

/**
 * Runs the Inspector CLI against a fresh server; returns the parsed JSON output
 * and the server's recorded transcript (array of {in|out: message}).
 */
async function inspect(era, methodArgs) {
  const state = tempDir('agentbox-insp-state-');
  const home = tempDir('agentbox-insp-home-');
  try {
    const record = join(state.dir, 'transcript.jsonl');
    const args = ['--cli', '--format', 'json'];
    if (era) args.push('--protocol-era', era);
    args.push(...methodArgs, '--', AGENTBOX_BIN, 'serve', '--state-dir', state.dir, '--record', record);
    const run = await npxInspector(args, home.dir);
    assert.equal(run.timedOut, false, `inspector did not finish in ${RUN_TIMEOUT_MS} ms\n${describeRun(run)}`);
    assert.equal(run.code, 0, `inspector failed\n${describeRun(run)}`);
    let output;
    try {
      output = JSON.parse(run.stdout.trim());
    } catch (err) {
      assert.fail(`inspector stdout is not one JSON object (${err.message})\n${describeRun(run)}`);
    }
    assert.ok(existsSync(record), 'server wrote no transcript');
    const transcript = readFileSync(record, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line));
    return { output, transcript, run };
  } finally {
    state.cleanup();
    home.cleanup();
  }
}

const incoming = (transcript) => transcript.filter((e) => e.in).map((e) => e.in);
const outgoing = (transcript) => transcript.filter((e) => e.out).map((e) => e.out);

/** Checks the transcript shows the era the test asked for. */
function assertEra(era, transcript, method) {
  const ins = incoming(transcript);
  const outs = outgoing(transcript);
  const methods = ins.map((m) => m.method);
  const request = ins.find((m) => m.method === method);
  assert.ok(request, `server never received ${method}; got ${methods.join(', ')}`);
  const reply = outs.find((m) => m.id === request.id);
  assert.ok(reply && reply.result, `server did not answer ${method}: ${JSON.stringify(reply)}`);
  if (era === 'modern') {
    assert.ok(methods.includes('server/discover'), `no server/discover in ${methods.join(', ')}`);
    assert.ok(!methods.includes('initialize'), 'modern era must not initialize');
    assert.equal(request.params?._meta?.['io.modelcontextprotocol/protocolVersion'], '2026-07-28');
    assert.equal(reply.result.resultType, 'complete', `2026-07-28 results carry resultType: ${JSON.stringify(reply.result)}`);
    const discover = ins.find((m) => m.method === 'server/discover');
    const discovered = outs.find((m) => m.id === discover.id);
    assert.equal(discovered?.result?._meta?.['io.modelcontextprotocol/serverInfo']?.name, 'agentbox');
  } else {
    const init = ins.find((m) => m.method === 'initialize');
    assert.ok(init, `legacy era must initialize; got ${methods.join(', ')}`);
    const initReply = outs.find((m) => m.id === init.id);
    assert.equal(initReply?.result?.protocolVersion, '2025-11-25');
    assert.equal(initReply?.result?.serverInfo?.name, 'agentbox');
  }
}

let helpText = '';

describe('MCP Inspector CLI', { concurrency: true }, () => {
  before(async () => {
    requireBinary();
    const home = tempDir('agentbox-insp-home-');
    try {
      const run = await npxInspector(['--cli', '--help'], home.dir);
      helpText = run.stdout + run.stderr;
    } finally {
      home.cleanup();
    }
  });

  test('the installed Inspector has the flags these tests rely on', () => {
    for (const flag of ['--method', '--tool-name', '--tool-args-json', '--format']) {
      assert.ok(helpText.includes(flag), `inspector --cli --help does not mention ${flag}:\n${helpText.slice(0, 2000)}`);
    }
  });

  for (const era of ['legacy', 'modern']) {
    const requireEra = () => {
      if (!helpText.includes('--protocol-era')) {
        assert.fail(
          `the installed @modelcontextprotocol/inspector has no --protocol-era flag, so the ` +
            `${era} (${era === 'modern' ? '2026-07-28' : '2025-11-25'}) era cannot be tested; ` +
            'pin an Inspector version that supports it',
        );
      }
    };

    test(`[${era}] tools/list`, { timeout: 30_000 }, async () => {
      requireEra();
      const { output, transcript } = await inspect(era, ['--method', 'tools/list']);
      const tools = output.result?.tools ?? output.tools;
      assert.ok(Array.isArray(tools), `no tools array in ${JSON.stringify(output).slice(0, 500)}`);
      const status = tools.find((t) => t.name === 'sandbox_status');
      assert.ok(status, `sandbox_status missing: ${tools.map((t) => t.name).join(', ')}`);
      assert.equal(status.inputSchema?.type, 'object');
      assert.equal(status.outputSchema?.type, 'object');
      assert.ok(status.title, 'title missing');
      assert.equal(status.annotations?.readOnlyHint, true);
      assert.ok(!tools.some((t) => t.name === 'debug_sleep'), 'debug_sleep listed without --test-tools');
      assertEra(era, transcript, 'tools/list');
    });

    test(`[${era}] tools/call sandbox_status`, { timeout: 30_000 }, async () => {
      requireEra();
      const { output, transcript } = await inspect(era, [
        '--method',
        'tools/call',
        '--tool-name',
        'sandbox_status',
        '--tool-args-json',
        '{}',
      ]);
      const result = output.result ?? output;
      assert.notEqual(result.isError, true, JSON.stringify(result));
      assert.equal(result.structuredContent?.state, 'none');
      assert.equal(result.structuredContent?.conversation, 'default');
      assert.ok(
        result.content?.some((c) => c.type === 'text' && c.text.length > 0),
        `no text content: ${JSON.stringify(result)}`,
      );
      assertEra(era, transcript, 'tools/call');
    });
  }
});
