// Progress the official MCP SDK client can take (docs/protocol.md,
// "Progress"). The SDK handles a response read in the same chunk as a
// progress notification first, drops the request's progress handler, then
// reports "Received a progress notification for an unknown token" through
// onerror (Claude Code logs it as "STDIO connection dropped"). Hundreds of
// execs with onprogress after listTools, as hosts call them: fast ones,
// slow ones, bursts, output right before the exit, several in flight.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';

import { startServer, tail } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);

// [command, runs over a second by itself]
const COMMANDS = [
  ['echo fast', false],
  ['printf "a\\nb\\nc\\n"', false],
  ['seq 1 3000', false],
  ['for i in 1 2 3 4 5; do echo burst $i; done; sleep 0.1; seq 1 200', false],
  ['sleep 0.3; echo almost', false],
  ['echo early; sleep 0.8; echo late', false],
  ['sleep 1.2; echo slow', true],
  ['for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.2; done', true],
  ['sleep 1.05; seq 1 500', true],
  ['echo start; sleep 1.1', true],
  ['for i in $(seq 1 12); do seq 1 100; sleep 0.1; done', true],
];

describe('progress notifications through the SDK client', () => {
  test('hundreds of execs with onprogress: no client error, progress for every one over a second', async (t) => {
    const server = await startServer({ testTools: false });
    t.after(() => server.close());
    const { client } = server;
    const errors = [];
    client.onerror = (error) => errors.push(String(error?.message ?? error));
    await client.listTools();

    const lanes = ['default', 's1', 's2', 's3', 's4', 's5'];
    for (const name of lanes.slice(1)) {
      await client.callTool({ name: 'session_create', arguments: { name } }, undefined, { timeout: 30_000 });
    }
    const outcomes = [];
    const run = async (session, command, slow) => {
      const seen = [];
      const started = performance.now();
      const result = await client.callTool({ name: 'exec', arguments: { command, session } }, undefined, {
        timeout: 60_000,
        onprogress: (p) => seen.push(p),
      });
      outcomes.push({ command, slow, ms: performance.now() - started, seen, result });
    };
    // Each lane runs its share in turn; in round 3 of 4 a lane also sends
    // three calls at once, so calls wait in their session's line.
    const perLane = 48;
    await Promise.all(
      lanes.map(async (session, lane) => {
        for (let i = 0; i < perLane; i++) {
          const [command, slow] = COMMANDS[(i * 7 + lane * 3) % COMMANDS.length];
          if (i % 20 === 15) {
            await Promise.all([run(session, command, slow), run(session, 'echo queued', false), run(session, 'true', false)]);
          } else {
            await run(session, command, slow);
          }
        }
      }),
    );

    // The server's request log (how long replies waited for the host to read
    // progress), for the figures in docs/protocol.md.
    if (process.env.PROGRESS_SERVER_LOG) writeFileSync(process.env.PROGRESS_SERVER_LOG, server.stderr());
    assert.ok(outcomes.length >= 300, `only ${outcomes.length} calls`);
    const unknown = errors.filter((e) => e.includes('unknown token')).length;
    assert.equal(
      errors.length,
      0,
      `${errors.length} client errors (${unknown} unknown token) in ${outcomes.length} calls:\n` +
        `${errors.slice(0, 3).join('\n').slice(0, 2000)}\n${tail(server.stderr())}`,
    );
    const missing = [];
    for (const o of outcomes) {
      assert.notEqual(o.result.isError, true, `${o.command}: ${o.result.content?.[0]?.text}`);
      // The server's clock starts when it reads the call: a call the client
      // saw take a little over a second may have taken just under one there.
      if ((o.slow || o.ms > 1250) && o.seen.length === 0) missing.push(`${o.command} (${o.ms.toFixed(0)} ms)`);
      for (let i = 1; i < o.seen.length; i++) {
        assert.ok(o.seen[i].progress > o.seen[i - 1].progress, `progress not increasing: ${JSON.stringify(o.seen)}`);
      }
    }
    assert.deepEqual(missing, [], 'calls over a second without a progress callback');
    const slow = outcomes.filter((o) => o.slow).length;
    const fastWithProgress = outcomes.filter((o) => o.ms < 900 && o.seen.length > 0).length;
    assert.equal(fastWithProgress, 0, 'a call under a second sent progress');
    console.log(`${outcomes.length} calls (${slow} over a second), ${errors.length} client errors`);
  });
});
