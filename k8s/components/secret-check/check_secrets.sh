#!/bin/sh
# Refuse to start a pod whose secrets still hold a placeholder.
#
#   check_secrets.sh DIR...
#
# Each DIR is a Secret mounted as a volume (one file per key, as Kubernetes mounts it). Runs as
# the first initContainer (`check-secrets`) of every workload that reads a secret
# (k8s/components/secret-check): when any key is empty, only whitespace, or a placeholder
# (CHANGE_ME, changeme, change-me, REPLACE_ME, <your-password>, TODO, xxx, password, ...), it prints
# ONE line naming every such key and exits 1, so the pod never starts with a guessable credential;
# `kubectl describe pod` shows that line as the init container's termination message.
# POSIX sh with only builtins and `cat`: it runs in every image of the stack (postgres, mlflow,
# the MinIO client, vLLM).
set -u

bad=""
checked=0
for dir in "$@"; do
  if [ ! -d "$dir" ]; then
    bad="$bad ${dir} (not mounted)"
    continue
  fi
  for file in "$dir"/*; do
    [ -f "$file" ] || continue  # the kubelet's ..data links are hidden files; keys are plain names
    key=${file##*/}
    checked=$((checked + 1))
    value=$(cat "$file") || value=""
    # trim surrounding whitespace (what the services themselves strip)
    trimmed=${value#"${value%%[![:space:]]*}"}
    trimmed=${trimmed%"${trimmed##*[![:space:]]}"}
    case "$trimmed" in
      "" | \
      *[Cc][Hh][Aa][Nn][Gg][Ee][Mm][Ee]* | *[Cc][Hh][Aa][Nn][Gg][Ee][_.\ -][Mm][Ee]* | \
      *[Rr][Ee][Pp][Ll][Aa][Cc][Ee][Mm][Ee]* | *[Rr][Ee][Pp][Ll][Aa][Cc][Ee][_.\ -][Mm][Ee]* | \
      "<"*">" | "\${"*"}" | "..." | [Xx][Xx][Xx]* | \
      [Pp][Ll][Aa][Cc][Ee][Hh][Oo][Ll][Dd][Ee][Rr] | [Tt][Oo][Dd][Oo] | [Tt][Bb][Dd] | [Ff][Ii][Xx][Mm][Ee] | \
      [Cc][Hh][Aa][Nn][Gg][Ee][Ii][Tt] | [Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd] | [Ss][Ee][Cc][Rr][Ee][Tt] | \
      [Ee][Xx][Aa][Mm][Pp][Ll][Ee])
        bad="$bad ${dir}/${key}"
        ;;
    esac
  done
done

if [ -n "$bad" ]; then
  echo "check-secrets: refusing to start: empty or placeholder secret value in${bad}; put real values in k8s/secrets/*.env (openssl rand -hex 32) and re-apply them (k8s/README.md, step 1)" >&2
  exit 1
fi
if [ "$checked" -eq 0 ]; then
  echo "check-secrets: refusing to start: no secret key found under $*" >&2
  exit 1
fi
echo "check-secrets: $checked secret keys set"
