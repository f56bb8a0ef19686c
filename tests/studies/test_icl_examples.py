"""`factprobe study icl-examples` (factprobe/studies/icl_examples.py, wu2024 Figure 1).

Tiny RANDOM models on the multiple-choice fixture (tests/fixtures/mc_snapshot): their numbers mean
nothing; the tests check the contract: n = 0 is zero-context scoring, the examples for n are a
prefix of those for larger n, the reused prefix gives the probe's numbers, capped n are noted, the
metrics' shape, and one clear line per bad --n. One small real-model run checks the CLI end to end."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from factprobe.cli import main
from factprobe.datasets.mc_dataset import prepare_mc
from factprobe.errors import ConfigError, ContextTooLongError
from factprobe.framework.config import BaseConfig, RunConfig
from factprobe.framework.runner import run_probe
from factprobe.io import read_jsonl
from factprobe.lm.naive import naive_logprob
from factprobe.lm.scorer import ChoiceRequest, Scorer
from factprobe.probes.ic_lke import relation_prefix
from factprobe.studies.cli import run_study, study_config
from factprobe.studies.icl_examples import (
    STUDY,
    ICLExamplesConfig,
    curve_records,
    n95,
    plan_relation,
    score_curve,
)

FX = Path(__file__).resolve().parents[1] / "fixtures" / "mc_snapshot"

SEED = 3


def _base(model) -> dict:
    return {
        "model": str(model),
        "source": "triples",
        "data": str(FX / "test.jsonl"),
        "train_data": str(FX / "train"),
        "seed": SEED,
        "device": "cpu",
        "dtype": "float32",
    }


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    """(base config dict, loaded tiny gpt2, scorer, prepared fixture with 5 choices)."""
    from factprobe.models import load_model

    flat = _base(tiny_model_path("gpt2"))
    base = BaseConfig.from_dict(flat)
    loaded = load_model(base.model, device="cpu", dtype="float32")
    scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device, max_length=loaded.max_length)
    return flat, loaded, scorer, prepare_mc(base, choices=5)


def _plans(scorer, prepared, cfg, notes=None):
    note = notes.append if notes is not None else lambda m: None
    return {
        rel: plan_relation(scorer, rel, items, prepared.train, [f for f in prepared.test if f.relation == rel], cfg, SEED, note)
        for rel, items in prepared.items.items()
    }


def _probe_rows(tiny, tmp_path, examples: int) -> dict[str, dict]:
    flat, loaded = tiny[0], tiny[1]
    out = tmp_path / f"ic-lke-{examples}"
    run_probe(
        RunConfig.from_dict({"probe": "ic-lke", **flat, "choices": 5, "examples": examples}),
        out,
        loaded=loaded,
        progress=False,
        log=lambda m: None,
    )
    return {r["fact_id"]: r for _, r in read_jsonl(out / "results.jsonl")}


@pytest.fixture(scope="module")
def curve(tiny):
    """One scoring of n = 0, 1, 2, 4 over 2 draws on the fixture, log-probs and contexts kept."""
    _, _, scorer, prepared = tiny
    cfg = ICLExamplesConfig(n=[0, 1, 2, 4], draws=2, choices=5)
    plans = _plans(scorer, prepared, cfg)
    return cfg, plans, score_curve(scorer, plans, cfg, keep_logprobs=True)


def test_n0_is_zero_context_scoring_exactly(tiny, curve, tmp_path):
    _, loaded, scorer, prepared = tiny
    _, _, scores = curve
    probe = _probe_rows(tiny, tmp_path, examples=0)  # the IC-LKE probe's own n = 0 mode
    for rel, items in prepared.items.items():
        rows = scores.rows[(rel, 0, None)]
        assert scores.rows_at(rel, 0, 1) is rows  # one scoring shared by every draw
        bare = scorer.score_choices([ChoiceRequest(it.subject, [" " + o for o in it.options]) for it in items])
        for it, row, lp in zip(items, rows, bare):
            assert row["context"] == it.subject  # the paper's x alone: no example text, no BOS text (issue 29)
            # the same scoring (equal up to the thread count's reduction order: the probe applies its thread
            # policy, which may differ from the count the curve ran with in this process)
            assert row["logprobs"] == pytest.approx(lp.tolist(), abs=1e-5)
            assert row["logprobs"] == pytest.approx(probe[it.fact_id]["logprobs"], abs=1e-5)
    it = prepared.items["P36"][0]
    naive = naive_logprob(loaded.model, loaded.tokenizer, it.subject, " " + it.options[0])
    assert abs(scores.rows[("P36", 0, None)][0]["logprobs"][0] - naive) < 1e-4


def test_examples_for_n_are_a_prefix_of_those_for_larger_n(curve):
    cfg, plans, scores = curve
    for rel, plan in plans.items():
        assert plan.draws[0] != plan.draws[1]  # the draws differ
        for d in range(cfg.draws):
            contexts = [scores.rows_at(rel, n, d)[0]["context"] for n in (1, 2, 4)]
            subject = plan.items[0].subject
            prefixes = [c[: -len(subject)] for c in contexts]
            for short, long in itertools.pairwise(prefixes):
                assert long.startswith(short) and len(long) > len(short)
            assert prefixes[-1].rstrip() == relation_prefix(plan.draws[d][:4])
    # every n > 1 of a draw extended the previous n's prefix cache instead of recomputing it
    assert scores.prefix_extended == len(plans) * cfg.draws * 2 and scores.prefix_recomputed == 0


def test_reused_prefix_gives_the_ic_lke_probes_numbers(tiny, curve, tmp_path):
    """Draw 0 at the largest n holds the probe's own examples (same seed): the reused (extended)
    prefix gives the probe's contexts exactly and its log-probs within 1e-4; so does recomputing."""
    _, _, scorer, _ = tiny
    cfg, plans, reused = curve
    p36 = {"P36": plans["P36"]}
    fresh = score_curve(scorer, p36, cfg, keep_logprobs=True, reuse_prefix=False)
    assert fresh.prefix_extended == 0 and fresh.prefix_recomputed == cfg.draws * 2
    probe = _probe_rows(tiny, tmp_path, examples=4)
    for rel in plans:
        for row in reused.rows_at(rel, 4, 0):
            assert row["context"] == probe[row["fact_id"]]["context"]
            assert np.allclose(row["logprobs"], probe[row["fact_id"]]["logprobs"], atol=1e-4, rtol=0)
    for key, rows in fresh.rows.items():
        for a, b in zip(reused.rows[key], rows):
            assert a["context"] == b["context"] and np.allclose(a["logprobs"], b["logprobs"], atol=1e-4, rtol=0)


def test_metrics_shape_files_and_summary(tiny, tmp_path):
    flat, _, _, _ = tiny
    out = tmp_path / "study"
    metrics, _, finished = run_study(
        STUDY,
        study_config(STUDY, {**flat, "choices": 5, "n": "0,1,3", "draws": 2, "max_facts_per_relation": 3}),
        out,
        progress=False,
    )
    assert not finished
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["curve"] == json.loads(json.dumps(metrics["curve"]))
    assert [r["n"] for r in metrics["curve"]] == [0, 1, 3]
    for r in metrics["curve"]:
        assert len(r["draws"]) == 2 and r["mean"] == pytest.approx(sum(r["draws"]) / 2)
        assert r["std"] == pytest.approx(float(np.std(r["draws"], ddof=1)))
        assert r["n_items"] == 6 and set(r["n_used"]) == {"P36", "P103"}
    assert metrics["curve"][0]["draws"][0] == metrics["curve"][0]["draws"][1]  # n = 0 has no draw
    assert metrics["n95"] in (0, 1, 3) and set(metrics["per_relation"]) == {"P36", "P103"}
    assert metrics["model_is_random"] is True and metrics["draw_seeds"][0] == SEED
    table = [r for _, r in read_jsonl(out / "curve.jsonl")]
    assert [(r["n"], r["draw"]) for r in table] == [(n, d) for n in (0, 1, 3) for d in (0, 1)]
    assert [r["accuracy"] for r in table if r["n"] == 3] == metrics["curve"][2]["draws"]
    assert (out / "curve.png").stat().st_size > 0 and STUDY.figures(out) == [out / "curve.png"]
    assert sum(1 for _ in read_jsonl(out / "scores.jsonl")) == 6 * (1 + 2 + 2)  # n=0 once, n=1 and 3 per draw
    lines = STUDY.summary(metrics)
    assert "RANDOM weights" in lines[0] and lines[2].split()[0] == "0" and any(x.startswith("n95 = ") for x in lines)
    flat_m = STUDY.flat_metrics(metrics)
    assert flat_m["accuracy/n/3"] == metrics["curve"][2]["mean"] and "n95" in flat_m


def test_n95_and_curve_records_hand_computed():
    acc = {0: [0.1, 0.1], 1: [0.5, 0.7], 5: [0.84, 0.86], 10: [0.9, 0.9]}
    curve = curve_records(acc)
    assert curve[1]["mean"] == pytest.approx(0.6) and curve[1]["std"] == pytest.approx(math.sqrt(0.02))
    assert n95(curve) == (10, pytest.approx(0.855))  # 0.85 < 0.95 * 0.9
    acc[5] = [0.85, 0.87]
    assert n95(curve_records(acc))[0] == 5
    one = curve_records({0: [0.2], 4: [0.4]})
    assert math.isnan(one[0]["std"]) and n95(one)[0] == 4
    assert n95(curve_records({0: [math.nan]}))[0] is None


def test_n_beyond_the_training_split_is_capped_with_one_note(tiny):
    _, _, scorer, prepared = tiny
    notes: list[str] = []
    cfg = ICLExamplesConfig(n=[0, 30, 50], draws=2, choices=5)
    plans = _plans(scorer, prepared, cfg, notes)
    assert notes == [
        f"{rel}: n=30,50 capped at 12: the training examples available (one per subject, test subjects excluded)"
        for rel in ("P36", "P103")
    ]
    p36 = {"P36": plans["P36"]}
    scores = score_curve(scorer, p36, cfg)
    assert set(scores.rows) == {("P36", 0, None), ("P36", 12, 0), ("P36", 12, 1)}  # nothing scored twice
    assert scores.rows_at("P36", 50, 1) is scores.rows_at("P36", 30, 1) is scores.rows[("P36", 12, 1)]


def test_n_beyond_the_window_is_capped_or_refused(tiny):
    _, loaded, _, prepared = tiny
    small = Scorer(loaded.model, loaded.tokenizer, device=loaded.device, max_length=60)
    notes: list[str] = []
    items = prepared.items["P36"]
    test = [f for f in prepared.test if f.relation == "P36"]
    plan = plan_relation(
        small, "P36", items, prepared.train, test, ICLExamplesConfig(n=[0, 1, 10], choices=5), SEED, notes.append
    )
    assert 1 <= plan.cap < 10 and all(len(d) == plan.cap for d in plan.draws)
    assert notes == [f"P36: n=10 capped at {plan.cap}: the model's window (60 tokens) holds no more examples"]
    with pytest.raises(ContextTooLongError, match=r"P36: n=10 examples exceed the model's context window of 60"):
        plan_relation(
            small,
            "P36",
            items,
            prepared.train,
            test,
            ICLExamplesConfig(n=[0, 1, 10], choices=5, on_too_long="refuse"),
            SEED,
            notes.append,
        )


@pytest.mark.parametrize(
    "value, needle",
    [
        ("0,5,2", "n='0,5,2': give each n once, in increasing order"),
        ("0,1,1", "n='0,1,1': give each n once, in increasing order"),
        ("0,-1", "n='0,-1': give each n once|n='0,-1': numbers of examples must be >= 0"),
        ("0,two", "n='0,two': 'two' is not a whole number"),
        ("1.5", "n='1.5': '1.5' is not a whole number"),
        ("", "n='': give at least one number"),
    ],
)
def test_bad_n_values_are_one_line_errors(value, needle):
    with pytest.raises(ConfigError, match=needle):
        ICLExamplesConfig(n=value)


def test_draws_default_to_the_papers_five_seeds():
    """wu2024 Figure 1 averages over "five random seeds" (issue 29 item 5): a curve without --draws has five."""
    assert ICLExamplesConfig().draws == 5
    assert study_config(STUDY, {"choices": 5})["params"]["draws"] == 5


def test_bad_n_and_draws_on_the_command_line(tmp_path, capsys):
    assert main(["study", "icl-examples", "--n", "0,10,5", "--out", str(tmp_path / "x"), "--no-track"]) == 2
    assert capsys.readouterr().err.strip() == "error: n='0,10,5': give each n once, in increasing order (e.g. 0,1,2,5,10)"
    assert main(["study", "icl-examples", "--draws", "0", "--out", str(tmp_path / "y"), "--no-track"]) == 2
    assert capsys.readouterr().err.strip() == "error: draws=0: must be >= 1"
    assert ICLExamplesConfig(n="0,1,5").n == [0, 1, 5] and ICLExamplesConfig(n=[2.0, "5"]).n == [2, 5]


@pytest.mark.real_model
def test_real_model_cli_end_to_end(real_model_path, real_data_root, tmp_path, capsys):
    out = tmp_path / "curve"
    argv = [
        "study",
        "icl-examples",
        "--model",
        str(real_model_path("smollm2-135m-instruct")),
        "--source",
        "lama",
        "--data",
        str(real_data_root / "lama"),  # examples from a split of the LAMA facts (no LPAQA load)
        "--relations",
        "P36",
        "--max-facts-per-relation",
        "3",
        "--choices",
        "5",
        "--n",
        "0,1,2",
        "--draws",
        "2",
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--out",
        str(out),
        "--no-progress",
        "--no-track",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "IC-LKE accuracy by number of in-context examples (2 draw(s), 3 items" in text and "n95 = " in text
    m = json.loads((out / "metrics.json").read_text())
    assert [r["n"] for r in m["curve"]] == [0, 1, 2] and all(len(r["draws"]) == 2 for r in m["curve"])
    assert m["model_is_random"] is False and m["n95"] in (0, 1, 2) and m["prefix_extended"] == 2
    assert (out / "curve.png").exists()
    assert main(argv) == 0 and "already holds this finished study" in capsys.readouterr().out
