#!/usr/bin/env bash
# The light-curve cross-check: the broker's light curve through the MCP edge
# against tests/astro/lightcurve_check.py's reading of the same Avro files
# with fastavro, on SQLite and (given a URL) PostgreSQL.
#
# Usage: tests/astro/run.sh [POSTGRES_URL]
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
python="$(bash tests/astro/install.sh)"
filter='test(/lightcurve_matches_fastavro/)'
if [[ -n "${1:-}" ]]; then
    export ITHACA_TEST_POSTGRES_URL="$1" ITHACA_TEST_REQUIRE_POSTGRES=1
else
    filter='test(/lightcurve_matches_fastavro/) - test(/postgres/)'
fi
ITHACA_FASTAVRO_PYTHON="$python" ITHACA_TEST_REQUIRE_FASTAVRO=1 cargo nextest run --workspace -E "$filter"
