#!/usr/bin/env bash
# Run every fuzz target for a bounded time (CI), or for a number of
# executions (FUZZ_RUNS=10000000 fuzz/run.sh 0), starting from the seeds in
# fuzz/seeds/<target>/ plus whatever earlier runs added to the corpus.
#
#   fuzz/run.sh <seconds-per-target> [target ...]
#
# FUZZ_PROFILE=dev builds the targets unoptimised (cargo fuzz --dev; into
# "<FUZZ_TARGET_DIR>-dev"): several times quicker to compile and slower to
# run, which suits CI's few seconds a target from a cold cache.
# FUZZ_SANITIZER=none builds without AddressSanitizer (into its own target
# directory, "<FUZZ_TARGET_DIR>-none", sharing the corpus): the targets are
# safe Rust, and without ASan they run several times faster, which is how
# the 10 M runs were made. FUZZ_MAX_LEN=N caps an input's length (libFuzzer's
# -max_len; its default follows the corpus).
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz
# --locked`). Builds into $FUZZ_TARGET_DIR (default ~/.cache/ithaca/fuzz-target, as .ci/run; never
# the main target directory, the sanitizer flags differ) at low priority so
# other builds keep the machine. A crash fails the run and leaves its input
# under fuzz/artifacts/<target>/.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
seconds="${1:?usage: fuzz/run.sh <seconds-per-target> [target ...]}"
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(request_front bearer_token transcode principal pipeline avro_packet gcn_notice fits_cutout)
fi
base="${FUZZ_TARGET_DIR:-$HOME/.cache/ithaca/fuzz-target}"
sanitizer="${FUZZ_SANITIZER:-address}"
export CARGO_TARGET_DIR="$base"
if [ "$sanitizer" != address ]; then
    export CARGO_TARGET_DIR="$base-$sanitizer"
fi
profile=()
if [ "${FUZZ_PROFILE:-release}" = dev ]; then
    profile=(--dev)
    export CARGO_TARGET_DIR="$CARGO_TARGET_DIR-dev"
fi
# The pipeline target compiles against the real ZTF alert schema, kept with
# the shared data beside the checkout.
if [ -z "${ITHACA_ZTF_SCHEMA_DIR:-}" ]; then
    export ITHACA_ZTF_SCHEMA_DIR="$here/../../shared/data/ztf/schema"
fi
if [[ " ${targets[*]} " == *" pipeline "* ]] && [ ! -d "$ITHACA_ZTF_SCHEMA_DIR" ]; then
    echo "fuzz: no ZTF schema at $ITHACA_ZTF_SCHEMA_DIR (set ITHACA_ZTF_SCHEMA_DIR)" >&2
    exit 1
fi
corpora="$base/corpus"

cd "$here"
mkdir -p "$CARGO_TARGET_DIR"
if ! nice -n 10 cargo +nightly fuzz build "${profile[@]}" -s "$sanitizer" --fuzz-dir . >"$CARGO_TARGET_DIR/build.log" 2>&1; then
    tail -n 40 "$CARGO_TARGET_DIR/build.log" >&2
    echo "fuzz: build failed" >&2
    exit 1
fi
status=0
for target in "${targets[@]}"; do
    corpus="$corpora/$target"
    mkdir -p "$corpus"
    cp -n "$here/seeds/$target/"* "$corpus/" 2>/dev/null || true
    if [ -n "${FUZZ_RUNS:-}" ]; then
        limit=(-runs="$FUZZ_RUNS")
        echo "fuzz: $target ($FUZZ_RUNS runs, sanitizer $sanitizer)"
    else
        limit=(-max_total_time="$seconds")
        echo "fuzz: $target ($seconds s, sanitizer $sanitizer)"
    fi
    if [ -n "${FUZZ_MAX_LEN:-}" ]; then
        limit+=(-max_len="$FUZZ_MAX_LEN")
    fi
    log="$CARGO_TARGET_DIR/$target.log"
    if nice -n 10 cargo +nightly fuzz run "${profile[@]}" -s "$sanitizer" --fuzz-dir . "$target" "$corpus" -- \
        "${limit[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        runs=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
        echo "fuzz: $target ok, ${runs:-?} executions, corpus $(ls "$corpus" | wc -l)"
    else
        echo "fuzz: $target FAILED; see $log and $here/artifacts/$target/" >&2
        tail -n 40 "$log" >&2
        status=1
    fi
done
exit $status
