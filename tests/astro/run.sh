#!/usr/bin/env bash
# The astronomy cross-checks against independent readers: the broker's light
# curve through the MCP edge against tests/astro/lightcurve_check.py's
# reading of the same Avro files with fastavro, on SQLite and (given a URL)
# PostgreSQL; and the cutouts the broker decodes and serves against
# tests/astro/cutouts_check.py's reading of the same packet with astropy,
# pixel by pixel.
#
# Usage: tests/astro/run.sh [POSTGRES_URL]
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
python="$(bash tests/astro/install.sh)"
filter='test(/lightcurve_matches_fastavro/) | test(/cutouts_match_astropy/)'
if [[ -n "${1:-}" ]]; then
    export ITHACA_TEST_POSTGRES_URL="$1" ITHACA_TEST_REQUIRE_POSTGRES=1
else
    filter="($filter) - test(/postgres/)"
fi
ITHACA_FASTAVRO_PYTHON="$python" ITHACA_TEST_REQUIRE_FASTAVRO=1 \
    ITHACA_ASTROPY_PYTHON="$python" ITHACA_TEST_REQUIRE_ASTROPY=1 \
    cargo nextest run --workspace -E "$filter"
