// tools/list as hosts take it (docs/protocol.md, "Tool schemas"): Gemini CLI
// and Qwen Code print a warning on the user's terminal for every union type
// ("type": [..]) in an input schema, some hosts refuse a top-level oneOf, and
// every character of tools/list is paid by every conversation, so `session`
// appears only on the tools that run or resolve paths in one. The Inspector's
// --strict portability check must find nothing.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';

import { AGENTBOX_BIN, PACKAGE_DIR, runInspectorCli, startServer, tail, tempDir } from './helpers.mjs';

// The tools that take a session: they run in one or resolve relative paths
// against its working directory. session_delete names the session it deletes.
const SESSION_TOOLS = new Set([
  'exec', 'process_start', 'session_delete', 'terminal_start',
  'file_read', 'file_write', 'file_edit', 'file_list', 'file_stat',
  'file_mkdir', 'file_delete', 'file_move', 'file_search', 'file_watch',
]);

/** Every place in `schema` where "type" is an array, as JSON paths. */
function unionTypes(schema, path = 'inputSchema') {
  if (!schema || typeof schema !== 'object') return [];
  const found = [];
  if (Array.isArray(schema.type)) found.push(`${path}.type = ${JSON.stringify(schema.type)}`);
  for (const [key, value] of Object.entries(schema)) {
    if (value && typeof value === 'object') found.push(...unionTypes(value, `${path}.${key}`));
  }
  return found;
}

let tools = [];
let server;

describe('tools/list', () => {
  before(async () => {
    server = await startServer({ testTools: false });
    ({ tools } = await server.client.listTools());
  });
  after(() => server?.close());

  test('no input schema has a union type or a top-level oneOf/anyOf/allOf', () => {
    const problems = [];
    for (const tool of tools) {
      for (const p of unionTypes(tool.inputSchema)) problems.push(`${tool.name}: ${p}`);
      for (const key of ['oneOf', 'anyOf', 'allOf', 'not'])
        if (key in tool.inputSchema) problems.push(`${tool.name}: top-level ${key}`);
      if (tool.inputSchema.type !== 'object') problems.push(`${tool.name}: inputSchema.type is not "object"`);
    }
    assert.deepEqual(problems, []);
  });

  test('session appears only on the tools that use it; conversation on every tool', () => {
    const withSession = tools.filter((t) => 'session' in (t.inputSchema.properties ?? {})).map((t) => t.name).sort();
    assert.deepEqual(withSession, [...SESSION_TOOLS].sort());
    const without = tools.filter((t) => !('conversation' in (t.inputSchema.properties ?? {}))).map((t) => t.name);
    assert.deepEqual(without, [], 'every tool is sandbox-scoped and takes conversation');
  });

  test('no parameter is documented as ignored', () => {
    const ignored = [];
    for (const tool of tools)
      for (const [name, p] of Object.entries(tool.inputSchema.properties ?? {}))
        if (/\bignored\b/i.test(p.description ?? '')) ignored.push(`${tool.name}.${name}`);
    assert.deepEqual(ignored, []);
  });

  test('the listing stays small (every conversation pays for it)', () => {
    const chars = JSON.stringify({ tools }).length;
    console.log(`tools/list: ${tools.length} tools, ${chars} characters`);
    // 34,832 characters before issue 11, 28,876 after its sweep; 30,575 with
    // issue 14's restart, frozen_ms/freeze and the status's unknown state.
    // The bound leaves room for a few new optional properties, not for
    // another round of long descriptions or per-tool parameters that do
    // nothing; a new tool moves it on purpose, in the commit that adds it:
    // sandbox_fork (issue 14) added ~1,300 (31,881 with it); network_status
    // and exec's network_denied (issue 15) ~1,650 (33,536 with them); the
    // six terminal_* tools (issue 16) ~8,800 (42,340 with them; their output
    // schemas repeat one shape and are the first place to trim); exec's
    // yield_ms and file_watch/file_changes (issue 16) ~2,900, with terminal_write's
    // output descriptions and the pattern descriptions cut (45,218 with them);
    // execution.taskSupport on the five task tools ~200 (45,413);
    // port_expose, port_list and port_unexpose (issue 17) ~2,950 (48,369);
    // code_run and code_context_create/list/delete (issue 17) ~4,150
    // (code_run's output schema is most of it).
    assert.ok(chars < 52_900, `tools/list is ${chars} characters`);
  });
});

/** `inspector --cli --method tools/list --strict`; resolves with its outcome. */

describe('MCP Inspector CLI --strict', () => {
  test('tools/list has no portability warnings', { timeout: 40_000 }, async () => {
    const run = await runInspectorCli(['--method', 'tools/list', '--strict']);
    // The server's own log lines start with a timestamp; the rest is the Inspector's.
    const report = run.stderr.split('\n').filter((l) => l.trim() && !/^\[\d{4}-\d\d-\d\dT/.test(l));
    const all = `exit=${run.code}\n${report.join('\n')}\nstdout tail: ${tail(run.stdout, 5)}`;
    assert.equal(run.code, 0, all);
    assert.ok(run.stdout.includes('sandbox_status'), `no tool listing on stdout\n${all}`);
    assert.deepEqual(report.filter((l) => /warn|error|portab|issue/i.test(l)), [], all);
  });
});
