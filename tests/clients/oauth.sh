#!/usr/bin/env bash
# Hosted-agent OAuth with a real client: the official Python SDK's
# OAuthClientProvider (`mcp` 2.3) against `ithaca up`, in both eras
# (2026-07-28 and the legacy initialize profile), registering by dynamic
# client registration and by a client metadata document served on loopback.
# A person signs in, allows and later revokes the app in headless Chromium
# (oauth_client.py says each step it checks).
#
# The stack runs with ITHACA_OAUTH_ALLOW_PRIVATE_METADATA=1, the test mode in
# which the console fetches client metadata documents over plain HTTP from
# loopback (never set it in a deployment); nothing else is relaxed.
#
# Usage: tests/clients/oauth.sh TOOLS_DIR BIN_DIR
# Needs chromium and chromedriver on PATH. Fails on anything missing.
set -Eeuo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${1:?usage: oauth.sh TOOLS_DIR BIN_DIR}"
bin="${2:?usage: oauth.sh TOOLS_DIR BIN_DIR}"
[[ -x "$tools/bin/python" ]] || { echo "oauth: $tools/bin/python is missing; run tests/clients/install.sh" >&2; exit 1; }
[[ -x "$bin/ithaca" ]] || { echo "oauth: $bin/ithaca is missing; build it first" >&2; exit 1; }
command -v chromium >/dev/null && command -v chromedriver >/dev/null \
  || { echo "oauth: chromium and chromedriver are needed (apt-get install chromium chromium-driver)" >&2; exit 1; }

work="$(mktemp -d)"
pid=""
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

ITHACA_OAUTH_ALLOW_PRIVATE_METADATA=1 RUST_LOG=warn "$bin/ithaca" up --port-base 0 --data-dir "$work/stack" \
  >"$work/up.log" 2>"$work/up.err" &
pid=$!
for _ in $(seq 1 300); do grep -q "ithaca: ready" "$work/up.log" 2>/dev/null && break; sleep 0.1; done
grep -q "ithaca: ready" "$work/up.log" || { echo "oauth: ithaca up did not get ready" >&2; cat "$work/up.err" >&2; exit 1; }
url="$(awk '$1 == "mcp" {print $2}' "$work/up.log")"
human="$(awk '$1 == "human" && $2 == "key" {print $3}' "$work/up.log")"
[[ -n "$url" && -n "$human" ]] || { echo "oauth: ithaca up printed no mcp URL or human key" >&2; exit 1; }
echo "oauth: ithaca up serves $url"

failures=0
run() {
  local name="$1"; shift
  if "$@" >"$work/out" 2>&1; then
    echo "  ok    $name"
  else
    echo "  FAIL  $name"; sed 's/^/        /' "$work/out"; failures=$((failures + 1))
  fi
}
for mode in 2026-07-28 legacy; do
  run "python mcp 2.3 OAuth ($mode): registration, consent, tools, refresh, revocation" \
    "$tools/bin/python" "$here/oauth_client.py" "$url" "$human" --mode "$mode"
  run "python mcp 2.3 OAuth ($mode): client metadata document, consent, tools, refresh, revocation" \
    "$tools/bin/python" "$here/oauth_client.py" "$url" "$human" --mode "$mode" --cimd
done

if (( failures > 0 )); then
  echo "oauth: $failures run(s) failed" >&2
  exit 1
fi
echo "oauth: every run passed"
