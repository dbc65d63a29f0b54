#!/usr/bin/env bash
# Profile the full path by hand: `ithaca up`, the bench's probe backend and
# an edge in front of them (as `ithaca-bench` arranges them), the agent's
# session opened, then `ithaca-bench load` drives `tools/call bench_ping`
# while `perf record` samples every CPU. Prints the load's figures and the
# share of each thread by binary (with the process it belongs to) and the top symbols; everything it starts is
# stopped at the end.
#
#   cargo build --release -p ithaca -p ithaca-bench
#   bench/profile.sh [seconds] [out-dir]      # defaults: 10, target/ithaca-bench/profile
#
# PROFILE_TCP=1 has the edge reach the services and the probe over loopback
# TCP instead of their unix sockets (as `ithaca-bench --tcp-hops`).
# PROFILE_RATE=N sends N calls a second (open loop, as the bench's
# half-of-peak phase does) instead of as many as 16 connections can.
# PROFILE_COUNT=1 runs no profiler: it reads each server's CPU time and
# context switches from /proc over the load's middle and prints both per
# call (a profiler's own sampling inflates the first), and the KiB per call
# `ithaca up` wrote to its files (the log's pages, the checkpoints' copies).
# PROFILE_SLOW=MS also prints the calls of MS milliseconds or more, counted
# per 100 ms of the run they started in (`ithaca-bench load --slow-ms`): a
# tail that comes in bursts shows as a few crowded lines, a tail of queueing
# as many thin ones. PROFILE_SLOW_WINDOW=MS sets the window (default 100);
# the load prints its start on the wall clock, to line the windows up with
# another recorder's (`perf record -k CLOCK_REALTIME`).
# PROFILE_SCHED=1 records the scheduler instead of samples and prints each
# thread's wake-up delays (`perf sched latency`): how long a woken thread
# waited for a CPU, the cause of tail latency a sample profile cannot show.
# With PROFILE_SLOW as well, it prints who ran on the CPUs in the most
# crowded windows of slow calls (`bench/sched_windows.py`): another
# program starting, say, or the stack's threads waiting for a CPU.
#
# PROFILE_SYSCALLS=1 counts each server's system calls per call over 4 s
# (`perf stat` of the `sys_enter_*` tracepoints): the hops' writes and
# reads, the log's `pwrite`s and SQLite's `fcntl` locks.
# PROFILE_DWARF=edge|up|probe records that one process for 3 s with call
# graphs unwound from DWARF (`perf report -G` on the result shows who
# calls, say, `memmove`), since release binaries carry no frame pointers.
# PROFILE_CALLGRIND=1 runs the edge under `valgrind --tool=callgrind` and
# counts its instructions per call over 1,000 calls at 50 a second after
# the warm-up (valgrind counts instructions, so the figure repeats).
#
# Needs `perf` (Debian's linux-perf) and `curl`; perf needs
# kernel.perf_event_paranoid <= 1 or root. Release binaries carry no frame
# pointers, so the report is by self time (where the cycles are spent), not
# by call graph.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-10}"
out="${2:-target/ithaca-bench/profile}"
bin="${CARGO_TARGET_DIR:-target}/release"
for tool in perf curl; do
    command -v "$tool" >/dev/null || { echo "profile: $tool is missing" >&2; exit 1; }
done
for exe in ithaca ithaca-bench; do
    [ -x "$bin/$exe" ] || { echo "profile: no $bin/$exe (cargo build --release -p ithaca -p ithaca-bench)" >&2; exit 1; }
done
mkdir -p "$out"
work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ITHACA_INTERNAL_KEY="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export ITHACA_INTERNAL_KEY RUST_LOG=warn

# Start a process with its stdout in $work/<name>.out; wait for `needle`.
start() {
    local name="$1" needle="$2"
    shift 2
    "$@" >"$work/$name.out" 2>"$work/$name.err" &
    pids+=("$!")
    for _ in $(seq 1 300); do
        if grep -q "$needle" "$work/$name.out" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "profile: $name did not print '$needle'" >&2
    cat "$work/$name.err" >&2
    exit 1
}
# The value after `label` on a line of $work/<name>.out.
field() { grep -m1 "^ *$2" "$work/$1.out" | sed -e "s/^ *$2 *//" -e 's/ .*//'; }

start up "ithaca: ready" "$bin/ithaca" up --port-base 0 --data-dir "$work/data"
token="$(field up "agent key")"
# How the edge reaches a service of `ithaca up`: its unix socket (the line's
# last word), or its port with PROFILE_TCP=1 (as ithaca-bench --tcp-hops).
hop() {
    local line
    line="$(grep -m1 "^ *$1" "$work/up.out" | sed -e "s/^ *$1 *//")"
    if [ "${PROFILE_TCP:-0}" = 1 ]; then echo "${line%% *}"; else echo "${line##* }"; fi
}
start backend "listening on" "$bin/ithaca-bench" backend --listen 127.0.0.1:0 --unix-socket "$work/probe.sock"
backend="http://$(grep -m1 'listening on' "$work/backend.out" | awk '{print $NF}')"
if [ "${PROFILE_TCP:-0}" != 1 ]; then backend="unix:$work/probe.sock"; fi
callgrind=()
if [ "${PROFILE_CALLGRIND:-0}" = 1 ]; then
    command -v valgrind >/dev/null || { echo "profile: valgrind is missing" >&2; exit 1; }
    callgrind=(valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out.%p")
fi
start edge "edge listening on" "${callgrind[@]}" "$bin/ithaca" serve edge --listen 127.0.0.1:0 \
    --auth-url "$(hop "auth ")" --session-url "$(hop "session ")" \
    --backend "$backend"
edge="$(grep -m1 'edge listening on' "$work/edge.out" | awk '{print $NF}')"

meta='{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"profile.sh","version":"1"}}'
opened="$(curl -fsS "http://$edge/mcp" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: session_context' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"session_context\",\"arguments\":{\"prompt\":\"profile.sh\"},\"_meta\":$meta}}")"
case "$opened" in *session_id*) ;; *) echo "profile: session_context gave $opened" >&2; exit 1 ;; esac

echo "profile: edge $edge, ithaca up pid ${pids[0]}, edge pid ${pids[2]}, probe pid ${pids[1]}"
# Warm up, then sample for the load's middle.
"$bin/ithaca-bench" load --addr "$edge" --token "$token" --seconds 2 >/dev/null
rate=()
if [ -n "${PROFILE_RATE:-}" ]; then rate=(--rate "$PROFILE_RATE"); fi
if [ -n "${PROFILE_SLOW:-}" ]; then rate+=(--slow-ms "$PROFILE_SLOW" --slow-window-ms "${PROFILE_SLOW_WINDOW:-100}"); fi
"$bin/ithaca-bench" load --addr "$edge" --token "$token" --seconds "$seconds" "${rate[@]}" >"$out/load.txt" &
load=$!
# Wait for the load, print its figures, and set $rps to its calls a second.
finish_load() {
    wait "$load"
    cat "$out/load.txt"
    rps="$(grep -m1 '"rps"' "$out/load.txt" | tr -dc '0-9.')"
}
sleep 1
if [ "${PROFILE_CALLGRIND:-0}" = 1 ]; then
    # The warm-up and this load's first second under valgrind are not
    # counted: zero the counts, send 1,000 calls, dump.
    wait "$load"
    callgrind_control -z "${pids[2]}" >/dev/null 2>&1
    "$bin/ithaca-bench" load --addr "$edge" --token "$token" --seconds 20 --rate 50 >"$out/callgrind-load.txt"
    callgrind_control -d "${pids[2]}" >/dev/null 2>&1
    sleep 1
    calls="$(grep -m1 '"requests"' "$out/callgrind-load.txt" | tr -dc '0-9')"
    dump="$(ls -t "$out"/callgrind.out.*.1 | head -n 1)"
    callgrind_annotate --threshold=100 "$dump" 2>/dev/null >"$out/callgrind.txt"
    total="$(grep -m1 'PROGRAM TOTALS' "$out/callgrind.txt" | awk '{ gsub(",", "", $1); print $1 }')"
    echo "=== the edge under callgrind: $calls calls, $((total / calls)) instructions per call ($dump)"
    echo "=== of them in libc's copies and allocator, per call"
    grep -E ':(__memcpy|__memmove|malloc|_int_malloc|free|_int_free)[a-z_]* ' "$out/callgrind.txt" \
        | awk -v calls="$calls" '{ n = $1; gsub(",", "", n); f = $0; sub(/ \[.*/, "", f); sub(/.*:/, "", f); printf "%9.0f  %s\n", n / calls, f }' \
        | tee "$out/callgrind-memory.txt"
    exit 0
fi
if [ "${PROFILE_SYSCALLS:-0}" = 1 ]; then
    events=""
    for call in writev write read readv recvfrom sendto sendmsg recvmsg epoll_wait futex pwrite64 fcntl fsync fdatasync; do
        events="$events,syscalls:sys_enter_$call"
    done
    for entry in "ithaca-up:${pids[0]}" "edge:${pids[2]}" "probe:${pids[1]}"; do
        perf stat -x, -e "${events#,}" -p "${entry##*:}" -o "$out/syscalls-${entry%%:*}.txt" -- sleep 4 &
    done
    finish_load
    echo "=== system calls per call over 4 s at ${rps} calls/s"
    for name in ithaca-up edge probe; do
        awk -F, -v name="$name" -v calls="$(awk -v r="$rps" 'BEGIN { print r * 4 }')" \
            '/syscalls:/ && $1 > 0 { sub("syscalls:sys_enter_", "", $3); printf "%-10s %-12s %6.2f\n", name, $3, $1 / calls }' \
            "$out/syscalls-$name.txt"
    done | tee "$out/syscalls.txt"
    exit 0
fi
if [ -n "${PROFILE_DWARF:-}" ]; then
    case "$PROFILE_DWARF" in
        up) target="${pids[0]}" ;;
        probe) target="${pids[1]}" ;;
        edge) target="${pids[2]}" ;;
        *) echo "profile: PROFILE_DWARF is edge, up or probe" >&2; exit 1 ;;
    esac
    perf record -F 499 --call-graph dwarf,16384 -p "$target" -o "$out/perf.data" -- sleep 3 2>"$out/perf-record.log"
    wait "$load"
    cat "$out/load.txt"
    echo "profile: $out/perf.data (perf report -i $out/perf.data --no-children -G)"
    exit 0
fi
if [ "${PROFILE_SCHED:-0}" = 1 ]; then
    perf sched record -k CLOCK_MONOTONIC -a -o "$out/sched.data" -- sleep "$((seconds - 2))" 2>"$out/perf-record.log"
    offset="$(python3 -c 'import time; print(time.time() - time.monotonic())')"
    wait "$load"
    cat "$out/load.txt"
    if [ -n "${PROFILE_SLOW:-}" ]; then
        echo "=== who had the CPUs in the most crowded windows of slow calls"
        perf sched timehist -w -i "$out/sched.data" >"$out/timehist.txt" 2>/dev/null
        python3 bench/sched_windows.py "$out/timehist.txt" "$out/load.txt" "$offset" 5 \
            | tee "$out/windows.txt"
    fi
    echo "=== wake-up delays by thread (perf sched latency, worst first)"
    perf sched latency -i "$out/sched.data" --sort max 2>/dev/null \
        | grep -E 'tokio|ithaca|sqlx|Task|Average|---' | head -n 30 | tee "$out/sched.txt"
    echo "=== threads (thread id, process)"
    for entry in "ithaca-up:${pids[0]}" "edge:${pids[2]}" "probe:${pids[1]}"; do
        for tid in $(ls "/proc/${entry##*:}/task"); do echo "$tid ${entry%%:*}"; done
    done | tee -a "$out/sched.txt"
    exit 0
fi
if [ "${PROFILE_COUNT:-0}" = 1 ]; then
    # CPU time (user + system, clock ticks) and context switches of every
    # thread of a process, as "ticks switches".
    counters() {
        local switches
        switches="$(cat /proc/"$1"/task/*/status 2>/dev/null \
            | awk '/^(non)?voluntary_ctxt_switches/ { s += $2 } END { print s }')"
        echo "$(awk '{ print $14 + $15 }' /proc/"$1"/stat) $switches"
    }
    window=$((seconds - 2))
    # What `ithaca up` wrote to its files, by `write_bytes` of
    # /proc/PID/io: counted as pages of the page cache are dirtied (a page
    # written again before the kernel writes it back counts once), so the
    # log's pages and the checkpoints' copies into the database.
    disk() { awk '/^write_bytes/ { print $2 }' /proc/"$1"/io; }
    declare -A before
    for entry in "ithaca-up:${pids[0]}" "edge:${pids[2]}" "probe:${pids[1]}"; do
        before[${entry%%:*}]="$(counters "${entry##*:}")"
    done
    disk0="$(disk "${pids[0]}")"
    sleep "$window"
    disk1="$(disk "${pids[0]}")"
    declare -A after
    for entry in "ithaca-up:${pids[0]}" "edge:${pids[2]}" "probe:${pids[1]}"; do
        after[${entry%%:*}]="$(counters "${entry##*:}")"
    done
    finish_load
    echo "=== per call over ${window} s at ${rps} calls/s: server CPU (user + system) and context switches"
    for name in ithaca-up edge probe; do
        set -- ${before[$name]} ${after[$name]}
        awk -v name="$name" -v t0="$1" -v s0="$2" -v t1="$3" -v s1="$4" \
            -v hz="$(getconf CLK_TCK)" -v calls="$(awk -v r="$rps" -v w="$window" 'BEGIN { print r * w }')" \
            'BEGIN { printf "%-10s %6.0f µs  %5.2f switches\n", name, (t1 - t0) / hz * 1e6 / calls, (s1 - s0) / calls }'
    done | tee "$out/count.txt"
    awk -v d="$((disk1 - disk0))" -v calls="$(awk -v r="$rps" -v w="$window" 'BEGIN { print r * w }')" \
        'BEGIN { printf "ithaca-up  %6.1f KiB written to disk per call\n", d / 1024 / calls }' | tee -a "$out/count.txt"
    exit 0
fi
perf record -a -F 997 -o "$out/perf.data" -- sleep "$((seconds - 2))" 2>"$out/perf-record.log"
wait "$load"
cat "$out/load.txt"
# Which process each thread belongs to (perf reports threads).
: >"$out/threads.txt"
for entry in "ithaca-up:${pids[0]}" "edge:${pids[2]}" "probe:${pids[1]}"; do
    for tid in $(ls "/proc/${entry##*:}/task"); do
        echo "$tid ${entry%%:*}" >>"$out/threads.txt"
    done
done
# Shares of all samples (every CPU): per thread and binary, then by symbol.
report() { perf report -i "$out/perf.data" --stdio "$@" 2>/dev/null | grep -v '^#' | grep -v '^$' || true; }
{
    echo "=== threads (thread id, process)"
    cat "$out/threads.txt"
    echo "=== share of all samples by thread and binary"
    report --sort pid,dso --percent-limit 0.5
    echo "=== top symbols"
    report --sort comm,dso,sym --percent-limit 0.4 | head -n 60
} >"$out/report.txt"
cat "$out/report.txt"
echo "profile: $out/perf.data, $out/report.txt"
