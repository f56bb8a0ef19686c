"""Safe deployment defaults (issue 41 item 9, issue 38 item 3), checked on the rendered manifests:

- no workload starts with a placeholder secret: every pod that reads a secret runs the initContainer
  `check-secrets` first, over every secret it reads, and the script refuses empty and placeholder values
  (CHANGE_ME and its spellings) in one line, exit 1; the `*.env.example` templates, rendered as a user
  who forgot to edit them would, are refused;
- the vLLM server of `vllm-serve` requires an API key from the Secret `vllm-api-key`, which k8s/secrets/vllm
  generates and the pipeline steps read (tests/pipelines/test_served_key_and_gpu_placement.py checks the
  compiled side);
- with `pipeline-egress`, the steps reach that server on its port 8000 and nothing wider
  (`pipeline-egress-vllm`, k8s/components/vllm-egress).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.k8s.test_manifests import (
    K8S,
    PIPELINE_ROLE_LABEL,
    _egress_rules,
    env_of,
    find,
    pod_spec,
    render,
    secret_references,
)

SCRIPT = K8S / "components" / "secret-check" / "check_secrets.sh"
CHECKED = ("base", "local", "production", "vllm-serve")  # every kustomization with workloads that read secrets
VLLM_SECRET, VLLM_KEY = "vllm-api-key", "VLLM_API_KEY"


@pytest.fixture(scope="module")
def docs() -> dict[str, list[dict]]:
    paths = {name: K8S / ("base" if name == "base" else f"overlays/{name}") for name in CHECKED}
    paths["pipeline-egress"] = K8S / "overlays" / "pipeline-egress"
    paths["pipeline-egress-vllm"] = K8S / "overlays" / "pipeline-egress-vllm"
    return {name: render(path) for name, path in paths.items()}


def run_check(*dirs: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT), *map(str, dirs)], capture_output=True, text=True, timeout=30, check=False)


def secret_dir(root: Path, name: str, **values: str) -> Path:
    """A Secret as the kubelet mounts it: one file per key (with its ..data link farm)."""
    folder = root / name
    data = folder / "..2026_01_01_00_00_00.000"
    data.mkdir(parents=True)
    for key, value in values.items():
        (data / key).write_text(value)
    (folder / "..data").symlink_to(data.name)
    for key in values:
        (folder / key).symlink_to(f"..data/{key}")
    return folder


# ---------------------------------------------------------------------------------------------
# check_secrets.sh


def test_check_passes_real_values(tmp_path):
    good = secret_dir(tmp_path, "pg", POSTGRES_USER="mlflow", POSTGRES_PASSWORD="9f8e7d6c5b4a39281706", POSTGRES_DB="mlflow")
    proc = run_check(good)
    assert proc.returncode == 0, proc.stderr
    assert "3 secret keys set" in proc.stdout


@pytest.mark.parametrize(
    "value",
    [
        "CHANGE_ME",
        "changeme",
        "Change-Me",
        "change me",
        "CHANGE_ME_TOO",
        "REPLACE_ME",
        "<password>",
        "${PASSWORD}",
        "",
        "  \n",
        "xxx",
    ]
    + ["TODO", "password", "placeholder", "secret", "..."],
)
def test_check_refuses_placeholders_in_one_line(tmp_path, value):
    good = secret_dir(tmp_path, "admin", MLFLOW_AUTH_ADMIN_USERNAME="admin")
    bad = secret_dir(tmp_path, "minio", MINIO_ROOT_USER="factprobe-root", MINIO_ROOT_PASSWORD=value)
    proc = run_check(good, bad)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and not proc.stdout, proc.stderr
    assert f"{bad}/MINIO_ROOT_PASSWORD" in lines[0] and "MINIO_ROOT_USER" not in lines[0]
    assert "k8s/secrets" in lines[0]


def test_check_refuses_a_missing_mount_and_an_empty_secret(tmp_path):
    assert run_check(tmp_path / "nowhere").returncode == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_check(empty)
    assert proc.returncode == 1 and "no secret key" in proc.stderr


def test_unedited_templates_are_refused(tmp_path):
    """Every secret the templates render to, mounted as a pod would see it, is refused: the
    `CHANGE_ME` of minio-root.env.example no longer starts MinIO."""
    work = tmp_path / "k8s"
    shutil.copytree(K8S, work, ignore=shutil.ignore_patterns("*.env"))
    for example in (work / "secrets").rglob("*.env.example"):
        shutil.copy(example, example.with_suffix(""))
    secrets = [d for sub in ("", "vllm") for d in render(work / "secrets" / sub) if d["kind"] == "Secret"]
    names = {d["metadata"]["name"] for d in secrets}
    assert {"minio-root-credentials", "postgres-credentials", "mlflow-admin", VLLM_SECRET} <= names
    for secret in secrets:
        values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        mounted = secret_dir(tmp_path / "mounts", secret["metadata"]["name"], **values)
        proc = run_check(mounted)
        assert proc.returncode == 1, f"{secret['metadata']['name']} from its template was accepted"
        placeholders = [k for k, v in values.items() if v == "CHANGE_ME"]
        assert placeholders and all(f"/{k}" in proc.stderr for k in placeholders)


# ---------------------------------------------------------------------------------------------
# every workload that reads a secret checks all of them before anything else starts


def _mounted_secrets(spec: dict, container: dict) -> dict[str, str]:
    """{mount path: secret name} of the secret volumes `container` mounts."""
    volumes = {v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", []) if m["name"] in volumes}


@pytest.mark.parametrize("name", CHECKED)
def test_every_pod_that_reads_a_secret_checks_it_first(docs, name):
    workloads = [d for d in docs[name] if pod_spec(d) is not None]
    checked = 0
    for doc in workloads:
        spec = pod_spec(doc)
        used = {secret for secret, _ in secret_references([doc])}
        if not used:
            continue
        where = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
        first = (spec.get("initContainers") or [{}])[0]
        assert first.get("name") == "check-secrets", f"{where} does not check its secrets before it starts"
        assert first["command"] == ["/bin/sh", "/etc/secret-check/check_secrets.sh"], where
        script_volume = next(m["name"] for m in first["volumeMounts"] if m["mountPath"] == "/etc/secret-check")
        (config_map,) = [v["configMap"]["name"] for v in spec["volumes"] if v["name"] == script_volume]
        assert config_map.startswith("secret-check-"), where  # the generated ConfigMap, hash suffix and all
        generated = [d for d in docs[name] if d["kind"] == "ConfigMap" and d["metadata"]["name"] == config_map]
        assert generated and generated[0]["data"]["check_secrets.sh"] == SCRIPT.read_text(), where
        mounted = _mounted_secrets(spec, first)
        assert set(first["args"]) == set(mounted), f"{where}: checks {first['args']}, mounts {sorted(mounted)}"
        assert set(mounted.values()) == used, f"{where}: reads {sorted(used)}, checks {sorted(set(mounted.values()))}"
        # the pod's own image (no extra pull), or the MinIO client's for distroless MinIO, which has no shell
        assert first["image"] in {c["image"] for c in spec["containers"]} or "minio/mc:" in first["image"], where
        checked += 1
    assert checked >= (1 if name == "vllm-serve" else 5), f"{name}: only {checked} workloads read secrets"


# ---------------------------------------------------------------------------------------------
# vLLM: an API key from a Secret, reachable through the egress allowlist


def test_vllm_requires_an_api_key_from_a_secret(docs, tmp_path):
    deploy = find(docs["vllm-serve"], "Deployment", "factprobe-vllm")
    (server,) = pod_spec(deploy)["containers"]
    env = env_of(server)
    assert env[VLLM_KEY]["valueFrom"]["secretKeyRef"] == {"name": VLLM_SECRET, "key": VLLM_KEY}
    # vLLM reads VLLM_API_KEY itself; never on the command line
    assert not any("api-key" in a or "API_KEY" in a for a in server.get("command", []) + server.get("args", []))
    # k8s/secrets/vllm generates exactly that Secret, in the namespace of the server
    work = tmp_path / "k8s"
    shutil.copytree(K8S, work, ignore=shutil.ignore_patterns("*.env"))
    example = work / "secrets" / "vllm" / "vllm-api-key.env.example"
    shutil.copy(example, example.with_suffix(""))
    (secret,) = render(work / "secrets" / "vllm")
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == VLLM_SECRET
    assert set(secret["data"]) == {VLLM_KEY}
    assert secret["metadata"]["namespace"] == deploy["metadata"]["namespace"]


def test_pipeline_steps_read_the_key_the_server_requires():
    """The steps get the server's key from the same Secret under the variable the served-model client reads."""
    from factprobe.lm.served import KEY_VARIABLES
    from factprobe_ops.components.config import cluster_config
    from factprobe_ops.pipelines.platform import SERVED_KEY_SECRET_KEYS

    assert cluster_config().served_key_secret == VLLM_SECRET
    assert SERVED_KEY_SECRET_KEYS == {VLLM_KEY: KEY_VARIABLES[0]}


def test_pipeline_egress_vllm_adds_exactly_the_vllm_port(docs):
    """Step pods may reach the vLLM pods on 8000 with pipeline-egress-vllm; the plain allowlist stays as it was."""
    base = _egress_rules(find(docs["pipeline-egress"], "NetworkPolicy", "factprobe-step-egress"))
    policy = find(docs["pipeline-egress-vllm"], "NetworkPolicy", "factprobe-step-egress")
    assert policy["spec"]["podSelector"] == {"matchLabels": {PIPELINE_ROLE_LABEL[0]: PIPELINE_ROLE_LABEL[1]}}
    rules = _egress_rules(policy)
    assert rules[: len(base)] == base and len(rules) == len(base) + 1
    ((to, ports),) = rules[len(base) :]
    assert ports == {("TCP", 8000)}
    (peer,) = to
    assert set(peer) == {"podSelector"}, "same namespace only: no namespaceSelector, no ipBlock"
    wanted = peer["podSelector"]["matchLabels"]
    # ... and the selector and the port are the vLLM server's
    vllm = docs["vllm-serve"]
    deploy = find(vllm, "Deployment", "factprobe-vllm")
    assert wanted.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    (server,) = pod_spec(deploy)["containers"]
    service = find(vllm, "Service", "factprobe-vllm")
    target = service["spec"]["ports"][0]["targetPort"]
    (port,) = [p["containerPort"] for p in server["ports"] if p["name"] == target]
    assert port == 8000
    assert deploy["metadata"]["namespace"] == policy["metadata"]["namespace"]
    # the policy that admits the steps at the server (ingress) is in the same overlay as the server
    ingress = find(vllm, "NetworkPolicy", "allow-vllm-ingress")
    assert ingress["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8000}]


def test_readme_says_labels_are_no_identity_and_auth_holds():
    text = " ".join((K8S / "README.md").read_text().split())
    assert "any pod in the namespace can set" in text
    for service in ("basic auth", "MinIO", "API key"):
        assert service in text
    assert "pipeline-egress-vllm" in text and "k8s/secrets/vllm" in text
