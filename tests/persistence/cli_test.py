#!/usr/bin/env python3
"""`agentbox sandbox ...` and `agentbox snapshot ...` against a state directory
the real server made, with the server running, after its idle teardown and
after its shutdown:
1. `sandbox list` shows each sandbox in the design's state vocabulary
   (docs/design.md section 8): `active` only while a server drives it; a
   sandbox torn down at idle, or left on disk by a server that exited, is
   `stopped`; a crash leftover is `stopped` with a note, never `snapshotting`
   with nobody snapshotting;
2. a `snapshot restore` that fails (a damaged archive) leaves the sandbox as it
   was: the next server starts on the live workspace, nothing is deleted;
3. a `snapshot restore` that works leaves a stopped sandbox whose next call
   sees the snapshot's files and can write to them;
4. `sandbox destroy --keep-snapshots` leaves state `none` and nothing of the
   old sandbox's processes."""
import functools, os, shutil, sqlite3, subprocess, sys, tempfile, time

import agentbox_server
from agentbox_server import error_code

BIN = sys.argv[1]
Server = functools.partial(agentbox_server.Server, BIN)
failures = []


def expect(cond, what):
    print("ok:" if cond else "FAIL:", what)
    if not cond:
        failures.append(what)


def cli(*args):
    return subprocess.run([BIN, *args, "--state-dir", state], capture_output=True, text=True, timeout=60)


def listed():
    """conversation -> (state column, whole row) of `agentbox sandbox list`."""
    r = cli("sandbox", "list")
    assert r.returncode == 0, r
    rows = {}
    for line in r.stdout.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3 and not line.startswith(" "):
            rows[cols[1]] = (cols[2], line)
    return rows, r.stdout


def wait_listed(conversation, state_name, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        rows, _ = listed()
        if rows.get(conversation, ("",))[0] == state_name:
            return True
        time.sleep(0.1)
    return False


def snapshot_ids(conversation):
    r = cli("snapshot", "list", "--conversation", conversation)
    assert r.returncode == 0, r
    return [line.split()[0] for line in r.stdout.splitlines()[1:] if line.strip()]


root = tempfile.mkdtemp(prefix="agentbox-cli-test-")
os.chmod(root, 0o711)  # sandboxes run as an unprivileged uid when we are root
state = os.path.join(root, "state")

# A server with a short idle timeout: "idle" is torn down, "held" is kept up
# by a background process (--background-keepalive, 1 h by default).
a = Server(state, "--idle-timeout", "400ms")
a.exec("echo hi > /workspace/a.txt", conversation="idle")
a.exec("echo base > /workspace/base.txt", conversation="held")
r = a.call("process_start", {"command": "sleep 300", "conversation": "held"})
assert not r["isError"], r
r = a.call("sandbox_snapshot", {"label": "base", "conversation": "held"})
assert not r["isError"], r
base = r["structuredContent"]["snapshot"]
a.exec("echo newer > /workspace/after.txt", conversation="held")

# 1. The state column.
expect(wait_listed("idle", "stopped"), "idle teardown: 'idle' is listed as stopped")
rows, out = listed()
expect(rows.get("held", ("",))[0] == "active", "a sandbox the server drives is listed as active:\n" + out)
a.close()
rows, out = listed()
expect(rows.get("held", ("",))[0] == "stopped", "after the server's shutdown 'held' is listed as stopped:\n" + out)
expect(rows.get("idle", ("",))[0] == "stopped", "after the server's shutdown 'idle' is still listed as stopped")

# A crash in the middle of a teardown leaves "snapshotting" in the catalog;
# with no server running nothing is snapshotting.
db = sqlite3.connect(os.path.join(state, "catalog.db"))
idle_id = db.execute("SELECT sandbox_id FROM conversations WHERE id = 'idle'").fetchone()[0]
db.execute("UPDATE sandboxes SET state = 'snapshotting' WHERE id = ?", (idle_id,))
db.commit()
rows, out = listed()
expect(rows.get("idle", ("",))[0] == "stopped" and "next server" in out,
       "a teardown cut short is listed as stopped, with a note that the next server recovers it:\n" + out)
db.execute("UPDATE sandboxes SET state = 'stopped' WHERE id = ?", (idle_id,))
db.commit()
db.close()

# 2. A restore from a damaged archive fails and changes nothing.
archive = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(state, "snapshots")) for f in fs
           if f.startswith(base)][0]
with open(archive, "r+b") as f:
    f.seek(os.path.getsize(archive) // 2)
    f.write(b"\0" * 64)
r = cli("snapshot", "restore", base)
expect(r.returncode == 1 and "cannot restore" in r.stderr, "restore of a damaged archive fails (%r)" % r.stderr)
rows, out = listed()
expect(rows.get("held", ("",))[0] == "stopped", "the failed restore leaves 'held' listed as stopped:\n" + out)
b = Server(state)
r = b.call("exec", {"command": "cat /workspace/base.txt /workspace/after.txt", "conversation": "held"})
expect(not r["isError"] and r["structuredContent"]["stdout"] == "base\nnewer\n",
       "after the failed restore the next server starts on the live workspace (%s)" %
       (error_code(r) or r["structuredContent"]["stdout"]))
b.close()

# 3. A restore that works: the sandbox stays stopped until its next call,
# which sees the snapshot's files and can change them.
idle_snapshot = snapshot_ids("idle")[0]
r = cli("snapshot", "restore", idle_snapshot)
expect(r.returncode == 0, "restore of the idle snapshot works (%r)" % r.stderr)
rows, out = listed()
expect(rows.get("idle", ("",))[0] == "stopped", "after a restore 'idle' is listed as stopped, not active:\n" + out)
c = Server(state)
r = c.call("exec", {"command": "cat /workspace/a.txt && echo more >> /workspace/a.txt && cat /workspace/a.txt",
                    "conversation": "idle"})
expect(not r["isError"] and r["structuredContent"]["stdout"] == "hi\nhi\nmore\n",
       "the next call sees the restored files and can write them (%s)" %
       (error_code(r) or r["structuredContent"]))
c.close()

# sandbox destroy --keep-snapshots: no workspace, snapshots kept, state none.
r = cli("sandbox", "destroy", "--conversation", "idle", "--keep-snapshots")
expect(r.returncode == 0, "sandbox destroy --keep-snapshots works (%r)" % r.stderr)
rows, out = listed()
expect(rows.get("idle", ("",))[0] == "none", "a destroyed sandbox with its snapshots kept is listed as none:\n" + out)

# 4. sandbox destroy --keep-snapshots forgets what the last teardown ended:
# the next sandbox of the conversation starts empty, with no "lost" processes.
d = Server(state, "--idle-timeout", "300ms", "--background-keepalive", "300ms")
r = d.call("process_start", {"command": "sleep 300", "conversation": "bg"})
assert not r["isError"], r
expect(wait_listed("bg", "stopped"), "a sandbox with a background process is torn down after the keepalive")
d.close()
r = cli("sandbox", "destroy", "--conversation", "bg", "--keep-snapshots")
expect(r.returncode == 0, "sandbox destroy --keep-snapshots of 'bg' works (%r)" % r.stderr)
e = Server(state)
r = e.call("process_list", {"conversation": "bg"})
expect(not r["isError"] and r["structuredContent"]["processes"] == [],
       "after the destroy the conversation's new sandbox lists no processes (%s)" % r["structuredContent"])
e.close()

shutil.rmtree(root, ignore_errors=True)
if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all CLI checks passed")
