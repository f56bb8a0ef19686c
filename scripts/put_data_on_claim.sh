#!/usr/bin/env bash
# Put the research data (a folder laid out as ../shared/data: lama/, lpaqa/, coherency/, pararel/, ...) on the
# model-cache claim, at <mount>/data, where every step that reads data finds it (FACTPROBE_DATA; pipelines/platform.py
# STORAGE_ENV): `train_data=/mnt/factprobe/data/lpaqa/trex_train`, the coherency relations and the BELIEF templates.
# Issue 38 item 3; k8s/README.md, "5. Research data for the steps".
#
#   scripts/put_data_on_claim.sh [DATA_DIR]          # default ../shared/data
#
# Settings (environment): NAMESPACE (the pipeline namespace, default kubeflow), FACTPROBE_PVC (the claim, default
# factprobe-cache), FACTPROBE_PVC_MOUNT (default /mnt/factprobe), KUBECTL (default kubectl), COPY_IMAGE (default
# busybox:1.36; it needs tar).
#
# What it does: starts a pod that mounts the claim (UID 1000 as the steps, no privilege: the `restricted` Pod Security
# Standard admits it), streams DATA_DIR into <mount>/data.partial with tar (what `kubectl cp` does), replaces
# <mount>/data with it in one rename (a step never reads half a copy), prints the files and bytes there, and deletes
# the pod, also on failure. Running it again replaces the data with the folder's current content.
set -euo pipefail

DATA_DIR=${1:-$(cd "$(dirname "$0")/.." && pwd)/../shared/data}
NAMESPACE=${NAMESPACE:-kubeflow}
PVC=${FACTPROBE_PVC:-factprobe-cache}
MOUNT=${FACTPROBE_PVC_MOUNT:-/mnt/factprobe}
KUBECTL=${KUBECTL:-kubectl}
COPY_IMAGE=${COPY_IMAGE:-busybox:1.36}
POD=factprobe-data-copy

if [[ $# -gt 1 || ${1:-} == -h || ${1:-} == --help ]]; then
    echo "usage: scripts/put_data_on_claim.sh [DATA_DIR]  (default ../shared/data; NAMESPACE, FACTPROBE_PVC, FACTPROBE_PVC_MOUNT)" >&2
    exit 2
fi
if [[ ! -d $DATA_DIR/lama ]]; then
    echo "error: $DATA_DIR is not a data root (no lama/ in it): give the folder that holds lama/, lpaqa/, coherency/" >&2
    exit 2
fi
if ! command -v "$KUBECTL" >/dev/null 2>&1; then
    echo "error: $KUBECTL not found: install kubectl (>= 1.27) and point it at the cluster" >&2
    exit 2
fi

overrides=$(cat <<EOF
{"spec": {
  "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": true,
                      "seccompProfile": {"type": "RuntimeDefault"}},
  "containers": [{"name": "copy", "image": "$COPY_IMAGE", "command": ["sleep", "3600"],
    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
    "volumeMounts": [{"name": "cache", "mountPath": "$MOUNT"}]}],
  "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "$PVC"}}]}}
EOF
)

cleanup() { "$KUBECTL" -n "$NAMESPACE" delete pod "$POD" --ignore-not-found --wait=false >/dev/null; }
trap cleanup EXIT
"$KUBECTL" -n "$NAMESPACE" run "$POD" --image="$COPY_IMAGE" --restart=Never --overrides="$overrides"
"$KUBECTL" -n "$NAMESPACE" wait --for=condition=Ready "pod/$POD" --timeout=5m
"$KUBECTL" -n "$NAMESPACE" exec "$POD" -- sh -c "rm -rf '$MOUNT/data.partial' && mkdir -p '$MOUNT/data.partial'"
tar -C "$DATA_DIR" -cf - . | "$KUBECTL" -n "$NAMESPACE" exec -i "$POD" -- tar -C "$MOUNT/data.partial" -xf -
"$KUBECTL" -n "$NAMESPACE" exec "$POD" -- sh -c \
    "rm -rf '$MOUNT/data.old' && { [ ! -e '$MOUNT/data' ] || mv '$MOUNT/data' '$MOUNT/data.old'; } \
     && mv '$MOUNT/data.partial' '$MOUNT/data' && rm -rf '$MOUNT/data.old' \
     && echo \"$MOUNT/data: \$(find '$MOUNT/data' -type f | wc -l) files, \$(du -sk '$MOUNT/data' | cut -f1) KiB\""
