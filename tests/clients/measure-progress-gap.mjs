// Measures what docs/protocol.md "Progress" reports: how often the official
// SDK client raises "unknown token" when a server writes a progress
// notification, waits GAP ms, then writes the reply; and with DRAIN=1, when
// it first waits until the client has read the notification (SIOCOUTQ).
// Not a test: run it by hand, ideally under load.
//   node measure-progress-gap.mjs CALLS GAP_MS...   (DRAIN=1 for the read check)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const SERVER = String.raw`
import fcntl, json, os, struct, sys, termios, time
gap = float(os.environ["GAP_MS"]) / 1000.0
drain = os.environ.get("DRAIN") == "1"
def unread():
    return struct.unpack("i", fcntl.ioctl(1, termios.TIOCOUTQ, b"\0\0\0\0"))[0]
def write(obj):
    os.write(1, (json.dumps(obj) + "\n").encode())
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        write({"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": "2025-06-18",
               "capabilities": {"tools": {}}, "serverInfo": {"name": "gap", "version": "0"}}})
    elif msg["method"] == "tools/list":
        write({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}})
    elif msg["method"] == "tools/call":
        token = msg["params"]["_meta"]["progressToken"]
        write({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 1}})
        while drain and unread() > 0:
            time.sleep(0.0005)
        if gap:
            time.sleep(gap)
        write({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": [{"type": "text", "text": "ok"}]}})
`;

const [calls, ...gaps] = process.argv.slice(2).map(Number);
for (const gap of gaps) {
  const transport = new StdioClientTransport({
    command: 'python3',
    args: ['-c', SERVER],
    env: { ...process.env, GAP_MS: String(gap) },
  });
  const client = new Client({ name: 'measure-progress-gap', version: '0' }, { capabilities: {} });
  let errors = 0;
  let callbacks = 0;
  client.onerror = () => errors++;
  await client.connect(transport);
  await client.listTools();
  for (let i = 0; i < calls; i++) {
    await client.callTool({ name: 't', arguments: {} }, undefined, { onprogress: () => callbacks++ });
  }
  console.log(`gap ${gap} ms${process.env.DRAIN === '1' ? ' after the read' : ''}: ${calls} calls, ${errors} client errors, ${callbacks} callbacks`);
  await client.close();
}
