#!/usr/bin/env python3
"""Fault tests against the real agentbox server (issue 12, point 7):
1. a snapshot file removed under a stopped sandbox: the next call gets
   SNAPSHOT_CORRUPT, not an empty workspace, and the catalog row stays;
2. a zero-length and a garbage catalog: the server starts, the damaged file
   is kept, the live workspaces are kept (re-adopted or moved aside) and the
   log and doctor say so;
3. a full state filesystem (root only: a 48 MiB tmpfs): idle teardown and
   sandbox_restore give NO_SPACE, the server stays up, file_delete frees
   space, then snapshots work again."""
import functools, glob, os, shutil, sqlite3, subprocess, sys, tempfile, time

import agentbox_server
from agentbox_server import check, error_code

binary = sys.argv[1]
Server = functools.partial(agentbox_server.Server, binary)

# AGENTBOX_FAULT_SECTIONS=2,3 runs only those sections.
sections = os.environ.get("AGENTBOX_FAULT_SECTIONS", "1,2,3").split(",")
root = tempfile.mkdtemp(prefix="agentbox-fault-test-")
os.chmod(root, 0o711)  # sandboxes run as an unprivileged uid when we are root


def text(result):
    return "".join(c.get("text", "") for c in result.get("content", []))


def wait_for(what, predicate, timeout=15):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.05)
    check(False, "timed out waiting for " + what)


def files_named(state, name):
    return [os.path.join(d, f) for d, _, fs in os.walk(state) for f in fs if f == name]


# 1. A snapshot file removed under a stopped sandbox. Without a warm copy
# (--warm-cache 0) the next call is refused, never handed an empty
# workspace; with one (the default) recovery moves the warm copy back: it
# holds exactly what the lost archive held.
def missing_snapshot(warm):
  state = os.path.join(root, "missing-warm" if warm else "missing")
  cache = [] if warm else ["--warm-cache", "0"]
  s = Server(state, "--idle-timeout", "200ms", "--spare", "none", *cache)
  s.exec("echo precious > /workspace/precious.txt")
  wait_for("idle teardown", lambda: glob.glob(state + "/snapshots/*/*.tar.zst") and
           not glob.glob(state + "/sandboxes/*/workspace/precious.txt"))
  s.close()
  (archive,) = glob.glob(state + "/snapshots/*/*.tar.zst")
  os.remove(archive)
  s = Server(state, "--spare", "none", *cache)
  r = s.call("exec", {"command": "ls /workspace"})
  out = (r.get("structuredContent") or {}).get("stdout", "")
  if warm:
    check(not r["isError"] and out == "precious.txt\n",
          "missing snapshot, warm copy: the next call gets the workspace back (%s %r)" % (error_code(r), out or text(r)))
    log = open(state + ".log").read()
    check("warm copy is moved back and adopted" in log, "missing snapshot, warm copy: recovery says what it did")
    s.close()
    return
  check(r["isError"] and error_code(r) == "SNAPSHOT_CORRUPT",
        "missing snapshot: the next call gets SNAPSHOT_CORRUPT, not an empty workspace (%s %r)" % (error_code(r), out or text(r)))
  check(os.path.basename(archive)[:-8] in text(r), "missing snapshot: the error names the snapshot (%r)" % text(r))
  s.close()
  rows = sqlite3.connect(state + "/catalog.db").execute("SELECT count(*) FROM snapshots").fetchone()[0]
  check(rows == 1, "missing snapshot: its catalog row is not dropped (%d rows)" % rows)


# 2. A zero-length and a garbage catalog.
def damaged_catalog(kind, damage):
    state = os.path.join(root, kind)
    s = Server(state, "--spare", "none")
    for conv in ("one", "two"):
        s.exec("echo %s-data > /workspace/%s.txt" % (conv, conv), conversation=conv)
    s.close()
    for f in glob.glob(state + "/catalog.db*"):
        os.remove(f)
    with open(state + "/catalog.db", "wb") as f:
        f.write(damage)
    s = Server(state, "--spare", "none")
    r = s.call("exec", {"command": "cat /workspace/one.txt", "conversation": "one"})
    got = (r.get("structuredContent") or {}).get("stdout", "")
    notice = (r.get("structuredContent") or {}).get("notice", "") + text(r)
    check(got == "one-data\n" or "catalog" in notice,
          "%s catalog: the conversation gets its workspace back or is told (%r)" % (kind, got or notice))
    r = s.call("exec", {"command": "cat /workspace/two.txt", "conversation": "two"})
    served = {"one": got, "two": (r.get("structuredContent") or {}).get("stdout", "")}
    s.close()
    # As root each workspace is its own filesystem (a disk image under
    # <state>/disks, unmounted when the server stops): then what the server
    # serves is the proof; plain directories are also looked for on disk.
    images = glob.glob(state + "/disks/*.img")
    for conv in ("one", "two"):
        kept = served[conv] == conv + "-data\n" or (not images and files_named(state, conv + ".txt"))
        check(kept, "%s catalog: the live workspace of '%s' is kept (%r)" % (kind, conv, served[conv]))
    kept = [f for f in glob.glob(state + "/catalog.db.damaged-*") if not f.endswith(("-wal", "-shm"))]
    check(kept and open(kept[0], "rb").read() == damage, "%s catalog: the damaged file is kept (%s)" % (kind, kept))
    log = open(state + ".log").read()
    check("damaged" in log and "catalog" in log, "%s catalog: the log says so" % kind)
    d = subprocess.run([binary, "doctor", "--state-dir", state], capture_output=True, text=True)
    check("damaged" in d.stdout + d.stderr, "%s catalog: doctor says so" % kind)


if "1" in sections:
    missing_snapshot(warm=False)
    missing_snapshot(warm=True)
if "2" in sections:
    damaged_catalog("zero-length", b"")
    damaged_catalog("garbage", os.urandom(8192))


# 3. A full state filesystem.
if "3" not in sections:
    pass
elif os.geteuid() != 0:
    print("SKIPPED LOUDLY: the full-disk check needs root (it mounts a 48 MiB tmpfs); run as root")
else:
    # The state directory is the tmpfs itself; its log (state + ".log") is
    # outside, or the full disk would swallow it.
    fsdir = state = os.path.join(root, "small")
    os.mkdir(fsdir)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", fsdir], check=True)
    try:
        # Plain directories (--workspace-limit 0): this is the state
        # filesystem filling up under the box. With a disk image on it the
        # image cannot grow and the box's writes fail at writeback instead:
        # thin provisioning, see docs/design.md section 8 "Workspace limit".
        s = Server(state, "--idle-timeout", "400ms", "--spare", "none", "--workspace-limit", "0")
        s.exec("echo keep > /workspace/keep.txt")
        snap = s.call("sandbox_snapshot", {})
        check(not snap["isError"], "full disk: a first snapshot")
        s.call("exec", {"command": "head -c 200M /dev/urandom > /workspace/fill; df -k /workspace"})
        time.sleep(2)  # several idle teardowns are tried on the full disk
        check(s.p.poll() is None, "full disk: the server lives through idle teardown")
        log = open(state + ".log").read()
        idle = [l for l in log.splitlines() if "failed, keeping its directories" in l]
        check(idle and "is full" in idle[-1] and state in idle[-1],
              "full disk: the failed idle teardown is logged as a full state filesystem (%r)" % idle)
        check(len(idle) == 1, "full disk: and not retried at every tick (%d tries in 2 s)" % len(idle))
        r = s.call("sandbox_restore", {})
        check(s.p.poll() is None, "full disk: the server lives through sandbox_restore")
        check(r["isError"] and error_code(r) == "NO_SPACE" and state in text(r),
              "full disk: sandbox_restore gives NO_SPACE naming the state directory (%s: %r)" % (error_code(r), text(r)))
        r = s.call("file_delete", {"path": "/workspace/fill"})
        check(not r["isError"], "full disk: file_delete works and frees space (%r)" % text(r))
        r = s.call("exec", {"command": "cat /workspace/keep.txt"})
        check(not r["isError"] and r["structuredContent"]["stdout"] == "keep\n", "full disk: the workspace is intact")
        r = s.call("sandbox_snapshot", {})
        check(not r["isError"], "full disk: snapshots work again once space is free (%r)" % text(r))
        s.close()
    finally:
        subprocess.run(["umount", "-l", fsdir])
if not os.environ.get("AGENTBOX_FAULT_KEEP"): shutil.rmtree(root, ignore_errors=True)
print("all fault checks passed")
