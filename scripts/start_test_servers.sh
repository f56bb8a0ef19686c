#!/usr/bin/env bash
# Start the integration-test servers by hand: PostgreSQL (private cluster in a temp dir),
# moto S3 with the bucket mlflow-artifacts, and the MLflow basic-auth server on top of both,
# all on 127.0.0.1 with free ports. Prints the URIs and the client env; Ctrl-C stops everything.
#
#   scripts/start_test_servers.sh
#
# Needs: apt-get install -y postgresql; the venv with moto[server], mlflow[auth], psycopg2-binary.
# The same code backs the pytest fixtures in tests/integration/conftest.py.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
cd "$repo/tests"
exec "$python" -m integration.servers "$@"
