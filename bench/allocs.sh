#!/usr/bin/env bash
# Heap allocations per full-path call in the edge: `ithaca up`, the bench's
# probe backend and an edge in front of them (as `profile.sh` arranges
# them), the agent's session opened, then `ithaca-bench load` sends a fixed
# number of `tools/call bench_ping` while perf counts every call of libc's
# malloc, calloc and realloc in the edge process alone (uprobes), and the
# counts are divided by the calls served. It also counts the thread
# switches per call of the edge and of `ithaca up` (the services behind it).
#
#   cargo build --release -p ithaca -p ithaca-bench
#   bench/allocs.sh [requests] [ithaca binary]   # defaults: 20000, the one beside ithaca-bench
#   ALLOCS_SITES=1 bench/allocs.sh …             # and where they come from (perf call chains)
#
# Why perf and not a counting allocator in the binary: a `GlobalAlloc` is
# `unsafe` code, which the workspace forbids, and swapping the allocator of
# the binary measured would change what is measured. Rust's default
# allocator is libc's, so every heap allocation of the edge is one of these
# calls. Needs `perf` with uprobes (root, or perf_event_paranoid <= 1).
set -euo pipefail
cd "$(dirname "$0")/.."

requests="${1:-20000}"
bin="${CARGO_TARGET_DIR:-target}/release"
ithaca="${2:-$bin/ithaca}"
for tool in perf curl; do
    command -v "$tool" >/dev/null || { echo "allocs: $tool is missing" >&2; exit 1; }
done
for exe in "$ithaca" "$bin/ithaca-bench"; do
    [ -x "$exe" ] || { echo "allocs: no $exe (cargo build --release -p ithaca -p ithaca-bench)" >&2; exit 1; }
done
libc="$(ldd "$ithaca" | awk '/libc\.so/ {print $3}')"
[ -n "$libc" ] || { echo "allocs: $ithaca links no libc" >&2; exit 1; }
work="$(mktemp -d)"
pids=()
probes=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for probe in "${probes[@]}"; do perf probe -q -d "$probe" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

ITHACA_INTERNAL_KEY="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export ITHACA_INTERNAL_KEY RUST_LOG=warn

start() {
    local name="$1" needle="$2"
    shift 2
    "$@" >"$work/$name.out" 2>"$work/$name.err" &
    pids+=("$!")
    for _ in $(seq 1 300); do
        if grep -q "$needle" "$work/$name.out" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "allocs: $name did not print '$needle'" >&2
    cat "$work/$name.err" >&2
    exit 1
}
field() { grep -m1 "^ *$2" "$work/$1.out" | sed -e "s/^ *$2 *//" -e 's/ .*//'; }

start up "ithaca: ready" "$ithaca" up --port-base 0 --data-dir "$work/data"
token="$(field up "agent key")"
start backend "listening on" "$bin/ithaca-bench" backend --listen 127.0.0.1:0
backend="$(grep -m1 'listening on' "$work/backend.out" | awk '{print $NF}')"
start edge "edge listening on" "$ithaca" serve edge --listen 127.0.0.1:0 \
    --auth-url "$(field up "auth ")" --session-url "$(field up "session ")" \
    --backend "http://$backend"
edge="$(grep -m1 'edge listening on' "$work/edge.out" | awk '{print $NF}')"
edge_pid="${pids[2]}"
up_pid="${pids[0]}"

meta='{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"allocs.sh","version":"1"}}'
opened="$(curl -fsS "http://$edge/mcp" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: session_context' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"session_context\",\"arguments\":{\"prompt\":\"allocs.sh\"},\"_meta\":$meta}}")"
case "$opened" in *session_id*) ;; *) echo "allocs: session_context gave $opened" >&2; exit 1 ;; esac

for fn in malloc calloc realloc; do
    perf probe -q -x "$libc" -a "ithaca_$fn=$fn" >/dev/null
    probes+=("probe_libc:ithaca_$fn")
done
events="$(IFS=,; echo "${probes[*]}")"

for era in 2026-07-28 2025-06-18; do
    # Warm up (caches, connections), then count over a fixed number of calls.
    "$bin/ithaca-bench" load --addr "$edge" --token "$token" --era "$era" --requests 2000 >/dev/null
    perf stat -x, -e "$events,context-switches" -p "$edge_pid" -o "$work/stat-$era.csv" -- sleep 3600 &
    stat=$!
    perf stat -x, -e context-switches -p "$up_pid" -o "$work/up-$era.csv" -- sleep 3600 &
    up_stat=$!
    sleep 1
    "$bin/ithaca-bench" load --addr "$edge" --token "$token" --era "$era" \
        --requests "$requests" --seconds 600 >"$work/load-$era.json"
    sleep 1
    # perf stat prints its counts when its `sleep` ends. (SIGINT would not
    # reach it: a script's background jobs start with SIGINT ignored.)
    pkill -x -P "$stat" sleep
    pkill -x -P "$up_stat" sleep
    wait "$stat" "$up_stat" || true
    served="$(grep -m1 '"requests"' "$work/load-$era.json" | tr -dc '0-9')"
    total="$(awk -F, '/probe_libc/ {s += $1} END {print s}' "$work/stat-$era.csv")"
    echo "allocs: $era: $total allocations (malloc, calloc, realloc) for $served calls: $(awk -v t="$total" -v n="$served" 'BEGIN {printf "%.0f", t / n}') per call"
    # Thread switches per call: each is a hand-off between threads (a
    # tokio worker parking, a SQLite connection's thread answering); in
    # `bench/profile.sh` call graphs they are a third of `ithaca up`'s CPU.
    edge_cs="$(awk -F, '/context-switches/ {s += $1} END {print s}' "$work/stat-$era.csv")"
    up_cs="$(awk -F, '/context-switches/ {s += $1} END {print s}' "$work/up-$era.csv")"
    echo "allocs: $era: thread switches per call: edge $(awk -v t="$edge_cs" -v n="$served" 'BEGIN {printf "%.1f", t / n}'), ithaca up $(awk -v t="$up_cs" -v n="$served" 'BEGIN {printf "%.1f", t / n}')"
done

# With ALLOCS_SITES=1: where the mallocs come from, by library and by the
# nearest frame of Ithaca's code (call chains unwound from DWARF; release
# builds inline heavily, so a frame stands for what was inlined into it).
if [ -n "${ALLOCS_SITES:-}" ]; then
    perf record -q -e "${probes[0]}" --call-graph dwarf,8192 -m 1024 -p "$edge_pid" \
        -o "$work/sites.data" -- sleep 3600 &
    record=$!
    sleep 1
    "$bin/ithaca-bench" load --addr "$edge" --token "$token" --era 2026-07-28 \
        --requests 500 --concurrency 4 >/dev/null
    sleep 1
    pkill -x -P "$record" sleep
    wait "$record" || true
    perf script -F ip,sym -i "$work/sites.data" 2>/dev/null | python3 bench/alloc_sites.py
fi
