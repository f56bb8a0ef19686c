"""Real servers on loopback for the integration tests: PostgreSQL, moto S3 and an MLflow server.

Each server runs in its own process group (own session), so stopping it reaches every process it
forked (uvicorn, huey, postgres backends) and nothing is orphaned. The MLflow server is the
`basic-auth` app (like the cluster deployment in k8s/base/mlflow), with PostgreSQL as its backend
store and a moto S3 bucket as its artifact destination; clients authenticate with
MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD.

Start the whole stack by hand (prints the URIs and the client env, Ctrl-C stops it):

    scripts/start_test_servers.sh      # = cd tests && python -m integration.servers
"""

from __future__ import annotations

import configparser
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

PG_VERSIONS = ("17", "16", "15")
BUCKET = "mlflow-artifacts"
ADMIN_USER = "admin"
ADMIN_PASSWORD = "factprobe-admin-pw-0123"  # MLflow requires at least 12 characters
DB_USER, DB_PASSWORD, DB_NAME = "mlflow", "mlflow-db-pw", "mlflow"


class ServerError(RuntimeError):
    """A server did not start or stop; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released at once)."""
    return free_port()


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def group_pids(pgid: int) -> list[int]:
    """Live processes (zombies excluded) of process group `pgid`, read from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry))
    return pids


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Signal the whole process group of `proc`, wait for all of it, SIGKILL what is left."""
    pgid = proc.pid  # start_new_session=True: the leader's pid is the group id
    for s, wait in ((sig, timeout), (signal.SIGKILL, 10)):
        try:
            os.killpg(pgid, s)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is not None and not group_pids(pgid):
                return
    if group_pids(pgid):
        raise ServerError(f"process group {pgid} survived SIGKILL: {group_pids(pgid)}")


# --------------------------------------------------------------------------- PostgreSQL
def postgres_bin_dir() -> Path | None:
    """The Debian package's binaries (`apt-get install -y postgresql`), newest first."""
    for v in PG_VERSIONS:
        d = Path(f"/usr/lib/postgresql/{v}/bin")
        if (d / "initdb").exists() and (d / "postgres").exists():
            return d
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@dataclass
class Postgres:
    """A private cluster in a temp folder, listening on 127.0.0.1:`port` (and a socket in `root`).

    root cannot run postgres: as root, the cluster belongs to the `postgres` user and its
    commands run through `runuser -u postgres --`."""

    bin_dir: Path
    port: int = field(default_factory=free_port)
    root: Path | None = None

    def __post_init__(self) -> None:
        # Not under pytest's tmp dirs: those are 0700 root-owned and the postgres user cannot enter.
        self.root = Path(tempfile.mkdtemp(prefix="factprobe-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    @property
    def uri(self) -> str:
        # Name the driver: SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3, which is not installed.
        return f"postgresql+psycopg2://{DB_USER}:{DB_PASSWORD}@127.0.0.1:{self.port}/{DB_NAME}"

    def _cmd(self, *args: str) -> list[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        return prefix + list(args)

    def _run(self, *args: str, timeout: float = 120) -> None:
        out = subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=self.root, check=False)
        if out.returncode != 0:
            raise ServerError(f"{' '.join(args[:2])} failed ({out.returncode}): {out.stderr[-2000:]}\n{_tail(self.log)}")

    def start(self) -> Postgres:
        b = self.bin_dir
        self._run(
            str(b / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50"
        )
        self._run(str(b / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "-t", "60", "start")
        import psycopg2

        conn = psycopg2.connect(host=str(self.root), port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE USER {DB_USER} PASSWORD %s", (DB_PASSWORD,))
            cur.execute(f"CREATE DATABASE {DB_NAME} OWNER {DB_USER}")
        conn.close()
        return self

    def connect(self):
        """psycopg2 connection to the `mlflow` database over TCP with the password user."""
        import psycopg2

        return psycopg2.connect(host="127.0.0.1", port=self.port, user=DB_USER, password=DB_PASSWORD, dbname=DB_NAME)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")
            except ServerError:
                self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- moto S3
@dataclass
class MotoS3:
    """`moto_server` (package moto[server]): an S3-compatible HTTP server, state in memory."""

    port: int = field(default_factory=free_port)
    log: Path | None = None
    proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, workdir: Path, timeout: float = 60) -> MotoS3:
        exe = Path(sys.executable).parent / "moto_server"
        exe = str(exe) if exe.exists() else shutil.which("moto_server")
        if not exe:
            raise ServerError("moto_server not installed (pip install 'moto[server]')")
        self.log = workdir / "moto.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [exe, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _wait_http(f"{self.endpoint}/moto-api/data.json", self.proc, self.log, timeout, "moto_server")
        return self

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
            self.proc = None


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float, what: str) -> float:
    """Poll `url` until it answers 200; returns the seconds waited. Fails early if `proc` exits."""
    start = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise ServerError(f"{what} exited with {proc.returncode} before answering {url}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() - start > timeout:
            raise ServerError(f"{what} did not answer {url} within {timeout:.0f} s:\n{_tail(log)}")
        time.sleep(0.25)


# --------------------------------------------------------------------------- MLflow
@dataclass
class MlflowServer:
    """`mlflow server --app-name basic-auth` with PostgreSQL and S3 (moto) behind it.

    `stop()` / `kill()` and `start()` again reuse the same port and stores, so a restarted
    server sees every run logged before."""

    backend_store_uri: str
    s3_endpoint: str
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    starts: int = 0

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.auth_ini = self.workdir / "basic_auth.ini"
        cfg = configparser.ConfigParser()
        cfg["mlflow"] = {
            "default_permission": "READ",
            "database_uri": f"sqlite:///{self.workdir / 'basic_auth.db'}",
            "admin_username": ADMIN_USER,
            "admin_password": ADMIN_PASSWORD,
            "authorization_function": "mlflow.server.auth:authenticate_request_basic_auth",
        }
        with open(self.auth_ini, "w") as f:
            cfg.write(f)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"mlflow-{self.starts}.log"

    def server_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))}
        env.update(
            MLFLOW_S3_ENDPOINT_URL=self.s3_endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
            MLFLOW_AUTH_CONFIG_PATH=str(self.auth_ini),
            # The auth app refuses to start without a static CSRF key (stable across restarts).
            MLFLOW_FLASK_SERVER_SECRET_KEY="factprobe-integration-tests-csrf-key",
        )
        return env

    def start(self, timeout: float = 120) -> float:
        """Start and wait for /health; returns the seconds it took."""
        if self.proc is not None and self.proc.poll() is None:
            raise ServerError(f"MLflow server at {self.uri} is already running")
        exe = Path(sys.executable).parent / "mlflow"
        cmd = [
            str(exe) if exe.exists() else "mlflow",
            "server",
            "--app-name",
            "basic-auth",
            "--backend-store-uri",
            self.backend_store_uri,
            "--artifacts-destination",
            f"s3://{BUCKET}",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        self.starts += 1
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.workdir,
                env=self.server_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return _wait_http(f"{self.uri}/health", self.proc, self.log, timeout, "mlflow server")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop every process of the server (SIGTERM, then SIGKILL); `kill()` is the crash."""
        if self.proc is not None:
            stop_group(self.proc, sig)
            self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def client_env(uri: str, username: str = ADMIN_USER, password: str = ADMIN_PASSWORD) -> dict[str, str]:
    """Env for a factprobe process that logs to `uri` as `username` (MLflow's basic-auth client env)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))}
    env.update(
        MLFLOW_TRACKING_URI=uri,
        MLFLOW_TRACKING_USERNAME=username,
        MLFLOW_TRACKING_PASSWORD=password,
        PYTHONUNBUFFERED="1",
        TQDM_DISABLE="1",
    )
    return env


@dataclass
class Stack:
    """PostgreSQL + moto S3 (bucket `mlflow-artifacts`) + the MLflow basic-auth server."""

    root: Path
    postgres: Postgres | None = None
    s3: MotoS3 | None = None
    mlflow: MlflowServer | None = None
    startup_s: dict[str, float] = field(default_factory=dict)

    def start(self) -> Stack:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise ServerError("PostgreSQL binaries not found (apt-get install -y postgresql)")
        try:
            t = time.monotonic()
            self.s3 = MotoS3().start(self.root)  # moto first: it boots while initdb runs below
            self.postgres = Postgres(bin_dir).start()
            self.s3.client().create_bucket(Bucket=BUCKET)
            self.startup_s["postgres+moto"] = time.monotonic() - t
            self.mlflow = MlflowServer(self.postgres.uri, self.s3.endpoint, self.root / "mlflow")
            self.startup_s["mlflow"] = self.mlflow.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        errors = []
        for part in (self.mlflow, self.s3, self.postgres):
            if part is None:
                continue
            try:
                part.stop()
            except Exception as e:  # noqa: BLE001 - stop the rest, then report
                errors.append(f"{type(part).__name__}: {e}")
        if errors:
            raise ServerError("; ".join(errors))


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="factprobe-servers-"))
    stack = Stack(root).start()
    print(f"PostgreSQL : {stack.postgres.uri}")
    print(f"S3 (moto)  : {stack.s3.endpoint}  bucket {BUCKET}  (AWS keys: testing/testing)")
    print(f"MLflow     : {stack.mlflow.uri}  (basic auth {ADMIN_USER} / {ADMIN_PASSWORD})")
    print(f"logs       : {root}")
    print(
        f"\nexport MLFLOW_TRACKING_URI={stack.mlflow.uri} MLFLOW_TRACKING_USERNAME={ADMIN_USER} "
        f"MLFLOW_TRACKING_PASSWORD={ADMIN_PASSWORD}",
        flush=True,
    )
    stopping = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too: a background job inherits it ignored
        signal.signal(sig, lambda *_: stopping.append(1))
    try:
        while not stopping:
            time.sleep(0.5)
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)
        print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
