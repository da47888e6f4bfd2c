#!/usr/bin/env python3
"""Server-level persistence tests against the real agentbox binary:
1. a restarted server maps the conversation back to the same workspace and
   sessions (cwd and environment restored);
2. two servers on one state directory: the second waits, then SANDBOX_BUSY;
3. kill -9 of the server at points during idle teardown and restore, then a
   restart: every file acknowledged before the kill is still there."""
import functools, os, random, shutil, sys, tempfile, time

import agentbox_server
from agentbox_server import check, error_code

Server = functools.partial(agentbox_server.Server, sys.argv[1])

root = tempfile.mkdtemp(prefix="agentbox-server-test-")
os.chmod(root, 0o711)  # sandboxes run as an unprivileged uid when we are root
state = os.path.join(root, "state")

# 1. Restart maps the conversation back.
a = Server(state)
a.exec("mkdir -p proj && cd proj && export TOKEN=abc123 && echo data > file.txt")
a.call("session_create", {"name": "build", "cwd": "/workspace/proj"})
a.call("exec", {"command": "export MODE=release", "session": "build"})
check(a.close() < 2.0, "shutdown on EOF within 2 s")
b = Server(state)
out = b.exec("pwd; echo $TOKEN; cat file.txt")["stdout"]
check(out == "/workspace/proj\nabc123\ndata\n", "restart: same workspace, cwd and environment (%r)" % out)
r = b.call("exec", {"command": "pwd; echo $MODE", "session": "build"})
check(r["structuredContent"]["stdout"] == "/workspace/proj\nrelease\n", "restart: named session back with its state")

# 2. A second server on the same state directory waits, then SANDBOX_BUSY.
c = Server(state)
start = time.time()
r = c.call("exec", {"command": "true"})
waited = time.time() - start
check(r["isError"] and r["_meta"]["agentbox/error"]["code"] == "SANDBOX_BUSY" and "structuredContent" not in r, "second server gets SANDBOX_BUSY")
check(9 <= waited <= 13, "it waited about 10 s (%.1f s)" % waited)
r = c.call("exec", {"command": "echo other", "conversation": "other"})
check(not r["isError"], "the second server serves other conversations")
c.close()
b.close()

# 3. kill -9 during idle teardown and restore, then restart.
acked = []
points = int(os.environ.get("AGENTBOX_KILL_POINTS", "12"))
for point in range(points):
    s = Server(state, "--idle-timeout", "150ms")
    name = "acked-%d" % point
    s.exec("mkdir -p /workspace/acked && echo %s > /workspace/acked/%s && seq 1 20000 > /workspace/acked/bulk-%d" % (name, name, point))
    acked.append(name)
    time.sleep(random.uniform(0.1, 0.6))  # teardown starts ~150-300 ms after the call
    if point % 2:
        s.call("exec", {"command": "true"})  # restores what the teardown stored; the kill may land right after
    s.p.kill()
    s.p.wait()
    t = Server(state)
    listing = t.exec("ls /workspace/acked")["stdout"].split()
    missing = [f for f in acked if f not in listing]
    check(not missing, "kill point %d: nothing acknowledged is lost (missing %s)" % (point, missing))
    tmp = [f for d, _, fs in os.walk(os.path.join(state, "snapshots")) for f in fs if ".tmp-" in f]
    check(not tmp, "kill point %d: no half-written archive left after recovery" % point)
    t.close()
shutil.rmtree(root, ignore_errors=True)
print("all server persistence checks passed")
