// Every error path of every tool, through the official SDK client AFTER
// listTools, as every host calls them. Once the SDK has listed tools it checks
// structuredContent against the tool's outputSchema whenever it is present,
// error or not; an error object there turns the model's "file not found" into
// "MCP error -32602: Structured content does not match the tool's output
// schema" (docs/protocol.md, "Error results"). So each error must be: a
// resolved call, isError true, no structuredContent, a text that starts with
// its code, and _meta["agentbox/error"].code equal to that code. Every code
// seen must be one docs/protocol.md documents.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { McpError, ErrorCode } from '@modelcontextprotocol/sdk/types.js';

import { AGENTBOX_BIN, PACKAGE_DIR, runInspectorCli, startServer, tail, tempDir } from './helpers.mjs';

const CALL_TIMEOUT_MS = 20_000;

/** The codes docs/protocol.md lists in its table of error codes. */
function documentedCodes() {
  const doc = readFileSync(join(PACKAGE_DIR, '../../docs/protocol.md'), 'utf8');
  const section = doc.split('## Error results')[1]?.split('\n## ')[0] ?? '';
  const codes = new Set();
  for (const m of section.matchAll(/^\| `([A-Z_]+)` \|/gm)) codes.add(m[1]);
  return codes;
}

let server;
let client;
const seen = new Map(); // code -> tools that gave it

async function call(name, args) {
  return client.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS });
}

/** Calls `name` and checks the result is a well-formed error result with `code`. */
async function expectError(name, args, code, { text } = {}) {
  let result;
  try {
    result = await call(name, args);
  } catch (err) {
    assert.fail(`${name} ${JSON.stringify(args)} threw instead of returning an error result: ${err.message}\n` +
      tail(server.stderr(), 10));
  }
  const shown = JSON.stringify(result).slice(0, 1500);
  assert.equal(result.isError, true, `${name} ${JSON.stringify(args)} is not an error: ${shown}`);
  assert.equal(result.structuredContent, undefined, `an error result has no structuredContent: ${shown}`);
  assert.equal(result.content?.length, 1, shown);
  assert.equal(result.content[0].type, 'text', shown);
  const message = result.content[0].text;
  assert.ok(message.startsWith(`${code}: `), `${name}: text does not start with "${code}: ": ${shown}`);
  const meta = result._meta?.['agentbox/error'];
  assert.equal(meta?.code, code, `${name}: _meta["agentbox/error"].code: ${shown}`);
  assert.equal(typeof meta.message, 'string', shown);
  assert.ok(message.includes(meta.message), `${name}: the text carries the message: ${shown}`);
  if (text) assert.match(message, text, `${name}: ${shown}`);
  if (!seen.has(code)) seen.set(code, new Set());
  seen.get(code).add(name);
  return { result, message, meta };
}

async function expectOk(name, args) {
  const result = await call(name, args);
  assert.notEqual(result.isError, true, `${name} ${JSON.stringify(args)}: ${JSON.stringify(result).slice(0, 800)}`);
  return result;
}

describe('every tool error reaches an SDK client as an error result', { concurrency: false }, () => {
  before(async () => {
    server = await startServer({ testTools: false });
    client = server.client;
    // What every host does first; it arms the SDK's outputSchema check.
    const { tools } = await client.listTools();
    assert.ok(tools.every((t) => t.outputSchema), 'every tool declares an outputSchema');
    await expectOk('exec', { command: 'mkdir -p /workspace/src && printf "a\\na\\n" > /workspace/src/dup.txt && printf "\\0\\1" > /workspace/bin' });
    await expectOk('session_create', { name: 'insrc', cwd: '/workspace/src' });
  });
  after(async () => {
    await server?.close();
  });

  test('argument errors of several kinds are INVALID_ARGUMENTS naming the field', async () => {
    await expectError('file_read', {}, 'INVALID_ARGUMENTS', { text: /arguments\.path.*required/ });
    await expectError('file_read', { path: 7 }, 'INVALID_ARGUMENTS', { text: /arguments\.path/ });
    await expectError('file_read', { path: 'a', bogus: 1 }, 'INVALID_ARGUMENTS', { text: /arguments\.bogus/ });
    await expectError('file_read', { path: 'a', offset: -1 }, 'INVALID_ARGUMENTS', { text: /arguments\.offset/ });
    await expectError('file_read', { path: 'a', encoding: 'latin1' }, 'INVALID_ARGUMENTS', { text: /arguments\.encoding/ });
    await expectError('file_read', { path: '' }, 'INVALID_ARGUMENTS', { text: /path/ });
    await expectError('file_read', { path: 'src/dup.txt', offset: 1, start_line: 1 }, 'INVALID_ARGUMENTS');
    await expectError('exec', { command: 'true', timeout_ms: 10 * 3600 * 1000 }, 'INVALID_ARGUMENTS', { text: /timeout_ms/ });
    await expectError('exec', { command: 'true', env: { A: 1 } }, 'INVALID_ARGUMENTS', { text: /env\.A/ });
    await expectError('exec', { cwd: '/tmp' }, 'INVALID_ARGUMENTS', { text: /command/ });
    await expectError('file_write', { path: 'x', content: '%%%', encoding: 'base64' }, 'INVALID_ARGUMENTS', { text: /base64/ });
    await expectError('file_write', { path: 'x', content: 'y', mode: 'truncate' }, 'INVALID_ARGUMENTS', { text: /mode/ });
    await expectError('file_edit', { path: 'src/dup.txt', old_string: 'a', new_string: 'a' }, 'INVALID_ARGUMENTS');
    await expectError('file_search', { pattern: '(' }, 'INVALID_ARGUMENTS', { text: /pattern/ });
    await expectError('process_wait', { process_id: 'p1', port: 70000 }, 'INVALID_ARGUMENTS', { text: /port/ });
    await expectError('process_kill', { process_id: 'p1', signal: ['SIGTERM'] }, 'INVALID_ARGUMENTS', { text: /signal/ });
    await expectError('session_create', { name: 'bad name!' }, 'INVALID_ARGUMENTS');
    await expectError('session_delete', { session: 'default' }, 'INVALID_ARGUMENTS');
    await expectError('sandbox_status', { verbose: true }, 'INVALID_ARGUMENTS', { text: /verbose/ });
    await expectError('snapshot_list', { limit: 'x' }, 'INVALID_ARGUMENTS');
    await expectError('session_list', { all: true }, 'INVALID_ARGUMENTS');
    await expectError('process_list', { all: true }, 'INVALID_ARGUMENTS');
    await expectError('sandbox_snapshot', { label: 5 }, 'INVALID_ARGUMENTS', { text: /label/ });
    await expectError('sandbox_destroy', { keep_snapshots: 'yes' }, 'INVALID_ARGUMENTS', { text: /keep_snapshots/ });
    await expectError('sandbox_restore', { snapshot: 3 }, 'INVALID_ARGUMENTS', { text: /snapshot/ });
  });

  test('file_read: missing file, directory, binary file', async () => {
    const { message } = await expectError('file_read', { path: 'nope.txt', session: 'insrc' }, 'FILE_NOT_FOUND');
    assert.match(message, /\/workspace\/src\/nope\.txt/);
    assert.match(message, /relative paths resolve against the session's cwd \/workspace\/src/);
    await expectError('file_read', { path: '/workspace' }, 'IS_DIRECTORY');
    await expectError('file_read', { path: '/workspace/bin' }, 'BINARY_FILE', { text: /base64/ });
    await expectError('file_read', { path: 'x', session: 'ghost' }, 'SESSION_NOT_FOUND', { text: /ghost/ });
  });

  test('file_write: exists, not a directory, outside the sandbox, is a directory', async () => {
    await expectError('file_write', { path: 'dup.txt', content: 'x', mode: 'create', session: 'insrc' }, 'FILE_EXISTS',
      { text: /cwd \/workspace\/src/ });
    await expectError('file_write', { path: '/workspace/bin/child', content: 'x' }, 'NOT_DIRECTORY');
    await expectError('file_write', { path: '/usr/local/evil', content: 'x' }, 'PATH_OUTSIDE_SANDBOX');
    await expectError('file_write', { path: '/workspace/src', content: 'x' }, 'IS_DIRECTORY');
  });

  test('file_edit: ambiguous match, no match, missing file', async () => {
    await expectError('file_edit', { path: 'src/dup.txt', old_string: 'a', new_string: 'b' }, 'AMBIGUOUS_MATCH',
      { text: /replace_all/ });
    await expectError('file_edit', { path: 'src/dup.txt', old_string: 'zzz', new_string: 'b' }, 'NO_MATCH');
    await expectError('file_edit', { path: 'gone.txt', old_string: 'a', new_string: 'b' }, 'FILE_NOT_FOUND',
      { text: /cwd \/workspace\)/ });
  });

  test('file_list, file_stat, file_search: missing, not a directory', async () => {
    await expectError('file_list', { path: 'nowhere' }, 'FILE_NOT_FOUND', { text: /cwd \/workspace/ });
    await expectError('file_list', { path: '/workspace/bin' }, 'NOT_DIRECTORY');
    await expectError('file_search', { pattern: 'a', path: '/workspace/nowhere' }, 'FILE_NOT_FOUND');
    await expectError('file_stat', { path: 'x', session: 'ghost' }, 'SESSION_NOT_FOUND');
  });

  test('file_mkdir, file_delete, file_move', async () => {
    await expectError('file_mkdir', { path: 'dup.txt', session: 'insrc' }, 'FILE_EXISTS');
    await expectError('file_mkdir', { path: '/workspace/a/b/c' }, 'FILE_NOT_FOUND', { text: /recursive/ });
    await expectError('file_delete', { path: 'nothing.txt' }, 'FILE_NOT_FOUND', { text: /cwd \/workspace/ });
    await expectError('file_delete', { path: '/workspace/src' }, 'IS_DIRECTORY', { text: /recursive/ });
    await expectError('file_delete', { path: '/workspace', recursive: true }, 'PERMISSION_DENIED');
    await expectError('file_move', { from: 'nothing.txt', to: 'b.txt' }, 'FILE_NOT_FOUND');
    await expectError('file_move', { from: '/workspace/bin', to: '/workspace/src/dup.txt' }, 'FILE_EXISTS',
      { text: /overwrite/ });
    await expectError('file_move', { from: '/workspace/src', to: '/workspace/src/inner' }, 'INVALID_ARGUMENTS');
  });

  test('exec and process_start: bad cwd, unknown session', async () => {
    await expectError('exec', { command: 'true', cwd: '/nonexistent' }, 'INVALID_CWD', { text: /\/nonexistent/ });
    await expectError('exec', { command: 'true', session: 'ghost' }, 'SESSION_NOT_FOUND', { text: /session_create/ });
    await expectError('process_start', { command: 'true', cwd: '/nonexistent' }, 'INVALID_CWD');
    await expectError('process_start', { command: 'true', session: 'ghost' }, 'SESSION_NOT_FOUND');
  });

  test('process tools: unknown process, bad pattern, unknown signal, closed stdin', async () => {
    for (const [name, extra] of [['process_output', {}], ['process_wait', { timeout_ms: 10 }],
      ['process_kill', {}], ['process_write', { data: 'x' }]]) {
      await expectError(name, { process_id: 'p999', ...extra }, 'PROCESS_NOT_FOUND', { text: /process_list/ });
    }
    const started = await expectOk('process_start', { command: 'cat' });
    const id = started.structuredContent.process_id;
    await expectError('process_output', { process_id: id, pattern: '(' }, 'INVALID_ARGUMENTS', { text: /pattern/ });
    await expectError('process_kill', { process_id: id, signal: 'SIGNOPE' }, 'INVALID_ARGUMENTS', { text: /signal/ });
    await expectOk('process_write', { process_id: id, data: '', eof: true });
    await expectError('process_write', { process_id: id, data: 'late' }, 'INVALID_ARGUMENTS', { text: /closed/ });
    await expectOk('process_kill', { process_id: id, signal: 'SIGKILL' });
  });

  test('process_kill takes a signal by name or by number', async () => {
    const started = await expectOk('process_start', { command: 'sleep 30' });
    const id = started.structuredContent.process_id;
    const killed = await expectOk('process_kill', { process_id: id, signal: '9' });
    assert.equal(killed.structuredContent.status, 'killed');
    assert.equal(killed.structuredContent.signal, 'SIGKILL');
  });

  test('sessions: exists, unknown, bad cwd', async () => {
    await expectError('session_create', { name: 'insrc' }, 'SESSION_EXISTS');
    await expectError('session_create', { name: 'elsewhere', cwd: '/nonexistent' }, 'INVALID_CWD');
    await expectError('session_delete', { session: 'ghost' }, 'SESSION_NOT_FOUND');
  });

  test('snapshots: unknown snapshot', async () => {
    await expectError('sandbox_restore', { snapshot: 'snap-does-not-exist' }, 'SNAPSHOT_NOT_FOUND',
      { text: /snapshot_list/ });
  });

  test('an unknown tool is still a JSON-RPC error (-32602)', async () => {
    await assert.rejects(call('no_such_tool', {}), (err) => err instanceof McpError && err.code === ErrorCode.InvalidParams);
  });

  test('every code seen is documented in docs/protocol.md', () => {
    const documented = documentedCodes();
    assert.ok(documented.size >= 15, `docs/protocol.md lists only ${[...documented].join(', ')}`);
    for (const [code, tools] of seen)
      assert.ok(documented.has(code), `${code} (from ${[...tools].join(', ')}) is not in docs/protocol.md`);
  });
});

/** Runs the Inspector CLI from this package; resolves with its outcome. */

describe('MCP Inspector CLI shows a tool error as the error', () => {
  test('file_read of a missing file', { timeout: 40_000 }, async () => {
    const run = await runInspectorCli(['--format', 'json', '--method', 'tools/call', '--tool-name', 'file_read',
      '--tool-args-json', '{"path":"missing.txt"}']);
    const all = `exit=${run.code}\nstdout: ${run.stdout.slice(0, 2000)}\nstderr: ${tail(run.stderr, 15)}`;
    assert.doesNotMatch(run.stdout + run.stderr, /Structured content does not match|-32602/, all);
    let output;
    try {
      output = JSON.parse(run.stdout.trim());
    } catch (err) {
      assert.fail(`inspector stdout is not one JSON object (${err.message})\n${all}`);
    }
    const result = output.result ?? output;
    assert.equal(result.isError, true, all);
    assert.equal(result.structuredContent, undefined, all);
    assert.match(result.content?.[0]?.text ?? '', /^FILE_NOT_FOUND: \/workspace\/missing\.txt/, all);
  });
});
