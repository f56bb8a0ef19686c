"""Render MLflow's basic-auth config (basic_auth.ini) from its template and mounted secrets.

Runs as the initContainer ``render-auth-config`` of the mlflow Deployment:

    python /etc/mlflow-auth-template/render_auth_config.py \
        --template /etc/mlflow-auth-template/basic_auth.ini.tmpl \
        --out /etc/mlflow-auth/basic_auth.ini \
        --postgres-secret-dir /run/secrets/postgres \
        --admin-secret-dir /run/secrets/mlflow-admin \
        --postgres-host postgres.factprobe.svc.cluster.local

MLflow takes the auth store's database URI only from this ini file, and the URI carries the
database password, so the file is rendered at pod start into an in-memory volume instead of
being a ConfigMap. The script uses the standard library only (it runs in the MLflow image).
"""

from __future__ import annotations

import argparse
import os
import re
import string
import sys
from pathlib import Path

# The mlflow container builds its backend store URI by plain $(VAR) substitution, so database
# credentials must be safe inside a URI without escaping: RFC 3986 unreserved characters.
URI_SAFE = re.compile(r"^[A-Za-z0-9._~-]+$")
PLACEHOLDER = "CHANGE_ME"
# MLflow's password policy (mlflow.server.auth): it refuses to bootstrap a shorter admin password.
MIN_MLFLOW_PASSWORD_LENGTH = 12


def read_secret(directory: Path, key: str) -> str:
    """Return the secret value stored as file ``directory/key``, without surrounding whitespace."""
    path = directory / key
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ValueError(f"secret key {key} is missing (expected the file {path})") from None
    if not value:
        raise ValueError(f"secret key {key} is empty ({path})")
    if value.startswith(PLACEHOLDER):
        raise ValueError(
            f"secret key {key} still holds the placeholder {PLACEHOLDER}: fill k8s/secrets/*.env "
            "and re-apply the secrets (k8s/README.md)"
        )
    if "\n" in value or "\r" in value:
        raise ValueError(f"secret key {key} spans several lines")
    return value


def render(
    template: str,
    postgres_dir: Path,
    admin_dir: Path,
    postgres_host: str,
    postgres_port: int = 5432,
) -> str:
    """Fill ``template``'s ``${database_uri}``, ``${admin_username}``, ``${admin_password}``.

    Raises ValueError with a message that names the offending secret key.
    """
    user = read_secret(postgres_dir, "POSTGRES_USER")
    password = read_secret(postgres_dir, "POSTGRES_PASSWORD")
    database = read_secret(postgres_dir, "POSTGRES_DB")
    for key, value in (("POSTGRES_USER", user), ("POSTGRES_PASSWORD", password), ("POSTGRES_DB", database)):
        if not URI_SAFE.match(value):
            raise ValueError(
                f"{key} may contain only A-Z a-z 0-9 . _ ~ - because it is embedded in a database "
                "URI; generate one with `openssl rand -hex 32`"
            )
    admin_password = read_secret(admin_dir, "MLFLOW_AUTH_ADMIN_PASSWORD")
    if len(admin_password) < MIN_MLFLOW_PASSWORD_LENGTH:
        raise ValueError(
            f"MLFLOW_AUTH_ADMIN_PASSWORD must have at least {MIN_MLFLOW_PASSWORD_LENGTH} characters (MLflow's password policy)"
        )
    values = {
        "database_uri": f"postgresql+psycopg2://{user}:{password}@{postgres_host}:{postgres_port}/{database}",
        "admin_username": read_secret(admin_dir, "MLFLOW_AUTH_ADMIN_USERNAME"),
        "admin_password": admin_password,
    }
    # MLflow reads the file with configparser, whose interpolation gives '%' a meaning.
    escaped = {key: value.replace("%", "%%") for key, value in values.items()}
    return string.Template(template).substitute(escaped)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--postgres-secret-dir", type=Path, required=True)
    parser.add_argument("--admin-secret-dir", type=Path, required=True)
    parser.add_argument("--postgres-host", required=True)
    parser.add_argument("--postgres-port", type=int, default=5432)
    args = parser.parse_args(argv)
    try:
        text = render(
            args.template.read_text(encoding="utf-8"),
            args.postgres_secret_dir,
            args.admin_secret_dir,
            args.postgres_host,
            args.postgres_port,
        )
    except ValueError as err:
        print(f"render-auth-config: {err}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # 0600: only the pod's UID may read the rendered credentials.
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file was there already (os.open's mode applies only on create)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    print(f"render-auth-config: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
