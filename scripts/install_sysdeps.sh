#!/usr/bin/env bash
# System packages for the integration tests: PostgreSQL (MLflow backend), Chromium + ChromeDriver
# (MLflow UI test). Installs only what is missing; needs root (apt-get).
set -euo pipefail
need=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: missing system packages (${need[*]}); run as root or: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "installing system packages: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "system packages present"
