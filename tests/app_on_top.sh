#!/usr/bin/env bash
# app/ is the composition root (docs/design.md): the commands a
# person runs, wired from server/, tools/, sandbox/ and persistence/. Nothing
# outside app/ may include it, or the one-way dependency order has a cycle.
# Usage: app_on_top.sh SOURCE_DIR. Prints every offending include line.
set -euo pipefail
cd "${1:?usage: app_on_top.sh SOURCE_DIR}"
hits=$(find . \( -path ./app -o -path ./.git -o -path './build*' -o -name node_modules \) -prune -o \
         \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cc' \) -print0 |
       xargs -0 grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]app/' || true)
if [[ -n $hits ]]; then
  echo "app/ is the top: nothing outside it may include it. Offending lines:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "ok: nothing outside app/ includes app/"
