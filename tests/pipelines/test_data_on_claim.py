"""The research data reaches the cluster's steps on the model-cache claim (issue 38 item 3): every step that
resolves the data root (the data-build step, the probing steps) mounts the claim `factprobe-cache` and reads
FACTPROBE_DATA=<mount>/data there, so `train_data`, the coherency relations and the BELIEF templates need no
custom image (k8s/README.md, "5. Research data for the steps"); a local build mounts nothing and sets nothing.

Compiles the pipelines that build data, in this Python, without FACTPROBE_* variables.
"""

from __future__ import annotations

import os

import pytest

from tests.pipelines.pipeline_fixtures import load_compiled

pytestmark = pytest.mark.slow  # compiles six pipelines: seconds

#: the pipelines with a data-build step
DATA_PIPELINES = ("probe", "nightly_sweep", "regression", "coherency", "belief", "counterfactual_icl")
MOUNT = "/mnt/factprobe"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from kfp import compiler

    from factprobe_ops.pipelines.catalogue import get_pipeline

    mp = pytest.MonkeyPatch()
    try:
        for key in [k for k in os.environ if k.startswith("FACTPROBE_")]:
            mp.delenv(key)
        out = {}
        for name in DATA_PIPELINES:
            path = tmp_path_factory.mktemp(name) / f"{name}.yaml"
            compiler.Compiler().compile(get_pipeline(name), str(path))
            out[name] = load_compiled(path)
        return out
    finally:
        mp.undo()


def _env(c, step: str) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.executors[c.executor_of(step)]["container"].get("env", [])}


def data_steps(c) -> set[str]:
    """The data-build step, every GPU (probing) step, and a sweep's plan (with shards > 1 it counts the facts)."""
    gpu = {s for s in c.step_names() if "accelerator" in c.executors[c.executor_of(s)]["container"].get("resources", {})}
    return gpu | {s for s in c.step_names() if s.startswith(("data-build", "plan-units"))}


@pytest.mark.parametrize("name", DATA_PIPELINES)
def test_steps_that_read_data_mount_the_claim_and_read_the_data_root_there(compiled, name):
    c = compiled[name]
    steps = data_steps(c)
    assert any(s.startswith("data-build") for s in steps), (name, sorted(c.step_names()))
    for step in steps:
        mounts = c.k8s_executors[c.executor_of(step)].get("pvcMount", [])
        assert [m["mountPath"] for m in mounts] == [MOUNT], (name, step, mounts)
        assert mounts[0]["constant"] == "factprobe-cache", (name, step)
        assert _env(c, step).get("FACTPROBE_DATA") == f"{MOUNT}/data", (name, step)


def test_the_data_build_step_stays_a_cpu_step(compiled):
    c = compiled["probe"]
    (step,) = [s for s in c.step_names() if s.startswith("data-build")]
    container = c.executors[c.executor_of(step)]["container"]
    assert "accelerator" not in container.get("resources", {}) and container["image"].endswith(("factprobe-cpu:0.1.0",))
    assert "nodeSelector" not in c.k8s_executors[c.executor_of(step)]


def test_local_builds_mount_nothing_and_set_no_data_root(monkeypatch):
    from factprobe_ops.pipelines.catalogue import get_pipeline
    from factprobe_ops.pipelines.platform import STORAGE_ENV

    assert STORAGE_ENV["FACTPROBE_DATA"] == "data"
    for key in [k for k in os.environ if k.startswith("FACTPROBE_")]:
        monkeypatch.delenv(key)
    pipe = get_pipeline("probe", local=True)
    spec = pipe.platform_spec.platforms.get("kubernetes") if pipe.platform_spec else None
    text = str(spec) + str(pipe.pipeline_spec)
    assert "pvcMount" not in text and "FACTPROBE_DATA" not in text
