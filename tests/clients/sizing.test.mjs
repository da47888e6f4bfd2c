// Issue 11, point 5: results sized for what hosts show. Claude Code and Codex
// hand the model structuredContent, Gemini CLI, opencode and Qwen Code only
// the text, so every result must stand alone both ways (docs/files.md,
// "What hosts show"): its text plus its structuredContent stay within the
// inline cap plus a small envelope, the text's last line says how to get the
// rest, and following that line alone (a text-only reader) gets it.
//
// Each tool is driven to its largest result through the real SDK client after
// listTools (so the SDK validates structuredContent against outputSchema).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from './helpers.mjs';

// The inline cap is 30,000 characters of payload (content, output, entries)
// for text and structuredContent together. The envelope is what a result
// carries besides its payload: structuredContent's field names and numbers,
// the status and hint lines, a cursor naming a path of normal length (a few
// hundred characters at most). 4,000 characters cover the largest of these
// with room; a payload counted once instead of twice would need 60,000.
const CAP = 30_000;
const LIMIT = CAP + 4_000;
// opencode keeps the first 2,000 lines of a text; Codex keeps the head and
// the tail of 12 KB. The hint must survive both.
const HEAD_CUT_LINES = 2_000;
const MIDDLE_CUT_BYTES = 12 * 1024;

let server;
const largest = {};

function textOf(r) {
  return (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

function size(r) {
  return textOf(r).length + JSON.stringify(r.structuredContent ?? {}).length;
}

function lastLine(text) {
  return text.slice(text.lastIndexOf('\n') + 1);
}

// What a host that cuts the text would still show of its last line.
function checkHintSurvivesCuts(text) {
  const hint = lastLine(text);
  assert.match(hint, /^\[.*\]$/, `the last line is not a hint: ${JSON.stringify(hint.slice(0, 200))}`);
  const lines = text.split('\n');
  assert.ok(lines.length <= HEAD_CUT_LINES, `${lines.length} lines: a head-only cut at ${HEAD_CUT_LINES} lines drops the hint`);
  assert.ok(Buffer.byteLength(hint) < MIDDLE_CUT_BYTES / 2, 'the hint is longer than the tail a middle cut keeps');
  return hint;
}

async function call(tool, args, timeout = 60_000) {
  const r = await server.client.callTool({ name: tool, arguments: args }, undefined, { timeout });
  assert.ok(!r.isError, `${tool} failed: ${textOf(r)}`);
  const n = size(r);
  largest[tool] = Math.max(largest[tool] ?? 0, n);
  assert.ok(n <= LIMIT, `${tool} result is ${n} characters (text + structuredContent), over ${LIMIT}`);
  return r;
}

// A 1 MiB text file that is not all ASCII: two- and three-byte characters,
// tabs and quotes (which JSON escapes) on lines of varied length.
function bigText() {
  const parts = [];
  let n = 0;
  for (let i = 0; n < 1 << 20; i++) {
    const line = `${i}\t"line" ${'é'.repeat(i % 7)}${'日本'.repeat(i % 3)} ${'x'.repeat(i % 50)}\n`;
    parts.push(line);
    n += Buffer.byteLength(line);
  }
  return Buffer.from(parts.join('')).subarray(0, 1 << 20);
}

before(async () => {
  server = await startServer({ testTools: false });
  await server.client.listTools();
});

after(async () => {
  await server?.close();
  const rows = Object.entries(largest).map(([tool, n]) => `${tool} ${n}`);
  console.log(`# largest result (text + structuredContent characters) per tool: ${rows.join(', ')}`);
});

test('file_read: a 1 MiB length is capped, and a text-only reader pages through every byte once', { timeout: 300_000 }, async () => {
  let file = bigText();
  // Cut at a character boundary so the file is valid UTF-8.
  while ((file[file.length - 1] & 0xc0) === 0x80 || file[file.length - 1] >= 0xc0) file = file.subarray(0, file.length - 1);
  await call('file_write', { path: '/workspace/big.txt', content: file.toString('base64'), encoding: 'base64' });

  const first = await call('file_read', { path: '/workspace/big.txt', length: 1 << 20 });
  assert.equal(first.structuredContent.truncated, true);
  assert.match(checkHintSurvivesCuts(textOf(first)), new RegExp(`^\\[showing bytes 0-\\d+ of ${file.length}; next: file_read offset \\d+\\]$`));

  // The reader sees only the text: it takes the page's bytes from the range
  // the hint names, and the next offset from the hint.
  const pieces = [];
  let offset = 0, pages = 0;
  for (;;) {
    const r = await call('file_read', { path: '/workspace/big.txt', offset });
    const text = textOf(r);
    const hint = checkHintSurvivesCuts(text);
    const m = /^\[showing bytes (\d+)-(\d+) of (\d+)(?:; next: file_read offset (\d+)|; the end of the file)\]$/.exec(hint);
    assert.ok(m, `unexpected hint ${hint}`);
    const [from, to] = [Number(m[1]), Number(m[2])];
    assert.equal(from, offset, 'a page starts where the previous hint said');
    const body = Buffer.from(text.slice(0, text.length - hint.length));
    assert.ok(body.length === to - from || body.length === to - from + 1, `page body ${body.length} bytes for range ${from}-${to}`);
    pieces.push(body.subarray(0, to - from));
    pages++;
    if (m[4] === undefined) break;
    assert.equal(Number(m[4]), to);
    offset = to;
  }
  const back = Buffer.concat(pieces);
  assert.equal(back.length, file.length, 'every byte is read once');
  assert.ok(back.equals(file), 'the pages put together are the file');
  assert.ok(pages > 30 && pages < 200, `${pages} pages`);

  // A file of empty lines: a page keeps under 1,000 lines, so the hint survives a head-only cut.
  await call('file_write', { path: '/workspace/empty-lines.txt', content: '\n'.repeat(100_000) });
  const lines = await call('file_read', { path: '/workspace/empty-lines.txt', length: 1 << 20 });
  assert.match(checkHintSurvivesCuts(textOf(lines)), /^\[showing bytes 0-1000 of 100000; next: file_read offset 1000\]$/);

  // base64 pages are capped as well and say so.
  const b64 = await call('file_read', { path: '/workspace/big.txt', encoding: 'base64', length: 1 << 20 });
  assert.match(checkHintSurvivesCuts(textOf(b64)), /next: file_read offset \d+ encoding "base64"\]$/);
});

test('file_list: 10,000 entries come in capped pages that a cursor (or the text hint) walks', { timeout: 300_000 }, async () => {
  await call('exec', { command: 'mkdir -p /workspace/many && cd /workspace/many && seq -f "file-%05g.txt" 10000 | xargs touch' });
  const args = { path: '/workspace/many', max_entries: 10_000 };
  const seen = new Set();
  let cursor;
  for (let page = 0; ; page++) {
    assert.ok(page < 1000, 'paging does not end');
    const r = await call('file_list', cursor ? { ...args, cursor } : args, 120_000);
    const s = r.structuredContent;
    for (const e of s.entries) {
      assert.ok(!seen.has(e.path), `${e.path} listed twice`);
      seen.add(e.path);
    }
    if (!s.truncated) {
      assert.equal(s.next_cursor, undefined);
      break;
    }
    const hint = checkHintSurvivesCuts(textOf(r));
    const m = /next: file_list .*cursor ("(?:[^"\\]|\\.)*")\]$/.exec(hint);
    assert.ok(m, `unexpected hint ${hint}`);
    assert.equal(JSON.parse(m[1]), s.next_cursor, 'the text hint names the same cursor as next_cursor');
    cursor = JSON.parse(m[1]);
  }
  assert.equal(seen.size, 10_000);
});

test('file_search: 1,200 matches come in capped pages that a cursor walks', { timeout: 300_000 }, async () => {
  await call('exec', { command: 'mkdir -p /workspace/s && for f in a b c; do seq 1 400 | sed "s/^/match $f line /" > /workspace/s/$f.txt; done' });
  const args = { pattern: 'match', path: '/workspace/s', max_results: 1000 };
  const seen = new Set();
  let cursor;
  for (let page = 0; ; page++) {
    assert.ok(page < 1000, 'paging does not end');
    const r = await call('file_search', cursor ? { ...args, cursor } : args);
    const s = r.structuredContent;
    for (const m of s.matches) {
      const key = `${m.path}:${m.line}`;
      assert.ok(!seen.has(key), `${key} found twice`);
      seen.add(key);
    }
    const hint = checkHintSurvivesCuts(textOf(r));
    if (!s.truncated) break;
    const m = /next: file_search .*cursor ("(?:[^"\\]|\\.)*")\]$/.exec(hint);
    assert.ok(m, `unexpected hint ${hint}`);
    assert.equal(JSON.parse(m[1]), s.next_cursor);
    cursor = JSON.parse(m[1]);
  }
  assert.equal(seen.size, 1200);
});

test('exec: 200,000 lines keep head and tail; the last line names process_output and the offset', { timeout: 300_000 }, async () => {
  const r = await call('exec', { command: 'seq 200000' });
  const s = r.structuredContent;
  assert.equal(s.truncated, true);
  const text = textOf(r);
  const hint = checkHintSurvivesCuts(text);
  assert.ok(text.startsWith('1\n2\n3\n'), 'the head is shown');
  assert.ok(text.includes('\n199999\n200000\n'), 'the tail is shown');
  const m = /process_output process_id "([^"]+)" offset (\d+)/.exec(hint);
  assert.ok(m, `unexpected hint ${hint}`);
  assert.equal(m[1], s.process_id);
  const shownHead = text.slice(0, text.indexOf('\n[...'));
  assert.equal(Number(m[2]), Buffer.byteLength(shownHead) + 1, 'the offset is the first byte not shown');

  // A text-only reader follows the hints to the end of the output.
  const expected = Array.from({ length: 200_000 }, (_, i) => `${i + 1}\n`).join('');
  let offset = Number(m[2]), got = '', pages = 0;
  for (;;) {
    const page = await call('process_output', { process_id: m[1], offset });
    const t = textOf(page);
    const h = checkHintSurvivesCuts(t);
    got += page.structuredContent.stdout;
    pages++;
    const next = /next: process_output process_id "[^"]+" offset (\d+)/.exec(h);
    if (!next) {
      assert.match(h, /all output read/);
      break;
    }
    assert.ok(Number(next[1]) > offset);
    offset = Number(next[1]);
  }
  // The output buffer keeps the first 64 KiB and the last 1 MiB: what it
  // dropped is marked, the rest is there byte for byte.
  const marker = /\[\.\.\. (\d+) bytes were dropped here[^\n]*\]\n/.exec(got);
  const start = Number(m[2]);
  if (marker) {
    const dropped = Number(marker[1]);
    assert.equal(got.slice(0, marker.index), expected.slice(start, start + marker.index));
    assert.equal(got.slice(marker.index + marker[0].length), expected.slice(start + marker.index + dropped));
  } else {
    assert.equal(got, expected.slice(start));
  }
  assert.ok(pages > 10, `${pages} pages`);
});

test('exec: output of newlines only, and of control characters, stays within the cap', { timeout: 120_000 }, async () => {
  const lines = await call('exec', { command: 'yes "" | head -n 100000' });
  checkHintSurvivesCuts(textOf(lines));
  const control = await call('exec', { command: "head -c 300000 /dev/zero | tr '\\0' '\\1'; head -c 100000 /dev/urandom >&2" });
  checkHintSurvivesCuts(textOf(control));
  const page = await call('process_output', { process_id: control.structuredContent.process_id });
  checkHintSurvivesCuts(textOf(page));
});

test('process_list: 64 processes with long commands stay within the cap', { timeout: 300_000 }, async () => {
  const long = `sleep 600 # ${'x'.repeat(20_000)}`;
  for (let i = 0; i < 64; i++) await call('process_start', { command: `${long} ${i}` });
  const r = await call('process_list', {});
  const s = r.structuredContent;
  assert.equal(s.processes.length + (s.truncated ? 1 : 0) > 0, true);
  const ids = new Set(s.processes.map((p) => p.process_id));
  let cursor = s.truncated ? s.next_cursor : undefined;
  while (cursor) {
    const more = (await call('process_list', { cursor })).structuredContent;
    for (const p of more.processes) ids.add(p.process_id);
    cursor = more.truncated ? more.next_cursor : undefined;
  }
  assert.equal(ids.size, 64);
  const killed = await call('process_kill', { process_id: s.processes[0].process_id });
  assert.ok(size(killed) < 2_000);
});

test('session_list: 150 sessions come in capped pages that a cursor walks', { timeout: 300_000 }, async () => {
  const names = Array.from({ length: 150 }, (_, i) => `s${String(i).padStart(3, '0')}-${'y'.repeat(56)}`);
  for (const name of names) await call('session_create', { name, cwd: '/home/user' });
  const seen = new Set();
  let cursor;
  for (let page = 0; ; page++) {
    assert.ok(page < 100, 'paging does not end');
    const r = await call('session_list', cursor ? { cursor } : {});
    const s = r.structuredContent;
    for (const e of s.sessions) {
      assert.ok(!seen.has(e.session), `${e.session} listed twice`);
      seen.add(e.session);
    }
    if (!s.truncated) break;
    const m = /next: session_list cursor ("(?:[^"\\]|\\.)*")\]$/.exec(checkHintSurvivesCuts(textOf(r)));
    assert.ok(m, 'no hint');
    cursor = JSON.parse(m[1]);
  }
  for (const name of names) assert.ok(seen.has(name), `${name} missing`);
});
