// Workspace files as MCP resources in the 2025 eras, through the official SDK
// client (1.32, 2025-11-25) against real sandboxes: resources/list paged,
// resources/read of text and binary files, the template, errors, and
// resources/subscribe → notifications/resources/updated, including a
// subscription that must not keep its sandbox from an idle teardown and that
// reports the file once the sandbox is back.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';

import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { serveListed, tail, sleep } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 120_000 }, fn);
const CALL = { timeout: 60_000 };

async function serve(t, extraArgs = []) {
  const server = await serveListed(t, { extraArgs });
  const call = async (name, args = {}) => {
    const r = await server.client.callTool({ name, arguments: args }, undefined, CALL);
    assert.ok(!r.isError, `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
    return r.structuredContent;
  };
  const updates = [];
  server.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.push(n.params.uri));
  const waitFor = async (what, cond, ms = 15_000) => {
    const deadline = Date.now() + ms;
    while (!cond()) {
      assert.ok(Date.now() < deadline, `${what}; updates so far: ${JSON.stringify(updates)}\n${tail(server.stderr())}`);
      await sleep(50);
    }
  };
  return { server, client: server.client, call, updates, waitFor };
}

async function rejects(promise, code, pattern) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.code, code, `code of ${err.message}`);
    if (pattern) assert.match(err.message, pattern);
    return true;
  });
}

describe('workspace resources (2025 eras)', () => {
  test('the capability is declared; list and read text and binary files', async (t) => {
    const { client, call } = await serve(t);
    assert.deepEqual(client.getServerCapabilities().resources, { subscribe: true, listChanged: false });
    // A conversation that never had a sandbox lists nothing and gets none.
    assert.deepEqual((await client.listResources()).resources, []);
    assert.equal((await call('sandbox_status')).state, 'none');

    await call('exec', {
      command: "mkdir -p /workspace/src/deep && printf 'hello\\n' > /workspace/src/a.txt && " +
        "printf '\\x00\\x01\\xff' > /workspace/bin.dat && echo x > '/workspace/with space.md' && " +
        'echo s > /workspace/.secret && echo d > /workspace/src/deep/d.py',
    });
    const listed = (await client.listResources()).resources;
    const byName = Object.fromEntries(listed.map((r) => [r.name, r]));
    assert.deepEqual(Object.keys(byName).sort(), ['bin.dat', 'src/a.txt', 'src/deep/d.py', 'with space.md']);
    assert.equal(byName['src/a.txt'].uri, 'file:///workspace/src/a.txt');
    assert.equal(byName['src/a.txt'].size, 6);
    assert.equal(byName['with space.md'].uri, 'file:///workspace/with%20space.md');

    const text = await client.readResource({ uri: 'file:///workspace/src/a.txt' });
    assert.deepEqual(text.contents, [{ uri: 'file:///workspace/src/a.txt', mimeType: 'text/plain', text: 'hello\n' }]);
    const spaced = await client.readResource({ uri: byName['with space.md'].uri });
    assert.equal(spaced.contents[0].text, 'x\n');
    const binary = await client.readResource({ uri: 'file:///workspace/bin.dat' });
    assert.equal(Buffer.from(binary.contents[0].blob, 'base64').toString('hex'), '0001ff');
    assert.equal(binary.contents[0].text, undefined);

    const templates = await client.listResourceTemplates();
    assert.equal(templates.resourceTemplates[0].uriTemplate, 'file:///workspace/{+path}');
  });

  test('a file of many pages reads whole; a large one is refused, not cut', async (t) => {
    const { client, call } = await serve(t);
    // 600 KB of text over many agent pages, and 1.5 MB over the bound.
    await call('exec', {
      command: "python3 -c \"import sys; sys.stdout.write(''.join('line %06d\\n' % i for i in range(50000)))\" > /workspace/big.txt && " +
        'head -c 1500000 /dev/zero | tr "\\0" a > /workspace/huge.txt',
    });
    const big = await client.readResource({ uri: 'file:///workspace/big.txt' }, CALL);
    assert.equal(big.contents[0].text.length, 600_000);
    assert.ok(big.contents[0].text.endsWith('line 049999\n'));
    await rejects(client.readResource({ uri: 'file:///workspace/huge.txt' }), -32602, /1500000 bytes.*file_read/);
  });

  test('errors: a missing file, a directory, a URI outside the workspace', async (t) => {
    const { client, call } = await serve(t);
    await call('exec', { command: 'mkdir -p /workspace/dir' });
    await rejects(client.readResource({ uri: 'file:///workspace/nope.txt' }), -32002, /not found/);
    await rejects(client.readResource({ uri: 'file:///workspace/dir' }), -32602, /directory/);
    await rejects(client.readResource({ uri: 'file:///etc/passwd' }), -32602, /workspace/);
    await rejects(client.readResource({ uri: 'file:///workspace/../etc/passwd' }), -32602, /workspace/);
    await rejects(client.readResource({ uri: 'file:///workspace/a%00b' }), -32602);
    await rejects(client.subscribeResource({ uri: 'https://example.com/x' }), -32602, /workspace/);
    // The server is still serving.
    assert.equal((await call('exec', { command: 'echo ok' })).stdout, 'ok\n');
  });

  test('resources/list pages through 3,000 files, each once', async (t) => {
    const { client, call } = await serve(t);
    await call('exec', { command: 'mkdir -p /workspace/many && cd /workspace/many && for i in $(seq 1 3000); do : > f$i; done' });
    const seen = new Set();
    let cursor;
    let pages = 0;
    do {
      const page = await client.listResources(cursor ? { cursor } : {}, CALL);
      for (const r of page.resources) {
        assert.ok(!seen.has(r.uri), `listed twice: ${r.uri}`);
        seen.add(r.uri);
      }
      cursor = page.nextCursor;
      pages += 1;
    } while (cursor && pages < 100);
    assert.equal(seen.size, 3000);
    assert.ok(pages > 1, 'one page for 3,000 files');
  });

  test('subscribe: a change is notified; unsubscribe: no more', async (t) => {
    const { client, call, updates, waitFor } = await serve(t);
    await call('exec', { command: 'echo 1 > /workspace/watched.txt && echo 1 > /workspace/other.txt' });
    await client.subscribeResource({ uri: 'file:///workspace/watched.txt' });
    await sleep(700);  // the watch is set up on its own thread
    await call('exec', { command: 'echo 2 >> /workspace/other.txt' });
    await call('exec', { command: 'echo 2 >> /workspace/watched.txt' });
    await waitFor('no update for watched.txt', () => updates.includes('file:///workspace/watched.txt'));
    assert.ok(!updates.includes('file:///workspace/other.txt'), 'an unsubscribed file was reported');
    await client.unsubscribeResource({ uri: 'file:///workspace/watched.txt' });
    updates.length = 0;
    await call('exec', { command: 'echo 3 >> /workspace/watched.txt' });
    await sleep(1500);
    assert.deepEqual(updates, []);
  });

  test('a subscription lets the sandbox idle out, and reports the file once it is back', async (t) => {
    const { client, call, updates, waitFor } = await serve(t, ['--idle-timeout', '2s', '--background-keepalive', '0s']);
    await call('exec', { command: 'echo 1 > /workspace/w.txt' });
    await client.subscribeResource({ uri: 'file:///workspace/w.txt' });
    const deadline = Date.now() + 30_000;
    while ((await call('sandbox_status')).state !== 'stopped') {
      assert.ok(Date.now() < deadline, 'the subscription kept the sandbox up');
      await sleep(200);
    }
    updates.length = 0;
    // The next call restores the box; the subscription picks it up again.
    await call('exec', { command: 'echo 2 >> /workspace/w.txt' });
    await waitFor('no update after the restore', () => updates.includes('file:///workspace/w.txt'));
    const read = await client.readResource({ uri: 'file:///workspace/w.txt' });
    assert.equal(read.contents[0].text, '1\n2\n');
  });
});
