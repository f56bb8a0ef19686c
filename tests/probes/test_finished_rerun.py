"""A rerun into a folder that already holds the finished run (issue 22 item 3): the runner says
so (`already_finished`), and calls `on_start` (where tracking opens its MLflow run) only when the
caller asks for it: the CLI does not (no second MLflow run), a pipeline step does (its cached
work folder is reused by a new pipeline run, whose child run must exist)."""

import pytest

from factprobe.framework.config import RunConfig
from factprobe.framework.runner import run_probe


@pytest.mark.slow
def test_finished_folder_starts_only_when_asked(tmp_path, tiny_model_path):
    cfg = RunConfig.from_dict(
        {
            "probe": "ic-lke",
            "model": str(tiny_model_path("gpt2")),
            "relations": "P36",
            "max_facts_per_relation": 2,
            "choices": 5,
            "examples": 2,
        }
    )
    started: list[str] = []
    first = run_probe(cfg, tmp_path / "o", progress=False, on_start=lambda: started.append("first"), start_when_finished=False)
    assert not first.already_finished and first.n_scored_now == 2 and started == ["first"]
    again = run_probe(cfg, tmp_path / "o", progress=False, on_start=lambda: started.append("cli"), start_when_finished=False)
    assert again.already_finished and again.n_scored_now == 0 and started == ["first"]
    step = run_probe(cfg, tmp_path / "o", progress=False, on_start=lambda: started.append("step"))
    assert step.already_finished and started == ["first", "step"]
