// The checks of scenario.mjs against results shaped the way each host hands
// them to the model (the wrappers seen in requests.jsonl of real runs): a
// result that keeps the contract passes behind every host's wrapper, and each
// way of breaking it fails. Run: node --test tests/hosts/scenario.test.mjs
import test from 'node:test';
import assert from 'node:assert/strict';
import { steps, verdicts, processId } from './scenario.mjs';

const step = (label) => steps.findIndex((s) => s.label === label);
const failuresOf = (label, result) => {
  const seen = []; seen[step(label)] = result;
  return verdicts(seen)[step(label)].failures;
};

const NOT_FOUND = 'FILE_NOT_FOUND: /workspace/proj/missing.py does not exist (relative paths resolve against the session\'s cwd /workspace)';
const geminiError = (content, nested = true) => `MCP tool 'file_read' reported tool error for function call: {"name":"file_read","args":{"path":"proj/missing.py"}} with response: ${
  JSON.stringify([{ functionResponse: { name: 'file_read', response: nested ? { error: { content, isError: true } } : { content, isError: true } } }])}`;

// How each host wraps a text it passes on, and the error flag it gives.
const hosts = {
  claude: (t) => `${t}\n\n<system-reminder>\n<total_tokens>14999880 tokens left</total_tokens>\n</system-reminder>`,
  codex: (t) => `Wall time: 0.0256 seconds\nOutput:\n${t}`,
  gemini: (t) => `<untrusted_context>\n${t}\n</untrusted_context>`,
  opencode: (t) => t,
};

test('an error result with its code passes behind every host wrapper', () => {
  for (const [name, wrap] of Object.entries(hosts)) {
    assert.deepEqual(failuresOf('read a missing file', { text: wrap(NOT_FOUND), isError: true }), [], name);
  }
  const gemini = { text: geminiError([{ type: 'text', text: NOT_FOUND }]), isError: true };
  assert.deepEqual(failuresOf('read a missing file', gemini), []);
  const geminiTop = { text: geminiError([{ type: 'text', text: NOT_FOUND }], false), isError: true };
  assert.deepEqual(failuresOf('read a missing file', geminiTop), [], 'Gemini CLI, isError at the top of the result');
  assert.deepEqual(failuresOf('read a missing file', { text: `Error: ${NOT_FOUND}`, isError: undefined }), [], 'a short host label');
});

test('an error without its code, flagged as a success, or turned into -32602 fails', () => {
  const noCode = 'cannot open /workspace/proj/missing.py: No such file or directory';
  assert.match(failuresOf('read a missing file', { text: noCode, isError: true }).join(), /does not start with FILE_NOT_FOUND/);
  assert.match(failuresOf('read a missing file', { text: NOT_FOUND, isError: false }).join(), /not flagged as an error/);
  const schema = { text: geminiError([]).replace('"content":[]', '"message":"MCP error -32602: Structured content does not match the tool\'s output schema"'), isError: true };
  assert.match(failuresOf('read a missing file', schema).join(), /protocol error reached the model/);
  assert.match(failuresOf('read a missing file', { text: '{"error":{"code":"FILE_NOT_FOUND","message":"x"}}', isError: true }).join(),
    /does not start with/, 'the code only inside structuredContent');
});

const lines = (from, to) => Array.from({ length: to - from + 1 }, (_, i) => `${from + i}`).join('\n');
const HINTED = `${lines(1, 1900)}\n[output truncated: showing 11,000 of 1,288,895 bytes; next: process_output process_id exec-2 offset 11000]`;

test('a large output within the cap with the hint as its last line passes', () => {
  for (const [name, wrap] of Object.entries(hosts)) {
    assert.deepEqual(failuresOf('print 200,000 lines', { text: wrap(HINTED), isError: false }), [], name);
  }
  const structured = JSON.stringify({ exit_code: 0, process_id: 'exec-2', stdout: `${lines(1, 4000)}\n`, truncated: true });
  assert.deepEqual(failuresOf('print 200,000 lines', { text: hosts.claude(structured), isError: false }), []);
  const cut = `${structured.slice(0, 6000)}…7 tokens truncated…${structured.slice(-6000)}`;
  assert.deepEqual(failuresOf('print 200,000 lines', { text: hosts.codex(cut), isError: false }), [], 'Codex middle cut');
});

test('a hint in the middle, a host note for a hint, an oversized or parked result fails', () => {
  const middle = `${lines(1, 2000)}\n[… cut; process_output exec-2 …]\n${lines(199000, 200000)}\n[exit code 0, 33 ms]`;
  assert.match(failuresOf('print 200,000 lines', { text: hosts.gemini(middle) }).join(), /last line is not a paging hint/);
  const opencode = `${lines(1, 2000)}\n\n...3367 lines truncated...\n\nThe tool call succeeded but the output was truncated. Full output saved to: /tmp/x\nUse the Task tool to have explore agent process this file with Grep and Read (with offset/limit).`;
  assert.match(failuresOf('print 200,000 lines', { text: opencode }).join(), /last line is not a paging hint/);
  const big = `${lines(1, 9000)}\n[next: process_output offset 48894]`;
  assert.match(failuresOf('print 200,000 lines', { text: big }).join(), /characters of payload/);
  const parked = '<persisted-output>\nOutput too large (64 KB). Full output saved to: /tmp/x\n\nPreview (up to 2000 chars):\n{"stdout":"1\\n2\\n3\\n"}\n</persisted-output>';
  assert.match(failuresOf('print 200,000 lines', { text: parked }).join(), /host found it too large/);
  const structured = JSON.stringify({ process_id: 'exec-2', stdout: lines(1, 3000), truncated: false });
  assert.match(failuresOf('print 200,000 lines', { text: hosts.claude(structured) }).join(), /does not say truncated/);
});

test('the process id is read from the text or the JSON a host shows', () => {
  assert.equal(processId('Started proc-1 (pid 13)'), 'proc-1');
  assert.equal(processId('{"pid":13,"process_id":"proc-1","status":"running"}'), 'proc-1');
  assert.equal(processId('{"pid":13,"process_id":"proc-1","status":"running"}\nStarted proc-1 (pid 13)'), 'proc-1');
  assert.equal(processId('proc-7: running'), 'proc-7');
});
