// Exposed ports (docs/design.md section 12) through the official SDK client
// against real sandboxes: a `python3 -m http.server` in the box fetched from
// the host through its URL, a WebSocket echo server through one, two boxes
// exposing the same inner port at different URLs, a refused port and an
// unexposed one, then the same URL after an idle restore and after a server
// restart (the connection brings the box and its on-restore service back),
// the source's URL over a fork, and 502 with a sentence once the box is
// destroyed.
import { describe, test as baseTest } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';

import { callOk, serveListed, sharedState as sharedStateOf, tail, sleep } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 150_000 }, fn);
const CALL = { timeout: 30_000 };
const ARGS = ['--idle-timeout', '2s', '--background-keepalive', '0s'];

const serve = (t) => serveListed(t, { extraArgs: ARGS });
const sharedState = (t) => sharedStateOf(t, { prefix: 'agentbox-ports-', extraArgs: ARGS });

const call = (server, name, args = {}) => callOk(server, name, args, CALL);

const exec = (server, command, conversation) => call(server, 'exec', { command, ...(conversation ? { conversation } : {}) });

async function startHttp(server, port, body, conversation) {
  const c = conversation ? { conversation } : {};
  await exec(server, `mkdir -p /workspace/www && printf '${body}' > /workspace/www/index.html`, conversation);
  const started = await call(server, 'process_start', {
    command: `exec python3 -m http.server ${port} --bind 127.0.0.1`, cwd: 'www', restart: 'on-restore', ...c,
  });
  const ready = await call(server, 'process_wait', { process_id: started.process_id, port, timeout_ms: 10_000, ...c });
  assert.equal(ready.port_ready, true, 'the server in the box listens');
}

async function get(url, ms = 20_000) {
  const r = await fetch(url, { signal: AbortSignal.timeout(ms) });
  return { status: r.status, body: await r.text() };
}

/** GETs until the answer is 200 (a service coming back), at most `ms`. */
async function getUntilOk(url, ms = 30_000) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await get(url);
      if (last.status === 200) return last;
    } catch (err) {
      last = { error: err.message };
    }
    await sleep(200);
  }
  assert.fail(`${url} never answered 200: ${JSON.stringify(last)}`);
}

// A WebSocket echo server from Python's standard library (text frames under
// 126 bytes): the relay passes the upgrade and the frames untouched.
const WS_SERVER = String.raw`
import socket, hashlib, base64, threading
def serve(c):
    def take(n):
        b = b''
        while len(b) < n:
            x = c.recv(n - len(b))
            if not x: raise EOFError
            b += x
        return b
    try:
        data = b''
        while b'\r\n\r\n' not in data:
            x = c.recv(4096)
            if not x: raise EOFError  # a readiness probe (process_wait port) connects and goes
            data += x
        key = [l.split(b':', 1)[1].strip() for l in data.split(b'\r\n') if l.lower().startswith(b'sec-websocket-key')][0]
        accept = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
        c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + b'\r\n\r\n')
        while True:
            h = take(2); mask = take(4)
            p = bytes(a ^ mask[i % 4] for i, a in enumerate(take(h[1] & 127)))
            c.sendall(bytes([0x81, len(p)]) + p)
    except EOFError:
        pass
    c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 8001)); s.listen()
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
`;

/** Opens a WebSocket to url by hand and echoes two messages through it. */
async function websocketEcho(url, messages) {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  let buffer = Buffer.alloc(0);
  const waiters = [];
  socket.on('data', (chunk) => { buffer = Buffer.concat([buffer, chunk]); waiters.splice(0).forEach((w) => w()); });
  const until = async (cond) => {
    const deadline = Date.now() + 10_000;
    while (!cond()) {
      assert.ok(Date.now() < deadline, `websocket: waiting, have ${JSON.stringify(buffer.toString('latin1'))}`);
      await new Promise((r) => { waiters.push(r); setTimeout(r, 100); });
    }
  };
  try {
    await new Promise((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject); });
    const key = randomBytes(16).toString('base64');
    socket.write(`GET /chat HTTP/1.1\r\nHost: ${hostname}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
    await until(() => buffer.includes('\r\n\r\n'));
    const end = buffer.indexOf('\r\n\r\n') + 4;
    const head = buffer.subarray(0, end).toString('latin1');
    buffer = buffer.subarray(end);
    assert.match(head, /^HTTP\/1\.1 101 /);
    const expected = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
    assert.match(head, new RegExp(`Sec-WebSocket-Accept: ${expected.replace(/[+/]/g, '\\$&')}`, 'i'));
    const echoed = [];
    for (const message of messages) {
      const payload = Buffer.from(message);
      const mask = randomBytes(4);
      const frame = Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask,
        Buffer.from(payload.map((b, i) => b ^ mask[i % 4]))]);
      socket.write(frame);
      await until(() => buffer.length >= 2 && buffer.length >= 2 + buffer[1]);
      echoed.push(buffer.subarray(2, 2 + buffer[1]).toString());
      buffer = buffer.subarray(2 + buffer[1]);
    }
    return echoed;
  } finally {
    socket.destroy();
  }
}

async function refused(url) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(port), hostname);
    s.once('connect', () => { s.destroy(); resolve(false); });
    s.once('error', (err) => resolve(err.code === 'ECONNREFUSED'));
  });
}

describe('exposed ports', () => {
  test('HTTP and WebSocket from the host; two boxes, two URLs; refused and unexposed ports', async (t) => {
    const server = await serve(t);
    await startHttp(server, 8000, 'hello from box one\\n');
    const first = await call(server, 'port_expose', { port: 8000 });
    assert.match(first.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(first.relaying, true);
    assert.equal(first.listening, true);
    assert.deepEqual(await get(`${first.url}/index.html`), { status: 200, body: 'hello from box one\n' });
    // Exposing it again keeps the URL.
    assert.equal((await call(server, 'port_expose', { port: 8000 })).url, first.url);

    // Another conversation's box on the same inner port: another URL, its own page.
    await startHttp(server, 8000, 'hello from box two\\n', 'other');
    const second = await call(server, 'port_expose', { port: 8000, conversation: 'other' });
    assert.notEqual(second.url, first.url);
    assert.equal((await get(`${second.url}/index.html`)).body, 'hello from box two\n');
    assert.equal((await get(`${first.url}/index.html`)).body, 'hello from box one\n');

    // WebSocket through the relay.
    await call(server, 'file_write', { path: 'ws.py', content: WS_SERVER });
    const ws = await call(server, 'process_start', { command: 'exec python3 /workspace/ws.py' });
    const wsReady = await call(server, 'process_wait', { process_id: ws.process_id, port: 8001, timeout_ms: 10_000 });
    assert.equal(wsReady.port_ready, true, JSON.stringify(wsReady) + JSON.stringify(await call(server, 'process_output', { process_id: ws.process_id })));
    const wsPort = await call(server, 'port_expose', { port: 8001 });
    assert.deepEqual(await websocketEcho(wsPort.url, ['ping', 'second message']), ['ping', 'second message']);

    // Nothing listens on 8002: a 502 that says so, at once.
    const none = await call(server, 'port_expose', { port: 8002 });
    assert.equal(none.listening, false);
    const answer = await get(none.url, 10_000);
    assert.equal(answer.status, 502);
    assert.match(answer.body, /nothing listens on port 8002/);

    const listed = await call(server, 'port_list');
    assert.deepEqual(listed.ports.map((p) => [p.port, p.url]), [[8000, first.url], [8001, wsPort.url], [8002, none.url]]);

    // Unexposed: the URL is gone (refused), the others stay.
    assert.equal((await call(server, 'port_unexpose', { port: 8001 })).unexposed, true);
    assert.equal(await refused(wsPort.url), true);
    const again = await server.client.callTool({ name: 'port_unexpose', arguments: { port: 8001 } }, undefined, CALL);
    assert.equal(again.isError, true);
    assert.match(again.content[0].text, /PORT_NOT_EXPOSED/);
    assert.equal((await get(`${first.url}/index.html`)).status, 200);
    const bad = await server.client.callTool({ name: 'port_expose', arguments: { port: 8003, host_port: Number(new URL(first.url).port) } }, undefined, CALL);
    assert.equal(bad.isError, true, 'a host port in use is refused');
    assert.match(bad.content[0].text, /PORT_UNAVAILABLE/);
  });

  test('the same URL after an idle restore and a server restart; 502 once the box is destroyed', async (t) => {
    const state = sharedState(t);
    let server = await state.serve();
    await startHttp(server, 8000, 'kept\\n');
    const { url } = await call(server, 'port_expose', { port: 8000 });
    assert.equal((await get(`${url}/index.html`)).body, 'kept\n');

    // Idle teardown; the connection itself brings the box and its service back.
    const deadline = Date.now() + 30_000;
    while ((await call(server, 'sandbox_status')).state !== 'stopped') {
      assert.ok(Date.now() < deadline, 'no idle teardown');
      await sleep(200);
    }
    assert.deepEqual(await getUntilOk(`${url}/index.html`), { status: 200, body: 'kept\n' });

    // A server restart on the same state directory: the listener is back at once.
    await server.close();
    server = await state.serve();
    assert.deepEqual(await getUntilOk(`${url}/index.html`), { status: 200, body: 'kept\n' });
    assert.equal((await call(server, 'port_list')).ports[0].url, url);

    // A fork: the source's URL goes on working; the fork has its own box
    // and exposes its own ports (none are copied to it).
    const forked = await call(server, 'sandbox_fork', {});
    assert.equal((await get(`${url}/index.html`)).body, 'kept\n');
    assert.deepEqual((await call(server, 'port_list', { conversation: forked.forks[0].conversation })).ports, []);

    // Destroyed: 502 with a sentence, not a hang.
    await call(server, 'sandbox_destroy');
    const started = Date.now();
    const gone = await get(`${url}/index.html`, 15_000);
    assert.equal(gone.status, 502);
    assert.match(gone.body, /destroyed/);
    assert.ok(Date.now() - started < 5_000, `the 502 took ${Date.now() - started} ms`);
  });
});
