#!/usr/bin/env bash
# Installs Arize Phoenix (`arize-phoenix` from PyPI), a real OpenTelemetry
# receiver that stores spans and answers queries for them, into a LOCAL venv
# (never global): DIR/venv, with DIR/bin/phoenix running it through
# tests/otel/phoenix_serve.py, which keeps its OTLP/gRPC receiver on
# PHOENIX_HOST (Phoenix itself binds that one on every interface).
#
# Usage: tests/otel/install.sh [DIR]
#   DIR defaults to .ci/tools/phoenix; a relative DIR is taken relative to the
#   repository root. PHOENIX_VERSION overrides the pinned version; PYTHON picks
#   the interpreter (default python3). FORCE=1 reinstalls.
#
# Idempotent: a second run with the same version only re-verifies. Exits
# non-zero on any failure (CI then fails: the collector test is never
# skipped).
set -Eeuo pipefail

PHOENIX_VERSION="${PHOENIX_VERSION:-20.26.1}"
PYTHON="${PYTHON:-python3}"
FORCE="${FORCE:-0}"

die() { printf 'otel/install.sh: ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "command failed (line $LINENO): $BASH_COMMAND"' ERR

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$script_dir/../.." && pwd)"
target="${1:-.ci/tools/phoenix}"
case "$target" in
  /*) ;;
  *) target="$repo_root/$target" ;;
esac
mkdir -p "$target"
target="$(cd "$target" && pwd)"
venv="$target/venv"
stamp="$target/.installed-$PHOENIX_VERSION"

if [ "$FORCE" = 1 ] || [ ! -f "$stamp" ] || [ ! -x "$venv/bin/phoenix" ]; then
    echo "==> arize-phoenix $PHOENIX_VERSION into $venv (large; a few minutes the first time)"
    rm -f "$target"/.installed-*
    # A venv whose creation was cut short (a CI run stopped while this ran
    # in the background) has no pip: made again, not used half-made.
    if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
        rm -rf "$venv"
        "$PYTHON" -m venv "$venv"
    fi
    timeout 1200 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "arize-phoenix==$PHOENIX_VERSION"
    touch "$stamp"
fi
"$venv/bin/python" -c 'import phoenix; print("phoenix", phoenix.__version__)' \
    || die "phoenix does not import from $venv"
mkdir -p "$target/bin"
rm -f "$target/bin/phoenix"
cat >"$target/bin/phoenix" <<WRAPPER
#!/bin/sh
exec "$venv/bin/python" "$script_dir/phoenix_serve.py" "\$@"
WRAPPER
chmod +x "$target/bin/phoenix"
echo "phoenix installed: $target/bin/phoenix"
