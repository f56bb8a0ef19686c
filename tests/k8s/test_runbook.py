"""k8s/README.md opens with the day-one runbook (issue 38 item 5), and what it names exists.

The `factprobe ...` commands in it are parsed by tests/test_docs_commands.py; here: the runbook is the first section
and covers each stage from images to MLflow, every `kubectl apply -k PATH` is a kustomization in this checkout, every
`make TARGET` a Makefile target, every `scripts/...` file exists, every compiled YAML it uploads is a pipeline
`factprobe pipeline compile` writes, every Secret it tells you to create is one the manifests or the components
read, and each step says whether it was rehearsed or only rendered.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "k8s" / "README.md"


def runbook() -> str:
    """The runbook: from the first `## ` heading to the next one."""
    text = README.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    assert len(sections) > 2, "k8s/README.md has no sections"
    return sections[1]


def test_readme_opens_with_the_runbook():
    text = README.read_text(encoding="utf-8")
    first = re.search(r"^## (.+)$", text, flags=re.MULTILINE)
    assert first and first.group(1).startswith("Day one"), f"the first section is {first.group(1) if first else None!r}"
    book = runbook()
    for stage in (
        "build_images.sh --registry",
        "kubectl apply -k k8s/secrets",
        "kubectl apply -k k8s/overlays/production",
        "mc mirror",
        "pipeline create",
        "pipeline submit probe",
        "schedule nightly_sweep",
        "pipeline submit regression",
        "port-forward svc/mlflow",
    ):
        assert stage in book, f"the runbook lacks {stage!r}"


def test_every_step_says_rehearsed_or_rendered():
    steps = re.split(r"^\d+\. ", runbook(), flags=re.MULTILINE)[1:]
    assert len(steps) >= 7
    for step in steps:
        head = step[:1200].lower()
        assert "rehearsed" in head or "rendered" in head, f"step {step.splitlines()[0]!r} says neither"


def test_kustomize_paths_make_targets_and_scripts_exist():
    book = runbook()
    paths = re.findall(r"kubectl apply -k (k8s/[\w./-]+)", book)
    assert paths
    for path in paths:
        assert (REPO / path / "kustomization.yaml").is_file(), f"no kustomization at {path}"
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.MULTILINE))
    for target in re.findall(r"`?make ([a-z][\w-]*)", book):
        assert target in targets, f"make {target}: no such Makefile target"
    for script in re.findall(r"(scripts/[\w./-]+\.(?:sh|py))", book):
        assert (REPO / script).is_file(), f"{script} does not exist"


def test_uploaded_yaml_files_are_compiled_pipelines():
    from factprobe_ops.pipelines.catalogue import PIPELINES

    names = {p if isinstance(p, str) else p[0] for p in PIPELINES}
    files = re.findall(r"build/pipelines/(\w+)\.yaml", runbook())
    assert files
    for name in files:
        assert name in names, f"build/pipelines/{name}.yaml: no pipeline {name!r}"


def test_named_secrets_are_the_ones_the_manifests_and_components_read():
    book = runbook()
    named = set(re.findall(r"`([a-z0-9-]+-(?:credentials|admin|key|token))`", book))
    assert {"mlflow-credentials", "s3-credentials", "postgres-credentials", "minio-root-credentials"} <= named
    sources = "\n".join(
        p.read_text(encoding="utf-8") for p in [*(REPO / "k8s").rglob("*.yaml"), REPO / "components" / "config.py"]
    )
    for secret in named:
        assert re.search(rf"\b{re.escape(secret)}\b", sources), f"no manifest or component reads the Secret {secret}"
