#!/usr/bin/env bash
# Build the factprobe images, tag them <package version>-<git sha>, and push them to a registry.
#
#   scripts/build_images.sh --registry registry.example.com/ml [--tool docker|buildah] [--no-push] [--dry-run]
#                           [--images cpu,gpu,train[,minio]]
#   scripts/build_images.sh --local [--images cpu,gpu,train] [--dry-run]          (what `make images` runs)
#
# cpu: data, report and gate steps; gpu: probing steps (no DeepSpeed); train: fine-tuning steps
# (DeepSpeed, CUDA devel). Prints the `export FACTPROBE_IMAGE_{CPU,GPU,TRAIN}=` lines that make
# `factprobe pipeline compile|submit` and `factprobe schedule` use the images just pushed.
# minio (not built by default): the tracking stack's MinIO from source, tagged with its release. Run from anywhere: the build context is the
# repository root. A dirty work tree gets a `-dirty` suffix, so a tag never names code it does not hold.
# --local: build on this machine with podman (runc), no registry and no push, as root: all three images on a
# local Debian bookworm base (made once with debootstrap), torch from the CPU wheel in pip's find-links
# folder (else the CPU index); tagged localhost/factprobe-<kind>:<version>-<digest of the build context>.
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "build_images.sh: $*" >&2; exit 2; }

registry="" tool="" push=1 dry=0 local=0 images="cpu,gpu,train"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --registry) [[ $# -ge 2 ]] || die "--registry needs a value"; registry="$2"; shift 2 ;;
    --registry=*) registry="${1#*=}"; shift ;;
    --tool) [[ $# -ge 2 ]] || die "--tool needs a value"; tool="$2"; shift 2 ;;
    --images) [[ $# -ge 2 ]] || die "--images needs a value"; images="$2"; shift 2 ;;
    --no-push) push=0; shift ;;
    --dry-run) dry=1; shift ;;
    --local) local=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run() { echo "+ $*"; if [[ $dry -eq 0 ]]; then "$@"; fi; }
if [[ $local -eq 1 ]]; then
  [[ -z "$registry" && -z "$tool" ]] || die "--local builds with podman into local storage: leave out --registry and --tool"
  # shellcheck source=scripts/build_images_local.sh
  source "$root/scripts/build_images_local.sh"
  build_local "$images"
  exit 0
fi
[[ -n "$registry" ]] || die "--registry is required, e.g. --registry ghcr.io/my-org"
registry="${registry%/}"
[[ "$registry" =~ ^[A-Za-z0-9._:/-]+$ ]] || die "registry '$registry' is not a valid image repository prefix"

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/pyproject.toml" | head -1)"
[[ -n "$version" ]] || die "no version in $root/pyproject.toml"
sha="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null)" || die "$root is not a git checkout (the tag needs the commit)"
if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then sha="$sha-dirty"; fi
tag="$version-$sha"

if [[ -z "$tool" ]]; then
  if command -v docker >/dev/null 2>&1; then tool=docker
  elif command -v buildah >/dev/null 2>&1; then tool=buildah
  elif [[ $dry -eq 1 ]]; then tool=docker
  else die "neither docker nor buildah is installed (or pass --tool)"; fi
fi
case "$tool" in docker|buildah) ;; *) die "--tool must be docker or buildah, got '$tool'" ;; esac

exports=()
IFS=',' read -r -a wanted <<< "$images"
for kind in "${wanted[@]}"; do
  case "$kind" in cpu|gpu|train|minio) ;; *) die "--images takes cpu, gpu, train and/or minio, got '$kind'" ;; esac
  context="$root"
  ref="$registry/factprobe-$kind:$tag"
  if [[ "$kind" == minio ]]; then  # tagged with the MinIO release it builds; needs no repository files
    release="$(sed -n 's/^ARG MINIO_RELEASE=//p' "$root/containers/Dockerfile.minio")"
    ref="$registry/minio:$release" context="$root/containers"
  fi
  if [[ "$tool" == docker ]]; then
    run docker build -f "$root/containers/Dockerfile.$kind" -t "$ref" "$context"
    if [[ $push -eq 1 ]]; then run docker push "$ref"; fi
  else
    run buildah bud -f "$root/containers/Dockerfile.$kind" -t "$ref" "$context"
    if [[ $push -eq 1 ]]; then run buildah push "$ref"; fi
  fi
  if [[ "$kind" == minio ]]; then
    exports+=("(cd k8s/overlays/production && kustomize edit set image ghcr.io/factprobe/minio=$ref)")
  else
    exports+=("export FACTPROBE_IMAGE_${kind^^}=$ref")
  fi
done
echo
echo "# use these images when compiling, submitting and scheduling:"
printf '%s\n' "${exports[@]}"
