#!/usr/bin/env bash
# Runs the sandbox test binary as an unprivileged user, the way most people
# run agentbox. As root, creates the user "agentbox-test" (with a home, for
# the host-home canary) and runs the tests as that user; as any other user,
# runs them directly. Fails loudly when the user cannot be created.
# Usage: run_unprivileged.sh SANDBOX_TESTS_BINARY [AGENT_BINARY] [catch args...]
set -euo pipefail
tests=$(realpath "${1:?usage: run_unprivileged.sh SANDBOX_TESTS_BINARY [AGENT_BINARY] [catch args...]}")
shift
agent=""
if [[ $# -gt 0 && $1 != -* && -x $1 ]]; then agent=$(realpath "$1"); shift; fi

if [[ $(id -u) != 0 ]]; then
  exec "$tests" "$@"
fi

user=agentbox-test
if ! id -u "$user" >/dev/null 2>&1; then
  # A group of that name left behind (its user deleted by hand) is reused.
  group=(); getent group "$user" >/dev/null && group=(-g "$user")
  useradd --create-home --shell /bin/bash "${group[@]}" "$user" || { echo "FAIL: cannot create user $user" >&2; exit 1; }
fi
# The user must reach both binaries. A checkout under /root (mode 0700) is out
# of its reach: run copies from a directory of their own instead.
if ! runuser -u "$user" -- test -x "$tests" || { [[ -n $agent ]] && ! runuser -u "$user" -- test -x "$agent"; }; then
  copies=$(mktemp -d /tmp/agentbox-unprivileged-XXXXXX)
  chmod 0755 "$copies"
  trap 'rm -rf "$copies"' EXIT
  cp "$tests" "$copies/"
  tests=$copies/$(basename "$tests")
  if [[ -n $agent ]]; then
    # The relay agent of malformed_line_test.cpp is built beside the agent.
    corrupting=$(dirname "$agent")/agentbox-corrupting-agent
    if [[ -x $corrupting ]]; then
      cp "$corrupting" "$copies/"
      export_corrupting=$copies/agentbox-corrupting-agent
    fi
    cp "$agent" "$copies/"
    agent=$copies/$(basename "$agent")
  fi
  echo "note: $user cannot reach the build directory; running copies from $copies" >&2
fi
home=$(getent passwd "$user" | cut -d: -f6)
cd /tmp
runuser -u "$user" -- env -i HOME="$home" USER="$user" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
  ${agent:+AGENTBOX_TEST_AGENT="$agent"} ${export_corrupting:+AGENTBOX_TEST_CORRUPTING_AGENT="$export_corrupting"} \
  "$tests" "$@"
