#!/usr/bin/env bash
# The house's layout rules, over the include lines (docs/design.md, "Layout"):
#   agent/     the in-box program: includes only agent/, contract/, os/, rpc/
#   contract/  what both sides of the wall agree on: only contract/, os/, rpc/
#   os/        the OS floor: only os/
#   network/   the egress proxy and its policy: only network/, os/
#   sandbox/, persistence/, tools/, server/ never include agent/
#   nothing but app/ (the composition root) includes app/
# and no C++ source file over 600 lines. Usage: check.sh [SOURCE_DIR]
# Prints every violation and exits 1 if there is one.
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2
max_lines=600

# Includes that break a rule on purpose, as 'file:included' (none today:
# app/, which may include everything, holds the `agentbox agent` subcommand
# and doctor's seccomp probe).
exceptions=()

failures=0
fail() {
  echo "layout: $*" >&2
  failures=$((failures + 1))
}

sources() {  # every C++ source of the project, build trees and node_modules left out
  find . \( -name 'build*' -o -name node_modules -o -name '.git' \) -prune -o \
    -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cc' \) -print | sed 's|^\./||' | sort
}

is_exception() {
  local entry
  for entry in "${exceptions[@]}"; do [[ "$entry" == "$1:$2" ]] && return 0; done
  return 1
}

# allowed FOLDER INCLUDED_FOLDER: whether FOLDER may include from INCLUDED_FOLDER.
allowed() {
  local from=$1 to=$2
  [[ "$from" == "$to" ]] && return 0
  case "$from" in
    agent) [[ "$to" =~ ^(contract|os|rpc)$ ]] ;;
    contract) [[ "$to" =~ ^(os|rpc)$ ]] ;;
    os) return 1 ;;
    network) [[ "$to" == os ]] ;;
    sandbox | persistence | tools | server) [[ "$to" != agent && "$to" != app ]] ;;
    app) return 0 ;;
    *) [[ "$to" != app ]] ;;  # tests/, bench/: anything but the composition root
  esac
}

while IFS= read -r file; do
  lines=$(wc -l <"$file")
  ((lines > max_lines)) && fail "$file has $lines lines (at most $max_lines)"
  from=${file%%/*}
  [[ "$file" == */* ]] || from=.
  while IFS= read -r included; do
    to=${included%%/*}
    [[ -d "$to" ]] || continue  # a system or third-party header
    allowed "$from" "$to" && continue
    is_exception "$file" "$included" && continue
    fail "$file includes $included ($from/ may not include $to/)"
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\/[^"]*\)".*/\1/p' "$file")
done < <(sources)

for entry in "${exceptions[@]}"; do
  [[ -f "${entry%%:*}" ]] || echo "layout: note: ${entry%%:*} has moved; remove its exception from $0" >&2
done

if ((failures > 0)); then
  echo "layout: $failures violation(s)" >&2
  exit 1
fi
echo "layout: ok"
