#!/usr/bin/env bash
# --record writes a transcript that `agentbox replay --loose` plays back against
# a fresh server without edits: durations, times and pids become placeholders.
# Usage: record_roundtrip.sh AGENTBOX SOURCE_TRANSCRIPT
set -euo pipefail
bin=$1 source=$2
dir=$(mktemp -d /tmp/agentbox-record-XXXXXX)
chmod 0711 "$dir"
trap 'rm -rf "$dir"' EXIT
"$bin" replay "$source" -- --record "$dir/recorded.jsonl"
lines=$(grep -c '"out"' "$dir/recorded.jsonl" || true)
if ((lines < 5)); then
  echo "FAIL: the recording holds only $lines outgoing messages" >&2
  exit 1
fi
"$bin" replay --loose "$dir/recorded.jsonl"
