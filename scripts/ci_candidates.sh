#!/usr/bin/env bash
# The candidates of the CI regression gate: the model or adapter folders a change touched.
#
#   scripts/ci_candidates.sh BASE_REF [HEAD_REF]     # prints one folder per line, sorted, no duplicates
#
# A changed file counts for the nearest folder above it (itself included) that holds an
# `adapter_config.json` (a PEFT adapter folder, e.g. the output of a fine-tuning job) or a
# `config.json` (a Hugging Face model folder). Files outside such folders are ignored. Exit 0 with
# no output when nothing qualifies. Used by .github/workflows/regression-eval.yml.
set -euo pipefail
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 BASE_REF [HEAD_REF]" >&2; exit 2; }
base="$1" head="${2:-HEAD}"
root="$(git rev-parse --show-toplevel)"
cd "$root"
git diff --name-only --diff-filter=ACMR "$base" "$head" -- | while IFS= read -r file; do
  dir="$(dirname "$file")"
  while :; do
    if [[ -f "$dir/adapter_config.json" || -f "$dir/config.json" ]]; then
      printf '%s\n' "$dir"
      break
    fi
    [[ "$dir" == "." ]] && break
    dir="$(dirname "$dir")"
  done
done | sort -u
