#!/usr/bin/env bash
# Real third-party MCP clients against `ithaca up` (HTTP, bearer key) and
# `ithaca mcp` (stdio): the official Python SDK in each of its modes, the
# TypeScript SDK client pinned to 2026-07-28 and to legacy, and the MCP
# Inspector CLI in both eras. Each lists tools, opens a session with
# session_context, calls a gated tool and reads the session's resource.
# Then the research story through the 1.x lines deployed agents run (issue 8):
# the Node SDK `@modelcontextprotocol/sdk` (latest 1.x, and 1.11.x, which
# speaks up to 2025-03-26) and Python `mcp` (latest 1.x, and 1.9.0, the oldest
# with 2025-03-26), each at its own version and, from the latest ones, offering
# every older revision; and the smoke path of each over stdio.
#
# Usage: tests/clients/e2e.sh TOOLS_DIR BIN_DIR [POSTGRES_URL]
#   With POSTGRES_URL (a server where a scratch database may be created), the
#   research story runs a second time against a stack on PostgreSQL.
set -Eeuo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${1:?usage: e2e.sh TOOLS_DIR BIN_DIR}"
bin="${2:?usage: e2e.sh TOOLS_DIR BIN_DIR}"
for t in python node mcp-inspector python-mcp1 python-mcp1-old; do
  [[ -x "$tools/bin/$t" ]] || { echo "e2e: $tools/bin/$t is missing; run tests/clients/install.sh" >&2; exit 1; }
done
for d in node-sdk1 node-sdk1-old; do
  [[ -f "$tools/$d/node_modules/@modelcontextprotocol/sdk/package.json" ]] \
    || { echo "e2e: $tools/$d has no @modelcontextprotocol/sdk; run tests/clients/install.sh" >&2; exit 1; }
done
[[ -x "$bin/ithaca" ]] || { echo "e2e: $bin/ithaca is missing; build it first" >&2; exit 1; }

work="$(mktemp -d)"
pid=""
more_pids=()
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
  for p in "${more_pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null || true; rm -rf "$work"
}
trap cleanup EXIT
export HOME="$work/home"   # the inspector keeps state under ~/.mcp-inspector
mkdir -p "$HOME"

RUST_LOG=warn "$bin/ithaca" up --port-base 0 --data-dir "$work/stack" >"$work/up.log" 2>"$work/up.err" &
pid=$!
for _ in $(seq 1 300); do grep -q "ithaca: ready" "$work/up.log" 2>/dev/null && break; sleep 0.1; done
grep -q "ithaca: ready" "$work/up.log" || { echo "e2e: ithaca up did not get ready" >&2; cat "$work/up.err" >&2; exit 1; }
url="$(awk '$1 == "mcp" {print $2}' "$work/up.log")"
key="$(awk '$1 == "agent" && $2 == "key" {print $3}' "$work/up.log")"
echo "e2e: ithaca up serves $url"

failures=0
run() {
  local name="$1"; shift
  if "$@" >"$work/out" 2>&1; then
    echo "  ok    $name"
  else
    echo "  FAIL  $name"; sed 's/^/        /' "$work/out"; failures=$((failures + 1))
  fi
}
resource='doomberg://sessions/{session_id}'

for mode in 2026-07-28 legacy auto; do
  run "python mcp 2.3 ($mode)" "$tools/bin/python" "$here/mcp_smoke.py" "$url" --token "$key" --mode "$mode" \
    --tool session_close --resource "$resource"
done
# The research path: a skill run on the demo market data, and the catalog.
run "python mcp 2.3 (2026-07-28): run_skill vol.realized" "$tools/bin/python" "$here/mcp_smoke.py" "$url" --token "$key" \
  --mode 2026-07-28 --tool run_skill --tool-args '{"skill_id":"vol.realized","inputs":{"symbol":"AAPL","window":21}}' \
  --resource doomberg://skills/catalog
# A batch skill's progress (issue 14): run_skill of a strategy backtest with a progress callback.
for mode in 2026-07-28 legacy; do
  run "python mcp 2.3 ($mode): run_skill reports a backtest's progress" "$tools/bin/python" "$here/streaming.py" "$url" \
    --run-skill --token "$key" --mode "$mode"
done
run "typescript client 2.4 (legacy): get_price_history" "$tools/bin/node" "$here/mcp_smoke.mjs" "$url" --token "$key" \
  --mode legacy --tool get_price_history --tool-args '{"symbol":"MSFT","start":"2013-01-02","fields":["adj_close"]}' \
  --resource doomberg://data/providers
for mode in 2026-07-28 legacy; do
  run "typescript client 2.4 ($mode)" "$tools/bin/node" "$here/mcp_smoke.mjs" "$url" --token "$key" --mode "$mode" \
    --tool session_close --resource "$resource"
done

inspector() {
  local era="$1"
  local I="$tools/bin/mcp-inspector" H="Authorization: Bearer $key"
  "$I" --cli "$url" --protocol-era "$era" --header "$H" --method tools/list --format json >"$work/list.json"
  grep -q '"session_context"' "$work/list.json"
  "$I" --cli "$url" --protocol-era "$era" --header "$H" --method tools/call --tool-name session_context \
    --tool-args-json '{"prompt":"inspector research"}' --format json >"$work/open.json"
  local sid
  sid="$("$tools/bin/python" -c 'import json,sys; r=json.load(open(sys.argv[1])); r=r.get("result", r); print(r["structuredContent"]["session_id"])' "$work/open.json")"
  "$I" --cli "$url" --protocol-era "$era" --header "$H" --method resources/read --uri "doomberg://sessions/$sid" --format json >"$work/read.json"
  grep -q "$sid" "$work/read.json"
  "$I" --cli "$url" --protocol-era "$era" --header "$H" --method tools/call --tool-name session_close \
    --tool-args-json '{}' --format json >"$work/close.json"
  grep -q '"closed"' "$work/close.json"
}
for era in modern legacy; do
  run "inspector cli 2.12 ($era)" inspector "$era"
done

run "python mcp 2.3 over stdio (ithaca mcp)" "$tools/bin/python" "$here/mcp_smoke.py" --tool session_close \
  --resource "$resource" --stdio -- "$bin/ithaca" mcp --data-dir "$work/stdio"

human="$(awk '$1 == "human" && $2 == "key" {print $3}' "$work/up.log")"
# A provider credential and connection details that must never come back.
credential="sk-live-e2e-$$-do-not-leak"
echo "$credential" | "$bin/ithaca" accounts add --provider ibkr --label main --credential-stdin \
  --config-json '{"host": "gw.e2e-internal.example", "source_account": "U999"}' --data-dir "$work/stack" >/dev/null
export STORY_SECRETS="$credential,gw.e2e-internal.example,U999"
run "the research story on SQLite (python mcp 2.3, 2026-07-28)" "$tools/bin/python" "$here/story.py" "$url" "$key" "$human" -- \
  "$bin/ithaca" policy set --trading on --data-dir "$work/stack"
# A person's promote_strategy confirmed through elicitation (issue 14), trading on (the story turned it on).
for mode in 2026-07-28 legacy; do
  run "python mcp 2.3 ($mode): a person confirms promote_strategy through elicitation" "$tools/bin/python" \
    "$here/streaming.py" "$url" --confirm --token "$human" --mode "$mode"
done

# The 1.x client lines. Each full story starts with trading off (the story turns it on).
story1() { # $1 = name, rest = the client command; URL, keys and the policy command are appended
  local name="$1"; shift
  "$bin/ithaca" policy set --trading off --data-dir "$work/stack" >/dev/null
  run "$name" "$@" "$url" "$key" "$human" -- "$bin/ithaca" policy set --trading on --data-dir "$work/stack"
}
node_story=("$tools/bin/node" "$here/story.mjs")
story1 "the research story (node sdk 1.x latest, its own 2025-11-25)" "${node_story[@]}" --sdk "$tools/node-sdk1"
for v in 2025-06-18 2025-03-26 2024-11-05; do
  story1 "the research story (node sdk 1.x latest, offering $v)" "${node_story[@]}" --sdk "$tools/node-sdk1" --protocol-version "$v"
done
story1 "the research story (node sdk 1.11, its own 2025-03-26)" "${node_story[@]}" --sdk "$tools/node-sdk1-old"
story1 "the research story (node sdk 1.11, offering 2024-11-05)" "${node_story[@]}" --sdk "$tools/node-sdk1-old" --protocol-version 2024-11-05
story1 "the research story (python mcp 1.x latest, its own 2025-11-25)" "$tools/bin/python-mcp1" "$here/story.py"
for v in 2025-06-18 2025-03-26 2024-11-05; do
  story1 "the research story (python mcp 1.x latest, offering $v)" "$tools/bin/python-mcp1" "$here/story.py" --protocol-version "$v"
done
story1 "the research story (python mcp 1.9, its own 2025-03-26)" "$tools/bin/python-mcp1-old" "$here/story.py"
story1 "the research story (python mcp 2.3, legacy)" "$tools/bin/python" "$here/story.py" --mode legacy

# The smoke path of each 1.x client over stdio (`ithaca mcp`), one data folder each.
run "node sdk 1.x latest over stdio (ithaca mcp)" "${node_story[@]}" --sdk "$tools/node-sdk1" --stdio -- \
  "$bin/ithaca" mcp --data-dir "$work/stdio-node1"
run "node sdk 1.11 over stdio (ithaca mcp)" "${node_story[@]}" --sdk "$tools/node-sdk1-old" --stdio -- \
  "$bin/ithaca" mcp --data-dir "$work/stdio-node1-old"
run "python mcp 1.x latest over stdio (ithaca mcp)" "$tools/bin/python-mcp1" "$here/story.py" --stdio -- \
  "$bin/ithaca" mcp --data-dir "$work/stdio-py1"
run "python mcp 1.x latest offering 2025-03-26 over stdio (ithaca mcp)" "$tools/bin/python-mcp1" "$here/story.py" \
  --protocol-version 2025-03-26 --stdio -- "$bin/ithaca" mcp --data-dir "$work/stdio-py1-0326"
run "python mcp 1.9 over stdio (ithaca mcp)" "$tools/bin/python-mcp1-old" "$here/story.py" --stdio -- \
  "$bin/ithaca" mcp --data-dir "$work/stdio-py1-old"
run "python mcp 2.3 smoke path over stdio (ithaca mcp)" "$tools/bin/python" "$here/story.py" --stdio -- \
  "$bin/ithaca" mcp --data-dir "$work/stdio-py2"

# The astronomy story (issue 10): the real ZTF alerts and catalogs loaded into the running stack,
# a broker configured with a credential and connection details that must never come back.
data="$here/../../../shared/data"
"$bin/ithaca" ingest ztf "$data/ztf/alerts" --data-dir "$work/stack" >"$work/ingest.log" 2>&1 \
  || { echo "e2e: ithaca ingest ztf failed"; cat "$work/ingest.log"; exit 1; }
for catalog in hipparcos2_hp_le_6.0.csv openngc_galaxies_z_le_0.01.csv; do
  "$bin/ithaca" ingest catalog "$data/catalogs/$catalog" --data-dir "$work/stack" >>"$work/ingest.log" 2>&1 \
    || { echo "e2e: ithaca ingest catalog $catalog failed"; cat "$work/ingest.log"; exit 1; }
done
broker_secret="fink-token-e2e-$$-do-not-leak"
echo "$broker_secret" | "$bin/ithaca" brokers add --id fink --name Fink --operations alerts \
  --altdata-json '{"host": "fink.e2e-internal.example"}' --credential-stdin --data-dir "$work/stack" >/dev/null
for mode in 2026-07-28 legacy; do
  STORY_SECRETS="$broker_secret,fink.e2e-internal.example" \
    run "the astronomy story (python mcp 2.3, $mode)" "$tools/bin/python" "$here/story.py" --astro --mode "$mode" "$url" "$key"
done
STORY_SECRETS="$broker_secret,fink.e2e-internal.example" \
  run "the astronomy story (python mcp 1.x latest)" "$tools/bin/python-mcp1" "$here/story.py" --astro "$url" "$key"
# The GCN story (issue 26): the real circulars and notices, an event's circulars a page at a time,
# one circular, circular search and extractions.
"$bin/ithaca" ingest gcn "$data/gcn" --data-dir "$work/stack" >>"$work/ingest.log" 2>&1 \
  || { echo "e2e: ithaca ingest gcn failed"; cat "$work/ingest.log"; exit 1; }
for mode in 2026-07-28 legacy; do
  run "the GCN story (python mcp 2.3, $mode)" "$tools/bin/python" "$here/story.py" --gcn --mode "$mode" "$url" "$key"
done
run "the GCN story (python mcp 1.x latest)" "$tools/bin/python-mcp1" "$here/story.py" --gcn "$url" "$key"
# The filter story (issue 11): a person's session on a filter, the agent joins, activation approved.
for mode in 2026-07-28 legacy; do
  run "the filter story (python mcp 2.3, $mode)" "$tools/bin/python" "$here/story.py" --filters --mode "$mode" "$url" "$key" "$human"
done
run "the filter story (python mcp 1.x latest)" "$tools/bin/python-mcp1" "$here/story.py" --filters "$url" "$key" "$human"

# Seed 002's story on the SEC EDGAR files: every file of the folder whose
# filing index is there (Facebook's, Google's and Microsoft's instances have
# none, and ingest sec names them and fails).
sec="$data/fundamentals"
"$bin/ithaca" ingest sec "$sec/submissions" "$sec/companyfacts" "$sec/fsds" "$sec/xbrl"/aapl-* "$sec/form4" \
  --data-dir "$work/stack" >"$work/ingest-sec.log" 2>&1 \
  || { echo "e2e: ithaca ingest sec failed"; cat "$work/ingest-sec.log"; exit 1; }
for mode in 2026-07-28 legacy; do
  run "seed 002's research story on SEC filings (python mcp 2.3, $mode)" "$tools/bin/python" "$here/story.py" \
    --fundamentals --mode "$mode" "$url" "$key" "$human"
done
run "seed 002's research story on SEC filings (python mcp 1.x latest)" "$tools/bin/python-mcp1" "$here/story.py" \
  --fundamentals "$url" "$key" "$human"

if [[ -n "${3:-}" ]]; then
  # The same story on PostgreSQL, in a scratch database dropped afterwards.
  pg="$3"
  db="ithaca_e2e_$$"
  psql "$pg" -qAt -c "CREATE DATABASE $db" >/dev/null
  pg_db="${pg%/*}/$db"
  DOOMBERG_DB="$pg_db" RUST_LOG=warn "$bin/ithaca" up --port-base 0 --data-dir "$work/pgstack" >"$work/pgup.log" 2>"$work/pgup.err" &
  pgpid=$!
  for _ in $(seq 1 300); do grep -q "ithaca: ready" "$work/pgup.log" 2>/dev/null && break; sleep 0.1; done
  if grep -q "ithaca: ready" "$work/pgup.log"; then
    pgurl="$(awk '$1 == "mcp" {print $2}' "$work/pgup.log")"
    pgkey="$(awk '$1 == "agent" && $2 == "key" {print $3}' "$work/pgup.log")"
    pghuman="$(awk '$1 == "human" && $2 == "key" {print $3}' "$work/pgup.log")"
    echo "$credential" | "$bin/ithaca" accounts add --provider ibkr --label main --credential-stdin \
      --config-json '{"host": "gw.e2e-internal.example", "source_account": "U999"}' --data-dir "$work/pgstack" >/dev/null
    run "the research story on PostgreSQL (python mcp 2.3, 2026-07-28)" "$tools/bin/python" "$here/story.py" "$pgurl" "$pgkey" "$pghuman" -- \
      env DOOMBERG_DB="$pg_db" "$bin/ithaca" policy set --trading on --data-dir "$work/pgstack"
  else
    echo "  FAIL  ithaca up on PostgreSQL did not get ready"; cat "$work/pgup.err"; failures=$((failures + 1))
  fi
  kill "$pgpid" 2>/dev/null; wait "$pgpid" 2>/dev/null || true
  psql "$pg" -qAt -c "DROP DATABASE IF EXISTS $db" >/dev/null
fi

# The streaming mapping (issue 14): progress, log messages and an elicitation round trip
# through the Python SDK in both eras, against an edge fronting the conformance fixture.
if [[ -x "$bin/ithaca-fixture" ]]; then
  "$bin/ithaca-fixture" --listen 127.0.0.1:0 >"$work/fixture.log" 2>&1 &
  more_pids+=("$!")
  for _ in $(seq 1 100); do grep -qs "listening on" "$work/fixture.log" && break; sleep 0.1; done
  fixture="$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$work/fixture.log" | head -n1)"
  ITHACA_INTERNAL_KEY="e2e-streaming-internal-key-0123456789abc" RUST_LOG=warn "$bin/ithaca" serve edge \
    --auth off --no-session-gate --listen 127.0.0.1:0 --backend "http://$fixture" >"$work/fedge.log" 2>&1 &
  more_pids+=("$!")
  for _ in $(seq 1 100); do grep -qs "listening on" "$work/fedge.log" && break; sleep 0.1; done
  fedge="$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$work/fedge.log" | head -n1)"
  for mode in 2026-07-28 legacy; do
    run "python mcp 2.3 ($mode): progress, logs and an elicitation through a streaming backend" \
      "$tools/bin/python" "$here/streaming.py" "http://$fedge/mcp" --mode "$mode"
  done
  # Resource subscriptions: the listen stream (Python, 2026-07-28), subscribe and unsubscribe
  # (Python, legacy), and the legacy updates on the GET stream (Node SDK 1.x, which opens it).
  for mode in 2026-07-28 legacy; do
    run "python mcp 2.3 ($mode): resource subscriptions" \
      "$tools/bin/python" "$here/subscribe.py" "http://$fedge/mcp" --mode "$mode"
  done
  run "node sdk 1.x latest (legacy): resource updates on the GET stream" \
    "$tools/bin/node" "$here/subscribe.mjs" --sdk "$tools/node-sdk1" "http://$fedge/mcp"
else
  echo "  FAIL  $bin/ithaca-fixture is missing (cargo build -p ithaca-fixture)"; failures=$((failures + 1))
fi

if (( failures > 0 )); then
  echo "e2e: $failures client run(s) failed" >&2
  exit 1
fi
echo "e2e: every client passed"
