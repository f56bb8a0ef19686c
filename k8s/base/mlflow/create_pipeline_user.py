"""Create (or update) the MLflow user that pipeline steps and CI log in as.

Runs in the ``mlflow-setup`` Job after the tracking server is up:

    python /etc/mlflow-setup/create_pipeline_user.py

It logs in as the admin (Secret ``mlflow-admin``) and makes sure the user named in the Secret
``mlflow-credentials`` (keys MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD) exists with
that password. Idempotent: an existing user gets its password reset to the Secret's value, so
rotating the password is "edit the env file, re-apply the secrets, re-run this Job".
Standard library only (it runs in the MLflow image).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

MLFLOW_URL = os.environ.get("MLFLOW_URL", "http://mlflow.factprobe.svc.cluster.local:5000")
ADMIN_DIR = Path(os.environ.get("MLFLOW_ADMIN_SECRET_DIR", "/run/secrets/mlflow-admin"))
USER_DIR = Path(os.environ.get("MLFLOW_USER_SECRET_DIR", "/run/secrets/mlflow-credentials"))
WAIT_SECONDS = int(os.environ.get("MLFLOW_WAIT_SECONDS", "600"))


def read_secret(directory: Path, key: str) -> str:
    value = (directory / key).read_text(encoding="utf-8").strip()
    if not value or value.startswith("CHANGE_ME"):
        raise SystemExit(f"secret key {key} in {directory} is empty or still CHANGE_ME")
    return value


def request(method: str, path: str, auth: tuple[str, str], body: dict | None = None):
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        MLFLOW_URL + path,
        data=data,
        method=method,
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def wait_until_healthy() -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            with urllib.request.urlopen(MLFLOW_URL + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as err:
            if time.monotonic() > deadline:
                raise SystemExit(f"MLflow at {MLFLOW_URL} not healthy after {WAIT_SECONDS} s: {err}") from err
        print(f"waiting for {MLFLOW_URL}/health", flush=True)
        time.sleep(5)


def main() -> int:
    admin = (
        read_secret(ADMIN_DIR, "MLFLOW_AUTH_ADMIN_USERNAME"),
        read_secret(ADMIN_DIR, "MLFLOW_AUTH_ADMIN_PASSWORD"),
    )
    username = read_secret(USER_DIR, "MLFLOW_TRACKING_USERNAME")
    password = read_secret(USER_DIR, "MLFLOW_TRACKING_PASSWORD")
    if len(password) < 12:
        raise SystemExit("MLFLOW_TRACKING_PASSWORD must have at least 12 characters (MLflow's password policy)")
    if username == admin[0]:
        print("mlflow-credentials names the admin user; nothing to create")
        return 0
    wait_until_healthy()
    try:
        request("POST", "/api/2.0/mlflow/users/create", admin, {"username": username, "password": password})
        print(f"created MLflow user {username}")
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace")
        if "RESOURCE_ALREADY_EXISTS" not in detail and "already exists" not in detail:
            raise SystemExit(f"creating MLflow user {username} failed: HTTP {err.code} {detail}") from err
        request(
            "PATCH",
            "/api/2.0/mlflow/users/update-password",
            admin,
            {"username": username, "password": password},
        )
        print(f"MLflow user {username} exists; password set from the Secret")
    return 0


if __name__ == "__main__":
    sys.exit(main())
