"""The real agentbox server over stdio, for the persistence tests: initialize,
tool calls, shutdown by EOF. Shared by server_test.py and cli_test.py."""
import json, subprocess, sys, time


class Server:
    def __init__(self, binary, state, *args):
        self.p = subprocess.Popen([binary, "serve", "--state-dir", state, *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=open(state + ".log", "a"), text=True, bufsize=1)
        self.n = 0
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        self.p.stdout.readline()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, m):
        self.p.stdin.write(json.dumps(m) + "\n")
        self.p.stdin.flush()

    def call(self, name, args=None):
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": "tools/call", "params": {"name": name, "arguments": args or {}}})
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == self.n:
                return m["result"]

    def exec(self, command, **args):
        r = self.call("exec", {"command": command, **args})
        assert not r["isError"], r
        return r["structuredContent"]

    def close(self):
        start = time.time()
        self.p.stdin.close()
        self.p.wait(timeout=5)
        return time.time() - start


def error_code(result):
    """The code of an error result: in _meta["agentbox/error"] (docs/design.md
    section 8), or in structuredContent.error as servers before issue 11 put it."""
    meta = (result.get("_meta") or {}).get("agentbox/error")
    if meta:
        return meta.get("code")
    return ((result.get("structuredContent") or {}).get("error") or {}).get("code")


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)
