"""Issue 28, "two nights": a real local `factprobe pipeline run probe` twice over one model folder whose
weights are redrawn in between. Night 2 scores every row and its MLflow run carries the new revision;
a third night with unchanged weights reuses everything. Tiny RANDOM weights: plumbing, never results."""

import shutil

import pytest
import torch

from .pipeline_fixtures import run_local_pipeline

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

PARAMS = [
    "--param",
    'probes=["ic-lke"]',
    "--param",
    "relations=P36",
    "--param",
    "max_facts_per_relation=3",
    "--param",
    "choices=5",
    "--param",
    "examples=3",
]


def redraw(folder, seed: int) -> None:
    from transformers import AutoModelForCausalLM

    from factprobe.models.testing import redraw_weights

    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    redraw_weights(m, seed=seed)
    m.save_pretrained(folder)


def test_a_night_over_new_weights_scores_afresh_and_an_unchanged_night_reuses(tmp_path, tiny_model_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_path("llama"), model)
    params = ["--param", f'models=["{model}"]', *PARAMS]

    def night() -> dict:
        _, _, runs = run_local_pipeline("probe", params, tmp_path)
        # this night's probe run: the newest (the nights share one experiment)
        probe = max((r for r in runs if r.data.tags.get("factprobe.step") == "probe"), key=lambda r: r.info.start_time)
        return {
            "revision": probe.data.tags["factprobe.model_revision"],
            "resumed": probe.data.metrics["n_resumed"],
            "n": probe.data.metrics["n"],
            "numerics": probe.data.tags["factprobe.numerics"],
            "dtype": probe.data.params["identity.dtype"],
        }

    first = night()
    assert first["resumed"] == 0 and first["n"] == 3 and first["dtype"] == "float32"
    redraw(model, seed=11)
    second = night()
    assert second["revision"] != first["revision"] and second["resumed"] == 0  # every row scored afresh
    third = night()
    assert third["revision"] == second["revision"] and third["resumed"] == third["n"] == 3  # all reused
