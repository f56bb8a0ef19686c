"""The metrics a run computes from its written rows cut down to `metric_columns` (issue 40 item 3) are
those of the whole rows, for every built-in probe kind: a tiny run of each (tiny RANDOM models,
scripted answers where the probe generates), then `probe.metrics` and `probe.artifacts` on every
row of results.jsonl, whole, compared with metrics.json and the extra files the run wrote. A column a
probe's metrics read but do not declare fails here (`ProjectionError`, or a metric that differs)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from factprobe.framework.checkpoint import METRICS, RESULTS, read_rows
from factprobe.framework.config import RunConfig
from factprobe.framework.registry import get_probe
from factprobe.framework.runner import run_probe
from factprobe.metrics.json_safe import json_safe
from factprobe.models import load_model
from factprobe.probes.belief_mlm import CONTENT_FREE
from factprobe.probes.qa import pool_items
from tests.probes import test_belief_icl as icl
from tests.probes import test_belief_mlm as mlm
from tests.probes import test_coherency as coh
from tests.probes import test_counterfactual as cf
from tests.probes import test_mc_items as mci
from tests.probes import test_qa as qa

pytestmark = pytest.mark.slow  # a tiny run of each probe kind: seconds each on 2 cores


def assert_as_from_whole_rows(out: Path, cfg: RunConfig, prepared) -> None:
    """metrics.json and the extra files of the run in `out` equal what the whole rows give."""
    probe = get_probe(cfg.probe)
    whole = read_rows(out / RESULTS)
    assert whole, "the run scored nothing"
    assert probe.metric_columns is not None, f"{probe.name} declares no metric_columns: its rows are held whole"
    got = json.loads((out / METRICS).read_text(encoding="utf-8"))
    want = json.loads(json.dumps(json_safe(probe.metrics(whole, prepared, cfg))))
    assert {k: got.get(k) for k in want} == want
    for name, content in probe.artifacts(whole, prepared, cfg, got).items():
        if isinstance(content, pd.DataFrame):
            content.to_parquet(out.parent / f"want-{name}", index=False)
            written, expected = pd.read_parquet(out / name), pd.read_parquet(out.parent / f"want-{name}")
            # the run passes its metrics in computed order, metrics.json has sorted keys: columns may differ in order
            pd.testing.assert_frame_equal(written, expected, check_like=True)
        elif isinstance(content, (dict, list)):
            assert json.loads((out / name).read_text(encoding="utf-8")) == json.loads(json.dumps(content))
        else:
            assert (out / name).read_text(encoding="utf-8") == content


def quiet(cfg: RunConfig, out: Path, loaded=None):
    return run_probe(cfg, out, loaded=loaded, progress=False, log=lambda _m: None)


@pytest.fixture(scope="module")
def llama(tiny_model_path):
    return load_model(str(tiny_model_path("llama")))


@pytest.fixture(scope="module")
def wide(tiny_model_path, tmp_path_factory):
    return load_model(str(qa.widened_tiny_llama(tiny_model_path, tmp_path_factory.mktemp("wide"))))


@pytest.mark.parametrize(
    "probe, own",
    [
        ("ic-lke", {"examples": 3}),
        ("eic-lke", {"examples": 2, "eic_tests_per_sequence": 2, "eic_interleave": 1}),
        ("mc-items", None),
        ("hgp", {"templates": "2"}),
    ],
)
def test_multiple_choice(llama, tmp_path, probe, own, real_data_root):
    base = {"probe": probe, "model": str(llama.path), "relations": ["P36", "P1376"], "max_facts_per_relation": 3, "choices": 6}
    if probe == "mc-items":  # the fixture items of tests/probes/test_mc_items.py
        base = {"probe": probe, "model": str(llama.path), "data": str(mci.DATA), "option_score": "mean"}
    cfg = RunConfig.from_dict({**base, **(own or {})})
    outcome = quiet(cfg, tmp_path / "out", llama)
    assert_as_from_whole_rows(tmp_path / "out", cfg, outcome.prepared)


def test_qa_with_popularity_and_several_k(wide, tmp_path, monkeypatch):
    answers = {}
    qa.scripted(monkeypatch, lambda q: answers.setdefault(q, " Paris" if len(answers) % 2 else " I do not know"))
    cfg = qa.qa_cfg(wide, shots="0,2", split="all")
    outcome = quiet(cfg, tmp_path / "out", wide)
    assert_as_from_whole_rows(tmp_path / "out", cfg, outcome.prepared)


def test_counterfactual(cf_run_here):
    out, cfg, outcome = cf_run_here
    assert_as_from_whole_rows(out, cfg, outcome.prepared)


@pytest.fixture
def cf_run_here(wide, tmp_path, monkeypatch):
    prepared = get_probe("counterfactual").prepare(cf.cf_cfg(wide))
    pool = pool_items(prepared)
    evals = [it for its in prepared.items.values() for it in its]
    answers = {it.question: " " + it.gold[0] for it in pool[::3] + evals[::2]}
    qa.scripted(monkeypatch, lambda q: answers.get(q, " I do not know"))
    cfg = cf.cf_cfg(wide)
    outcome = quiet(cfg, tmp_path / "out", wide)
    return tmp_path / "out", cfg, outcome


def test_coherency(llama, tmp_path):
    cfg = coh.toy_cfg(llama, tmp_path)
    outcome = quiet(cfg, tmp_path / "out", llama)
    assert_as_from_whole_rows(tmp_path / "out", cfg, outcome.prepared)


def test_belief_icl_with_confidence(wide, tmp_path, monkeypatch):
    root = icl.toy_root.__wrapped__(tmp_path, monkeypatch)
    cfg = icl.config(root, tmp_path, wide.path, samples=3, max_answer_tokens=3)
    outcome = quiet(cfg, tmp_path / "out", wide)
    assert_as_from_whole_rows(tmp_path / "out", cfg, outcome.prepared)


def test_belief_mlm_with_content_free_rows(tiny_model_path, tmp_path, monkeypatch):
    root = mlm.toy_root.__wrapped__(tmp_path, monkeypatch)
    cfg = mlm.config(root, tmp_path, tiny_model_path("bert"), vocab="common")
    outcome = quiet(cfg, tmp_path / "out")
    assert {r.get("row_type") for r in read_rows(tmp_path / "out" / RESULTS)} >= {"fact", CONTENT_FREE}
    assert_as_from_whole_rows(tmp_path / "out", cfg, outcome.prepared)
