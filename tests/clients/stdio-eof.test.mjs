// Raw stdio (no SDK): a client that writes its requests and closes stdin at
// once (a piped `printf ... | agentbox serve`, or a host that gives up early).
// docs/protocol.md: end of stdin cancels in-flight calls (no replies) and the
// server exits with status 0. So: initialize (answered before anything else is
// read) must be answered, and the exit must be clean — never a signal.
// Repeated, because shutdown races are timing dependent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

import { AGENTBOX_BIN, requireBinary, tempDir } from './helpers.mjs';

const ROUNDS = 24;
const BATCH = 6;

const initialize = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'eof-test', version: '1' } },
};

function runOnce(lines) {
  const state = tempDir('agentbox-eof-');
  return new Promise((resolveRun) => {
    const child = spawn(AGENTBOX_BIN, ['serve', '--state-dir', state.dir, '--test-tools'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.on('close', (code, signal) => {
      clearTimeout(killer);
      state.cleanup();
      const messages = stdout
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l));
      resolveRun({ code, signal, messages, stderr });
    });
    child.stdin.end(lines.map((m) => JSON.stringify(m)).join('\n') + '\n');
  });
}

async function rounds(lines, expectIds) {
  requireBinary();
  const failures = [];
  for (let done = 0; done < ROUNDS; done += BATCH) {
    const runs = await Promise.all(Array.from({ length: BATCH }, () => runOnce(lines)));
    for (const run of runs) {
      const answered = new Set(run.messages.filter((m) => 'id' in m).map((m) => m.id));
      const missing = expectIds.filter((id) => !answered.has(id));
      if (run.code !== 0 || run.signal !== null || missing.length) {
        failures.push(
          `exit code=${run.code} signal=${run.signal} unanswered=${JSON.stringify(missing)}\n` +
            run.stderr.split('\n').slice(-4).join('\n'),
        );
      }
    }
  }
  assert.equal(failures.length, 0, `${failures.length}/${ROUNDS} runs went wrong; first:\n${failures[0]}`);
}

test('EOF right after start: exit 0', { timeout: 30_000 }, async () => {
  await rounds([], []);
});

test('EOF right after initialize: answered, exit 0', { timeout: 30_000 }, async () => {
  await rounds([initialize], [1]);
});

test('EOF right after quick tool calls: exit 0', { timeout: 30_000 }, async () => {
  await rounds(
    [
      initialize,
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'sandbox_status', arguments: {} } },
      { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'debug_sleep', arguments: { steps: 'x', step_ms: 1 } } },
    ],
    [1],
  );
});
