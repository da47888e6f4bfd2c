// The scripted conversation every host is driven through, and what each tool
// result must look like once the host has handed it back to the model. The
// checks follow the contract in docs/design.md ("Error results", "What hosts
// show the model"): an error is an error result whose text starts with its
// code; a result stays within the inline cap (about 30,000 characters); a
// truncated output ends with a paging hint on its last line.

const CALC = 'def add(a, b):\n    return a - b\n';
const TEST = [
  'import unittest', 'from calc import add', '',
  'class AddTest(unittest.TestCase):',
  '    def test_add(self):', '        self.assertEqual(add(2, 3), 5)', '',
  "if __name__ == '__main__':", '    unittest.main()', '',
].join('\n');
// -B: no bytecode cache. The fix keeps calc.py's size and, within a second, its
// mtime, so a cached calc.pyc would still be taken as fresh and the test fail again.
const UNITTEST = '(cd proj && python3 -B -m unittest -v test_calc 2>&1)';
const FETCH = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8765/proj/calc.py').read().decode())"`;

// Inline cap of agentbox's results plus room for the host's own envelope.
export const CAP = 30000;
const ENVELOPE = 2000;

// The process id as a text-only reader (Gemini CLI, opencode) sees it: the
// result's text says "Started <process_id> (pid N)"; hosts that pass the
// structured result on show it as JSON.
export function processId(text) {
  try { const v = JSON.parse(text); if (v?.process_id) return v.process_id; } catch { /* text, not JSON */ }
  return /"?process_id"?\s*[:=]\s*"?([A-Za-z0-9_-]+)/.exec(text)?.[1] ?? /\bStarted ([A-Za-z0-9_-]+)/.exec(text)?.[1] ??
    /^\s*([A-Za-z0-9_-]+):\s*running/m.exec(text)?.[1];
}

// What the model reads of a result: the text without what a host wraps around
// it of its own (Claude Code appends <system-reminder> blocks, Codex puts "Wall
// time: ... Output:" in front, Gemini CLI puts output in <untrusted_context>
// and an error result's content inside "MCP tool 'x' reported tool error ...
// with response: [<the result as JSON>]"). When the host hands over
// structuredContent (Claude Code, Codex) the text is that JSON object, possibly
// cut by the host (Codex keeps ~12 KB, head and tail); its payload is the
// length of the strings in it, not of the JSON escaping. `shown` keeps all the
// host sent, for the checks that no protocol error reached the model.
export function view(r) {
  let text = r.text.replace(/(\s*<system-reminder>[\s\S]*?<\/system-reminder>)+\s*$/, '')
    .replace(/^Wall time: [\d.]+ seconds\n(Exit code: -?\d+\n)?Output:\n/, '')
    .replace(/^<untrusted_context>\n([\s\S]*)\n<\/untrusted_context>$/, '$1');
  const wrapped = /^MCP tool '[^']+' reported tool error for function call: [\s\S]*? with response: (\[[\s\S]*\])$/.exec(text);
  if (wrapped) {
    try {
      // The result itself, or (another code path of the same host) under `error`.
      const resp = JSON.parse(wrapped[1])[0]?.functionResponse?.response ?? {};
      const err = resp.error && typeof resp.error === 'object' ? resp.error : resp;
      text = Array.isArray(err.content) ? err.content.map((c) => c.text ?? '').join('\n') : String(err.message ?? text);
    } catch { /* leave the host's text as it is */ }
  }
  let structured = null;
  try { const v = JSON.parse(text); if (v && typeof v === 'object' && !Array.isArray(v)) structured = v; } catch { /* plain text */ }
  const json = structured !== null || /^\{"/.test(text);
  const strings = structured ? stringsIn(structured) : json ? [text.replace(/\\n/g, '\n').replace(/\\"/g, '"')] : [];
  const escaping = structured ? strings.reduce((n, v) => n + JSON.stringify(v).length - 2 - v.length, 0) : 0;
  return { ...r, shown: r.text, text, json, structured, visible: [text, ...strings].join('\n'),
    payload: structured ? JSON.stringify(structured).length - escaping : text.length };
}

function stringsIn(v, out = []) {
  if (typeof v === 'string') out.push(v);
  else if (v && typeof v === 'object') for (const x of Object.values(v)) stringsIn(x, out);
  return out;
}

const fail = (cond, msg) => (cond ? [] : [msg]);
const notError = (r) => fail(r.isError !== true, `came back as an error: ${clip(r.text)}`);
// A host that has an error flag in its model API must set it; every host must
// show the text starting with the code (a host may put a short label of its
// own, e.g. "Error: ", in front of it).
const errorWith = (code) => (r) => [
  ...fail(r.isError !== false, 'is not flagged as an error'),
  ...fail(new RegExp(`^[^\\n]{0,40}?\\b${code}: `).test(r.text.trimStart()), `text does not start with ${code}: ${clip(r.text)}`),
  ...fail(!/-32602|Structured content does not match/i.test(r.shown), `an MCP protocol error reached the model: ${clip(r.text)}`),
];
// A host that finds a result too large parks it in a file of its own and shows
// the model a preview (Qwen Code: "<persisted-output> Output too large (64 KB)").
const sized = (r) => [
  ...fail(r.payload <= CAP + ENVELOPE, `is ${r.payload} characters of payload (cap ${CAP} + ${ENVELOPE})`),
  ...fail(!/Output too large|exceeds maximum allowed tokens/i.test(r.shown.slice(0, 400)),
    `the host found it too large: ${clip(r.shown.slice(0, 200))}`),
];
const shows = (re) => (r) => fail(re.test(r.visible), `does not show ${re}: ${clip(r.text)}`);
const lastLine = (t) => t.trimEnd().split('\n').pop() ?? '';
const clip = (t) => JSON.stringify(t.length > 300 ? `${t.slice(0, 200)} … ${t.slice(-100)}` : t);

// The paging hint: the last line of the text names how to read the rest; a
// structured result says truncated and carries the process_id to page with.
// (agentbox's own: a tool and an offset to read on with; a host's own note,
// such as opencode's "Full output saved to <file> ... Read (with offset/limit)",
// is not one.)
const HINT = /\bprocess_output\b|\bnext_offset\b|\boffset[ =:]+\d+/;
const pagingHint = (r) => (r.json
  ? fail(/"truncated"\s*:\s*true/.test(r.text) && /"(process_id|next_offset)"\s*:/.test(r.text),
    `structured result does not say truncated with a process_id to page: ${clip(r.text)}`)
  : fail(HINT.test(lastLine(r.text)), `last line is not a paging hint: ${clip(lastLine(r.text))}`));

export const steps = [
  { label: 'write calc.py', tool: 'file_write', args: { path: 'proj/calc.py', content: CALC }, checks: [notError, sized, shows(/calc\.py|32 bytes/)] },
  { label: 'write test_calc.py', tool: 'file_write', args: { path: 'proj/test_calc.py', content: TEST }, checks: [notError, sized, shows(/test_calc\.py|\d+ bytes/)] },
  { label: 'run the failing test', tool: 'exec', args: { command: UNITTEST },
    checks: [notError, sized, shows(/FAILED|AssertionError/)] },
  { label: 'fix calc.py', tool: 'file_edit', args: { path: 'proj/calc.py', old_string: 'return a - b', new_string: 'return a + b' },
    checks: [notError, sized, shows(/calc\.py|1 replacement|"replacements":1/)] },
  { label: 'run the test again', tool: 'exec', args: { command: UNITTEST }, checks: [notError, sized, shows(/\bOK\b/)] },
  { label: 'read a missing file', tool: 'file_read', args: { path: 'proj/missing.py' }, checks: [errorWith('FILE_NOT_FOUND'), sized] },
  { label: 'edit that does not match', tool: 'file_edit', args: { path: 'proj/calc.py', old_string: 'return a * b', new_string: 'x' },
    checks: [errorWith('NO_MATCH'), sized] },
  { label: 'start a server', tool: 'process_start', args: { command: 'python3 -m http.server 8765 --bind 127.0.0.1' },
    checks: [notError, sized, (r) => fail(processId(r.text), `shows no process id: ${clip(r.text)}`)] },
  { label: 'wait for its port', tool: 'process_wait',
    args: (seen) => ({ process_id: (seen[7] && processId(view(seen[7]).text)) ?? 'unknown', port: 8765, timeout_ms: 20000 }),
    checks: [notError, sized, shows(/port|accepting/)] },
  { label: 'fetch from it', tool: 'exec', args: { command: FETCH }, checks: [notError, sized, shows(/return a \+ b/)] },
  { label: 'print 200,000 lines', tool: 'exec', args: { command: 'seq 1 200000' },
    checks: [notError, sized, shows(/(^|\n)1\n2\n3\n/), pagingHint] },
  { label: 'snapshot', tool: 'sandbox_snapshot', args: { label: 'hosts-test' }, checks: [notError, sized, shows(/snap-/)] },
];

export const FINAL_TEXT = 'All scripted steps are done.';
export const PROMPT = 'Run the scripted agentbox scenario (the model endpoint drives every step).';

export function argsFor(step, seen) {
  return typeof step.args === 'function' ? step.args(seen) : step.args;
}

// Every step's verdict: the checks that failed, or that no result came back.
export function verdicts(seen) {
  return steps.map((s, i) => {
    const r = seen[i];
    if (!r) return { step: s, result: null, failures: ['no result reached the model'] };
    const v = view(r);
    return { step: s, result: v, failures: s.checks.flatMap((c) => c(v)) };
  });
}
