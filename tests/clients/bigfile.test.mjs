// Issue 3, large data through the real server and the official SDK client: a
// 100 MiB file written in 1 MiB base64 chunks (append) and read back page by
// page, byte-exact (SHA-256 on both sides), while the server's memory stays
// far below the file's size (nothing is loaded whole beyond one message).
// Issue 11: a page is capped for what hosts show, text and structuredContent
// together (docs/files.md, "What hosts show"), whatever `length` asks: 15,000
// characters of base64, 11,250 bytes, so every message from the server stays
// under 64 KB.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { AGENTBOX_BIN, requireBinary, tempDir, tail } from './helpers.mjs';

const MIB = 1 << 20;
const CHUNKS = 100;
const PAGE = 11_250;

function rssKib(pid) {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

test('a 100 MiB file is written in chunks and read in capped pages; server memory stays bounded', { timeout: 600_000 }, async (t) => {
  requireBinary();
  const state = tempDir('agentbox-bigfile-');
  const transport = new StdioClientTransport({ command: AGENTBOX_BIN, args: ['serve', '--state-dir', state.dir], stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (d) => { stderr = (stderr + d).slice(-50_000); });
  // Every message the server sends passes through here: record the largest.
  let largest = 0;
  const client = new Client({ name: 'agentbox-bigfile-test', version: '0.0.0' }, { capabilities: {} });
  await client.connect(transport);
  // Server first, then its state directory.
  t.after(async () => {
    await client.close();
    state.cleanup();
  });
  const onmessage = transport.onmessage;
  transport.onmessage = (message) => {
    largest = Math.max(largest, JSON.stringify(message).length);
    onmessage(message);
  };
  const pid = transport.pid;
  const call = async (name, args) => {
    const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 });
    assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.structuredContent ?? r.content)}\n${tail(stderr)}`);
    return r.structuredContent;
  };

  // A chunk that differs from the next, so a lost or repeated chunk shows.
  const chunk = (i) => {
    const b = Buffer.alloc(MIB);
    for (let j = 0; j < MIB; j += 4) b.writeUInt32LE(((i * 2654435761) ^ j) >>> 0, j);
    return b;
  };
  const written = createHash('sha256');
  let peakRss = 0;
  for (let i = 0; i < CHUNKS; i++) {
    const data = chunk(i);
    written.update(data);
    const r = await call('file_write', {
      path: '/workspace/big.bin', content: data.toString('base64'), encoding: 'base64', mode: i === 0 ? 'overwrite' : 'append',
    });
    assert.equal(r.size, (i + 1) * MIB);
    if (i % 10 === 9) peakRss = Math.max(peakRss, rssKib(pid));
  }
  const stat = await call('file_stat', { path: '/workspace/big.bin' });
  assert.equal(stat.size, CHUNKS * MIB);

  const read = createHash('sha256');
  let offset = 0, pages = 0;
  for (;;) {
    const r = await call('file_read', { path: '/workspace/big.bin', encoding: 'base64', offset, length: MIB });
    read.update(Buffer.from(r.content, 'base64'));
    offset = r.next_offset;
    pages++;
    if (pages % 1000 === 0) peakRss = Math.max(peakRss, rssKib(pid));
    if (!r.truncated) break;
  }
  assert.equal(pages, Math.ceil((CHUNKS * MIB) / PAGE));
  assert.equal(offset, CHUNKS * MIB);
  assert.equal(read.digest('hex'), written.digest('hex'), 'the file read back differs from the one written');
  // A page is 15,000 characters of base64, in the text and in structuredContent.
  assert.ok(largest < 64 * 1024, `largest message from the server was ${largest} bytes`);
  // The file is 100 MiB; the server holds a message or two at a time.
  assert.ok(peakRss < 48 * 1024, `server RSS reached ${peakRss} KiB while moving 100 MiB`);
  t.diagnostic(`largest server message ${largest} bytes; server peak RSS ${(peakRss / 1024).toFixed(1)} MiB`);
});
