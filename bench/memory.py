#!/usr/bin/env python3
"""Memory of the server and of one idle sandbox (issue 6: RSS under 10 MB and
5 MB), RSS and PSS from /proc/PID/smaps_rollup, through the real server over
raw stdio JSON-RPC (no SDK, so it also runs against old builds):

  1. the server after initialize + tools/list;
  2. after one exec of `true`: the server, and every process under the
     sandbox's bwrap with the session shell alive;
  3. with --idle-wait S: the same S seconds later (a server started with
     --shell-idle-timeout shorter than S has stopped the shell by then), then
     the time of the next exec, which starts a fresh shell.

Usage: bench/memory.py BIN [--idle-wait S] [--runs N] [-- extra serve args]
  e.g. bench/memory.py build/agentbox --idle-wait 2 -- --shell-idle-timeout 1s
"""
import argparse, json, os, shutil, subprocess, tempfile, time


def mem(pid):
    d = {}
    with open(f'/proc/{pid}/smaps_rollup') as f:
        for line in f:
            k, v = line.split(':', 1)
            if k in ('Rss', 'Pss'):
                d[k] = int(v.split()[0])
    return d


def children(pid):
    out = []
    for t in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{t}/children') as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            pass
    return out


def tree(pid):
    out = [pid]
    for c in children(pid):
        out += tree(c)
    return out


def comm(pid):
    with open(f'/proc/{pid}/comm') as f:
        return f.read().strip()


def run(binary, idle_wait, extra):
    state = tempfile.mkdtemp(prefix='agentbox-memory-')
    p = subprocess.Popen([binary, 'serve', '--state-dir', state, '--log-level', 'warn'] + extra,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
    ids = iter(range(1, 1000))

    def rpc(method, params):
        p.stdin.write(json.dumps({'jsonrpc': '2.0', 'id': next(ids), 'method': method, 'params': params}) + '\n')
        p.stdin.flush()
        while True:
            m = json.loads(p.stdout.readline())
            if 'id' in m:
                return m

    def report(tag):
        s = mem(p.pid)
        line = f"{tag}: server RSS {s['Rss'] / 1024:.2f} MiB, PSS {s['Pss'] / 1024:.2f} MiB"
        for b in [c for c in children(p.pid) if comm(c) == 'bwrap']:
            procs = [(comm(q), mem(q)) for q in tree(b)]
            rss = sum(m['Rss'] for _, m in procs)
            pss = sum(m['Pss'] for _, m in procs)
            line += (f" | sandbox RSS {rss / 1024:.2f} MiB, PSS {pss / 1024:.2f} MiB ("
                     + ', '.join(f"{c} {m['Rss']}/{m['Pss']} KiB" for c, m in procs) + ')')
        print(line, flush=True)

    try:
        rpc('initialize', {'protocolVersion': '2025-06-18', 'capabilities': {}, 'clientInfo': {'name': 'memory', 'version': '1'}})
        p.stdin.write(json.dumps({'jsonrpc': '2.0', 'method': 'notifications/initialized'}) + '\n')
        p.stdin.flush()
        rpc('tools/list', {})
        time.sleep(0.5)
        report('after tools/list')
        rpc('tools/call', {'name': 'exec', 'arguments': {'command': 'true'}})
        time.sleep(1)
        report('after an exec, session shell alive')
        if idle_wait:
            time.sleep(idle_wait)
            report(f'{idle_wait:g} s later')
            t = time.perf_counter()
            rpc('tools/call', {'name': 'exec', 'arguments': {'command': 'true'}})
            first = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            rpc('tools/call', {'name': 'exec', 'arguments': {'command': 'true'}})
            print(f'next exec {first:.1f} ms, the one after {(time.perf_counter() - t) * 1000:.1f} ms', flush=True)
    finally:
        p.stdin.close()
        p.wait()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('binary')
    ap.add_argument('--idle-wait', type=float, default=0)
    ap.add_argument('--runs', type=int, default=1)
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != '--']
    for _ in range(a.runs):
        run(a.binary, a.idle_wait, extra)
