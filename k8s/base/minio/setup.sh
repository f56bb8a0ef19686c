#!/bin/sh
# One-shot, idempotent MinIO setup for factprobe (run by the minio-setup Job):
#   1. wait for MinIO,
#   2. create the buckets mlflow-artifacts and factprobe-data,
#   3. create (or update) the S3 user from the Secret s3-credentials and give it
#      read/write on exactly those two buckets (policy factprobe-readwrite).
# MLflow and the pipeline steps use that user; the root credentials stay in this Job.
# Credentials are read from mounted secret files, never from the environment or argv
# of a long-lived process.
set -eu

endpoint="${MINIO_ENDPOINT:-http://minio.factprobe.svc.cluster.local:9000}"
root_user="$(cat /run/secrets/minio/MINIO_ROOT_USER)"
root_password="$(cat /run/secrets/minio/MINIO_ROOT_PASSWORD)"
access_key="$(cat /run/secrets/s3/AWS_ACCESS_KEY_ID)"
secret_key="$(cat /run/secrets/s3/AWS_SECRET_ACCESS_KEY)"

for value in "$root_user" "$root_password" "$access_key" "$secret_key"; do
  case "$value" in
    "" | CHANGE_ME*)
      echo "a MinIO or S3 credential is empty or still CHANGE_ME: fill k8s/secrets/*.env and re-apply (k8s/README.md)" >&2
      exit 1
      ;;
  esac
done

attempt=0
until mc alias set factprobe "$endpoint" "$root_user" "$root_password" >/dev/null 2>&1; do
  attempt=$((attempt + 1))
  if [ "$attempt" -ge 60 ]; then
    echo "MinIO at $endpoint did not answer after $attempt attempts" >&2
    exit 1
  fi
  echo "waiting for MinIO at $endpoint ($attempt)"
  sleep 5
done

for bucket in mlflow-artifacts factprobe-data; do
  mc mb --ignore-existing "factprobe/$bucket"
done

mc admin policy create factprobe factprobe-readwrite /etc/minio-setup/factprobe-readwrite-policy.json
mc admin user add factprobe "$access_key" "$secret_key"
if ! out="$(mc admin policy attach factprobe factprobe-readwrite --user "$access_key" 2>&1)"; then
  case "$out" in
    *already*) echo "policy factprobe-readwrite already attached to the factprobe S3 user" ;;
    *) echo "$out" >&2; exit 1 ;;
  esac
fi
echo "MinIO ready: buckets mlflow-artifacts, factprobe-data; S3 user has policy factprobe-readwrite"
