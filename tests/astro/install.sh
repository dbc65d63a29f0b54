#!/usr/bin/env bash
# Installs fastavro (the independent Avro reader the light-curve cross-check
# uses) into a LOCAL venv, never globally, and prints the venv's python.
#
# Usage: tests/astro/install.sh [DIR]   (default .ci/tools/astro-venv)
#   FASTAVRO_VERSION overrides the pinned version; PYTHON picks the interpreter.
# Idempotent: a second run with the same version only re-checks.
set -Eeuo pipefail
FASTAVRO_VERSION="${FASTAVRO_VERSION:-1.13.1}"
PYTHON="${PYTHON:-python3}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
target="${1:-.ci/tools/astro-venv}"
case "$target" in /*) ;; *) target="$repo_root/$target" ;; esac
if ! "$target/bin/python" -c "import fastavro, sys; sys.exit(fastavro.__version__ != '$FASTAVRO_VERSION')" 2>/dev/null; then
    "$PYTHON" -m venv "$target" >&2
    "$target/bin/pip" install --quiet --disable-pip-version-check "fastavro==$FASTAVRO_VERSION" >&2
fi
"$target/bin/python" -c "import fastavro" >&2
echo "$target/bin/python"
