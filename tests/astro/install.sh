#!/usr/bin/env bash
# Installs the independent readers the astronomy cross-checks use into a
# LOCAL venv, never globally, and prints the venv's python: fastavro (the
# Avro reader of the light-curve check) and astropy (the FITS reader and
# zscale of the cutout check, with numpy).
#
# Usage: tests/astro/install.sh [DIR]   (default .ci/tools/astro-venv)
#   FASTAVRO_VERSION and ASTROPY_VERSION override the pinned versions;
#   PYTHON picks the interpreter.
# Idempotent: a second run with the same versions only re-checks.
set -Eeuo pipefail
FASTAVRO_VERSION="${FASTAVRO_VERSION:-1.13.1}"
ASTROPY_VERSION="${ASTROPY_VERSION:-8.0.2}"
PYTHON="${PYTHON:-python3}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
target="${1:-.ci/tools/astro-venv}"
case "$target" in /*) ;; *) target="$repo_root/$target" ;; esac
check="import fastavro, astropy, sys; sys.exit(fastavro.__version__ != '$FASTAVRO_VERSION' or astropy.__version__ != '$ASTROPY_VERSION')"
if ! "$target/bin/python" -c "$check" 2>/dev/null; then
    "$PYTHON" -m venv "$target" >&2
    "$target/bin/pip" install --quiet --disable-pip-version-check \
        "fastavro==$FASTAVRO_VERSION" "astropy==$ASTROPY_VERSION" >&2
fi
"$target/bin/python" -c "import fastavro, astropy.io.fits, astropy.visualization" >&2
echo "$target/bin/python"
