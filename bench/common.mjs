// What the Node benchmarks share: the repository root, the MCP SDK the
// client tests pin (tests/clients/package-lock.json), `--name value`
// options, the agentbox binary (--bin, else $AGENTBOX_BIN, else
// build/agentbox) and the few statistics they report.
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const sdk = createRequire(join(ROOT, 'tests/clients/package.json'));
export const { Client } = sdk('@modelcontextprotocol/sdk/client/index.js');
export const { StdioClientTransport } = sdk('@modelcontextprotocol/sdk/client/stdio.js');

export function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
export const BIN = resolve(option('bin', process.env.AGENTBOX_BIN ?? join(ROOT, 'build/agentbox')));
export const JSON_OUT = process.argv.includes('--json');

export const sorted = (v) => [...v].sort((a, b) => a - b);
export const median = (v) => {
  const s = sorted(v);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
export const percentile = (v, p) => sorted(v)[Math.min(v.length - 1, Math.ceil((p / 100) * v.length) - 1)];
export const round = (x, d = 2) => Math.round(x * 10 ** d) / 10 ** d;
