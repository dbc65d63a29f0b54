#!/usr/bin/env bash
# A replicated Ithaca stack on one machine, as on Kubernetes but without it:
# two edges behind HAProxy, two session replicas, one each of auth, broker,
# skills and approvals, all on one PostgreSQL database with a schema per
# service (ithaca_auth, ithaca_session, …). ctrl-c stops everything.
#
#   deploy/local/run.sh [POSTGRES_URL]       # default postgres://postgres@127.0.0.1:5432/ithaca
#
# Environment:
#   ITHACA_BIN           the binary (default: ithaca on PATH, else target/release/ithaca)
#   HAPROXY              HAProxy (default: haproxy on PATH, else /usr/sbin/haproxy)
#   ITHACA_INTERNAL_KEY  shared by every process (default: generated once into $STATE/internal.key)
#   ITHACA_LOCAL_STATE   logs, the key and haproxy.cfg (default: ./.ithaca-local)
#   ITHACA_LOCAL_PORT    the balancer's MCP port (default 8080)
#   ITHACA_LOCAL_BASE    first service port (default 51051): auth, session A, session B,
#                        broker, skills, approvals, edge A, edge B on the next ones
#   ITHACA_LOCAL_BIND    the balancer's address (default 127.0.0.1)
#   ITHACA_LOCAL_SCHEMA  prefix of the schemas (default ithaca: ithaca_auth, ithaca_session, …)
#
# tests/suite/replicas.rs and tests/suite/faults.rs run the same haproxy.cfg.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PG_URL="${1:-${ITHACA_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ithaca}}"
STATE="${ITHACA_LOCAL_STATE:-./.ithaca-local}"
PORT="${ITHACA_LOCAL_PORT:-8080}"
BASE="${ITHACA_LOCAL_BASE:-51051}"
BIND="${ITHACA_LOCAL_BIND:-127.0.0.1}"
SCHEMA="${ITHACA_LOCAL_SCHEMA:-ithaca}"

fail() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

BIN="${ITHACA_BIN:-$(command -v ithaca || echo "$here/../../target/release/ithaca")}"
[ -x "$BIN" ] || fail "no ithaca binary at $BIN (cargo build --release, or set ITHACA_BIN)"
HAPROXY="${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}"
[ -x "$HAPROXY" ] || fail "HAProxy is missing (apt-get install haproxy, or set HAPROXY)"

mkdir -p "$STATE/logs"
chmod 700 "$STATE"
if [ -z "${ITHACA_INTERNAL_KEY:-}" ]; then
    if [ ! -s "$STATE/internal.key" ]; then
        (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$STATE/internal.key")
    fi
    ITHACA_INTERNAL_KEY="$(cat "$STATE/internal.key")"
fi
export ITHACA_INTERNAL_KEY

pids=()
stop() {
    trap - INT TERM EXIT
    echo "run.sh: stopping"
    # Newest first: the balancer and edges before the services they call.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

# start NAME PORT ARGS...: run `ithaca ARGS --listen 127.0.0.1:PORT`, wait
# until it says it listens.
start() {
    local name="$1" port="$2"
    shift 2
    "$BIN" "$@" --listen "127.0.0.1:$port" >"$STATE/logs/$name.out" 2>"$STATE/logs/$name.log" &
    pids+=("$!")
    for _ in $(seq 600); do
        grep -q 'listening on' "$STATE/logs/$name.out" 2>/dev/null && { echo "  $name  http://127.0.0.1:$port"; return; }
        kill -0 "$!" 2>/dev/null || fail "$name exited; see $STATE/logs/$name.log"
        sleep 0.1
    done
    fail "$name did not start within 60 s; see $STATE/logs/$name.log"
}
url() { echo "http://127.0.0.1:$(($BASE + $1))"; }

db() { echo --database-url "$PG_URL" --db-schema "${SCHEMA}_$1"; }
start auth "$BASE" serve auth $(db auth)
start broker "$((BASE + 3))" serve broker $(db broker)
# Sessions ask the broker whether the object a session is opened on exists.
start session-a "$((BASE + 1))" serve session $(db session) --broker-url "$(url 3)"
start session-b "$((BASE + 2))" serve session $(db session) --broker-url "$(url 3)"
start skills "$((BASE + 4))" serve skills $(db skills) --broker-url "$(url 3)" --session-url "$(url 1)"
start approvals "$((BASE + 5))" serve approvals $(db approvals) --auth-url "$(url 0)" \
    --broker-url "$(url 3)" --session-url "$(url 1)" --skills-url "$(url 4)"
# Each edge talks to its own session replica: calls balanced over the edges
# are spread over both, and they share the trace through PostgreSQL.
for edge in a b; do
    n=$([ "$edge" = a ] && echo 6 || echo 7)
    session=$([ "$edge" = a ] && echo 1 || echo 2)
    # --advertise-url: a legacy client's answer to an elicitation, sampling or
    # roots request that the balancer sends to the other edge is forwarded
    # to the edge holding the call (no sticky sessions needed).
    start "edge-$edge" "$((BASE + n))" serve edge --public-url "http://$BIND:$PORT" \
        --advertise-url "http://127.0.0.1:$((BASE + n))" \
        --auth-url "$(url 0)" --session-url "$(url "$session")" --broker-url "$(url 3)" \
        --skills-url "$(url 4)" --approvals-url "$(url 5)"
done

sed -e "s/@LISTEN@/$BIND:$PORT/" -e "s/@EDGE_A@/127.0.0.1:$((BASE + 6))/" \
    -e "s/@EDGE_B@/127.0.0.1:$((BASE + 7))/" "$here/haproxy.cfg" >"$STATE/haproxy.cfg"
"$HAPROXY" -c -q -f "$STATE/haproxy.cfg" || fail "haproxy.cfg does not check"
"$HAPROXY" -db -f "$STATE/haproxy.cfg" >"$STATE/logs/haproxy.log" 2>&1 &
pids+=("$!")

cat <<TEXT
run.sh: ready; MCP at http://$BIND:$PORT/mcp (two edges behind HAProxy); logs in $STATE/logs
  a tenant and keys (the internal key is in the environment or $STATE/internal.key):
    ITHACA_INTERNAL_KEY=\$(cat $STATE/internal.key) $BIN tenants create --auth-url $(url 0) mine
    ITHACA_INTERNAL_KEY=\$(cat $STATE/internal.key) $BIN keys create --auth-url $(url 0) \\
        --tenant <id> --actor agent --scope data:read
  ctrl-c stops everything
TEXT
wait -n "${pids[@]}" || true
fail "a process exited; see $STATE/logs"
