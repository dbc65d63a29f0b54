#!/usr/bin/env bash
# Runs the official MCP conformance suite's authorization-server scenarios
# (`conformance authorization`: authorization-server-metadata-endpoint and
# authorization-code-grant) against the built-in authorization server of
# `ithaca up`, as it ships. The suite's code grant waits for a person at a
# browser; authorization.py registers the suite's client and plays that person
# in headless Chromium (sign-in with the human key, Allow on the consent page).
#
# Usage: tests/conformance/authorization.sh TOOLS_DIR BIN_DIR [OUT_DIR]
#   TOOLS_DIR  where tests/clients/install.sh installed the clients
#   BIN_DIR    where the built `ithaca` binary is
# Needs chromium and chromedriver on PATH. Fails on anything missing.
set -Eeuo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${1:?usage: authorization.sh TOOLS_DIR BIN_DIR [OUT_DIR]}"
bin="${2:?usage: authorization.sh TOOLS_DIR BIN_DIR [OUT_DIR]}"
out="${3:-$(mktemp -d)}"
mkdir -p "$out"
[[ -x "$tools/bin/conformance" && -x "$tools/bin/python" ]] \
  || { echo "authorization: $tools/bin/conformance or python is missing; run tests/clients/install.sh" >&2; exit 1; }
[[ -x "$bin/ithaca" ]] || { echo "authorization: build ithaca first ($bin)" >&2; exit 1; }
command -v chromium >/dev/null && command -v chromedriver >/dev/null \
  || { echo "authorization: chromium and chromedriver are needed (apt-get install chromium chromium-driver)" >&2; exit 1; }

work="$(mktemp -d)"
pid=""
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

RUST_LOG=warn "$bin/ithaca" up --port-base 0 --data-dir "$work/stack" >"$work/up.log" 2>"$work/up.err" &
pid=$!
for _ in $(seq 1 300); do grep -q "ithaca: ready" "$work/up.log" 2>/dev/null && break; sleep 0.1; done
grep -q "ithaca: ready" "$work/up.log" || { echo "authorization: ithaca up did not get ready" >&2; cat "$work/up.err" >&2; exit 1; }
url="$(awk '$1 == "mcp" {print $2}' "$work/up.log")"
human="$(awk '$1 == "human" && $2 == "key" {print $3}' "$work/up.log")"
[[ -n "$url" && -n "$human" ]] || { echo "authorization: ithaca up printed no mcp URL or human key" >&2; exit 1; }
issuer="${url%/mcp}"
echo "authorization: ithaca up serves $url; issuer $issuer"

"$tools/bin/python" "$here/authorization.py" "$tools/bin/conformance" "$issuer" "$human" "$out"
