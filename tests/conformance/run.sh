#!/usr/bin/env bash
# Runs the official MCP conformance suite against the edge fronting the
# fixture backend (authentication off, loopback), for both current revisions
# and the older ones the suite has scenarios for, with the expected-failures
# files beside this script (one per revision).
#
# Usage: tests/conformance/run.sh TOOLS_DIR BIN_DIR [OUT_DIR]
#   TOOLS_DIR  where tests/clients/install.sh installed the clients
#   BIN_DIR    where the built `ithaca` and `ithaca-fixture` binaries are
set -Eeuo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${1:?usage: run.sh TOOLS_DIR BIN_DIR [OUT_DIR]}"
bin="${2:?usage: run.sh TOOLS_DIR BIN_DIR [OUT_DIR]}"
out="${3:-$(mktemp -d)}"
mkdir -p "$out"
[[ -x "$tools/bin/conformance" ]] || { echo "conformance: $tools/bin/conformance is missing; run tests/clients/install.sh" >&2; exit 1; }
[[ -x "$bin/ithaca" && -x "$bin/ithaca-fixture" ]] || { echo "conformance: build ithaca and ithaca-fixture first ($bin)" >&2; exit 1; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Start a process (in this shell, so cleanup can stop it) and wait for its
# "listening on ADDR" line; the address is left in $addr.
addr=""
start() {
  local log="$1"; shift
  # Created here, not by the child's redirection, which a loaded machine
  # may run after the first read below.
  : >"$log"
  "$@" >"$log" 2>"$log.err" &
  pids+=("$!")
  addr=""
  for _ in $(seq 1 100); do
    addr="$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$log" | head -n1)"
    if [[ -n "$addr" ]]; then return 0; fi
    sleep 0.1
  done
  echo "conformance: $* did not start; its stderr:" >&2; cat "$log.err" >&2; return 1
}

start "$out/fixture.log" "$bin/ithaca-fixture" --listen 127.0.0.1:0
fixture="$addr"
start "$out/edge.log" env ITHACA_INTERNAL_KEY="conformance-run-internal-key-0123456789" RUST_LOG=warn \
  "$bin/ithaca" serve edge --auth off --no-session-gate --listen 127.0.0.1:0 --backend "http://$fixture"
edge="$addr"
url="http://$edge/mcp"
echo "conformance: edge at $url fronting the fixture at $fixture"

status=0
for rev in 2025-11-25 2026-07-28; do
  echo "==> conformance --requirements $rev"
  if ! "$tools/bin/conformance" server --url "$url" --requirements "$rev" \
      --expected-failures "$here/expected-failures-$rev.yml" -o "$out/$rev" >"$out/$rev.log" 2>&1; then
    status=1
    echo "conformance: $rev FAILED" >&2
  fi
  sed -n '/=== SUMMARY ===/,$p' "$out/$rev.log" | grep -E '^(Total|Baseline|  [~✗+-])|unexpected|Unexpected|Stale|stale' || true
done
# Older revisions. The suite (0.2.0-alpha.12) has no frozen requirement set for them
# (`--requirements` knows only 2025-11-25 and 2026-07-28), but its scenarios carry the
# revision they were introduced in, so `--spec-version REV` runs those that apply, with every
# message checked against REV's JSON schema:
#   2025-06-18: 27 scenarios at the stateful wire (the harness's client, SDK 1.x, still offers
#               its own latest version in `initialize`; the schema check is 2025-06-18's);
#   2025-03-26: server-session-lifecycle only, whose `initialize` offers 2025-03-26 itself.
# It has nothing for 2024-11-05 ("Unknown spec revision").
for rev in 2025-06-18 2025-03-26; do
  echo "==> conformance --spec-version $rev"
  if ! "$tools/bin/conformance" server --url "$url" --spec-version "$rev" \
      --expected-failures "$here/expected-failures-$rev.yml" -o "$out/$rev" >"$out/$rev.log" 2>&1; then
    status=1
    echo "conformance: $rev FAILED" >&2
  fi
  sed -n '/=== SUMMARY ===/,$p' "$out/$rev.log" | grep -E '^(Total|Baseline|  [~✗+-])|unexpected|Unexpected|Stale|stale' || true
done
echo "conformance: logs in $out"
exit "$status"
