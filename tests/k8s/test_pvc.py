"""The model cache claim (k8s/components/model-cache-pvc, k8s/overlays/model-cache): it renders,
validates against the Kubernetes schema, is the claim the compiled pipelines mount, and its storage
class, size and access mode are parameters an overlay changes in one place."""

from __future__ import annotations

import shutil

import kubernetes_validate
import pytest

from tests.k8s.test_manifests import K8S, K8S_VERSIONS, REPO, find, render

OVERLAY = K8S / "overlays" / "model-cache"


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return render(OVERLAY)


def test_overlay_renders_one_valid_claim(docs):
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim"]  # the params ConfigMap is local-config
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(docs[0], version, strict=True)
    pvc = find(docs, "PersistentVolumeClaim", "factprobe-cache")
    assert pvc["metadata"]["namespace"] == "kubeflow"  # where the pipeline steps run
    assert pvc["spec"]["storageClassName"] == "nfs-csi" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "100Gi"


def test_claim_is_the_one_the_pipelines_mount(docs, monkeypatch):
    """components/config.py's default FACTPROBE_PVC names this claim."""
    from factprobe_ops.components.config import cluster_config

    monkeypatch.delenv("FACTPROBE_PVC", raising=False)
    assert cluster_config().pvc_name == docs[0]["metadata"]["name"]


def test_storage_class_size_and_access_mode_are_parameters(tmp_path):
    shutil.copytree(K8S, tmp_path / "k8s", ignore=shutil.ignore_patterns("*.env"))
    overlay = tmp_path / "k8s" / "overlays" / "team-cache"
    overlay.mkdir()
    params = (K8S / "overlays" / "model-cache" / "params.yaml").read_text()
    for old, new in (
        ("storageClassName: nfs-csi", "storageClassName: standard-rwx"),
        ("size: 100Gi", "size: 500Gi"),
        ("accessMode: ReadWriteMany", "accessMode: ReadWriteOnce"),
    ):
        assert old in params
        params = params.replace(old, new)
    (overlay / "params.yaml").write_text(params)
    (overlay / "kustomization.yaml").write_text(
        "namespace: kubeflow-user-example-com\nresources: [params.yaml]\ncomponents: [../../components/model-cache-pvc]\n"
    )
    docs = render(overlay)
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim"]
    pvc = find(docs, "PersistentVolumeClaim", "factprobe-cache")
    assert pvc["metadata"]["namespace"] == "kubeflow-user-example-com"
    assert pvc["spec"]["storageClassName"] == "standard-rwx"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "500Gi"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    kubernetes_validate.validate(pvc, K8S_VERSIONS[-1], strict=True)


def test_readme_documents_the_claim():
    text = (REPO / "k8s" / "README.md").read_text()
    assert "k8s/overlays/model-cache" in text and "FACTPROBE_PVC" in text and "storageClassName" in text
