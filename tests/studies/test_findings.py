"""`factprobe study findings` end to end on a tiny RANDOM model (never a result) and the real LAMA
files: the folders of every step, the metrics.json structure, verdicts recomputed from the steps'
own files, a rerun that computes nothing, a study that is not installed, and bad options."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from factprobe.errors import ConfigError
from factprobe.io import read_jsonl
from factprobe.metrics import findings as fm
from factprobe.studies import findings as fs
from factprobe.studies import registry
from factprobe.studies.cli import run_study, study_config

STEPS = (
    "ic-lke",
    "hgp",
    "mmp",
    "counterfactual",
    "coherency",
    "belief-icl",
    "icl-examples",
    "icl-sequence-unknown",
    "icl-sequence-incorrect",
    "icl-sequence-unknown-block",
    "icl-sequence-incorrect-block",
)


def _given(model: Path) -> dict:
    return {
        "models": [str(model)],
        "relations": "P36,P1376",
        "max_facts_per_relation": 3,
        "budget": "tiny",
        "device": "cpu",
        "dtype": "float32",
    }


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory) -> Path:
    from factprobe.models.testing import make_tiny_random_model, widen_tiny_llama

    root = tmp_path_factory.mktemp("findings-models")
    return widen_tiny_llama(make_tiny_random_model("llama", root), root / "wide")


@pytest.fixture(scope="module")
def finished(real_data_root, wide_model, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("findings") / "run"
    metrics, _, done = run_study(fs.STUDY, study_config(fs.STUDY, _given(wide_model)), out, progress=False)
    assert not done
    return out, metrics


def _rows(path: Path) -> list[dict]:
    return [r for _, r in read_jsonl(path)]


@pytest.mark.slow
def test_every_step_runs_into_its_folder_and_every_claim_is_reported(finished, wide_model):
    out, metrics = finished
    model_dir = out / wide_model.name
    for step in STEPS:
        assert (model_dir / step / "metrics.json").exists(), step
    claims = [f["claim"] for f in metrics["findings"]]
    assert claims == list(fm.CLAIMS)
    for f in metrics["findings"]:
        assert set(f) == {"claim", "statement", "source", "model", "verdict", "value", "ci", "n", "detail"} | {
            "unit",
            "n_units",
            "method",
            "signs",
        }  # issue 37 item 5: every verdict line shows its unit, n in it, the method and the sign count
        assert f["verdict"] in fm.VERDICTS and f["model"] == str(wide_model) and len(f["ci"]) == 2
        assert f["value"] is None or f["unit"], f["claim"]
    assert metrics["settings"]["budget"] == "tiny" and metrics["settings"]["choices"] == fs.BUDGETS["tiny"]["choices"]
    assert any("RANDOM weights" in n for n in metrics["notes"])
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["findings"] == json.loads(json.dumps(metrics["findings"]))
    md = (out / "findings.md").read_text()
    assert md.count(f"| {wide_model} |") == len(fm.CLAIMS) and "## Detail" in md
    assert (out / "findings.png").stat().st_size > 0


@pytest.mark.slow
def test_verdicts_come_from_the_steps_own_files(finished, wide_model):
    out, metrics = finished
    d, model = out / wide_model.name, str(wide_model)
    b = fs.BUDGETS["tiny"]
    boot = {"n_boot": b["n_boot"], "seed": 0}
    by_claim = {f["claim"]: f for f in metrics["findings"]}
    icl = _rows(d / "ic-lke" / "results.jsonl")
    cf_metrics = json.loads((d / "counterfactual" / "metrics.json").read_text())
    pos = {s: _rows(d / s / "positions.jsonl") for s in fs.SEQUENCE_STEPS}
    expected = [
        fm.mc_vs_baseline(model, "hgp", icl, _rows(d / "hgp" / "results.jsonl"), **boot),
        fm.mc_vs_baseline(model, "mmp", icl, _rows(d / "mmp" / "results.jsonl"), **boot),
        fm.saturation(model, json.loads((d / "icl-examples" / "metrics.json").read_text())["curve"], **boot),
        fm.incorrect_vs_unknown(model, pos["icl-sequence-unknown"], pos["icl-sequence-incorrect"], **boot),
        fm.incorrect_vs_unknown(
            model, pos["icl-sequence-unknown-block"], pos["icl-sequence-incorrect-block"], placement="block", **boot
        ),
        fm.block_vs_random(model, pos["icl-sequence-incorrect-block"], pos["icl-sequence-incorrect"], **boot),
        fm.counterfactual_over_k(
            model,
            _rows(d / "counterfactual" / "results.jsonl"),
            b["shots"],
            shots_used=fs.shots_used(cf_metrics),
            n_params=fs.model_params(model),
            **boot,
        ),
        fm.coherency_poor(model, _rows(d / "coherency" / "results.jsonl"), **boot),
        fm.c1_above_c2(model, _rows(d / "coherency" / "results.jsonl"), **boot),
        fm.prompt_fluctuation(
            model, _rows(d / "belief-icl" / "results.jsonl"), n_draws=b["fluctuation_draws"], n_boot=b["n_boot"], seed=0
        ),
    ]
    for e in expected:
        got = by_claim[e.claim]
        want = e.to_dict()
        assert (got["verdict"], got["n"]) == (want["verdict"], want["n"]), e.claim
        assert got["value"] == pytest.approx(want["value"]) and got["ci"] == pytest.approx(want["ci"]), e.claim
    # the probes' own headline numbers are the ones the findings report
    acc = json.loads((d / "ic-lke" / "metrics.json").read_text())["accuracy"]
    assert by_claim["ic-lke>=hgp"]["detail"]["acc_ic_lke"] == pytest.approx(acc)


@pytest.mark.slow
def test_a_rerun_computes_nothing_and_a_killed_run_resumes_from_the_step_folders(finished, wide_model, monkeypatch):
    out, metrics = finished

    def no_model(*a, **k):
        raise AssertionError("a finished step loaded a model")

    monkeypatch.setattr("factprobe.framework.runner.load_for_probe", no_model)
    monkeypatch.setattr("factprobe.models.load_model", no_model)
    cfg = study_config(fs.STUDY, _given(wide_model))
    again, _, done = run_study(fs.STUDY, cfg, out, progress=False)
    assert done and again["findings"] == json.loads(json.dumps(metrics["findings"]))
    (out / "metrics.json").unlink()  # as if killed after the last step: every step is read back, none rescored
    resumed, _, done = run_study(fs.STUDY, cfg, out, progress=False)
    assert not done
    assert [f["verdict"] for f in resumed["findings"]] == [f["verdict"] for f in metrics["findings"]]
    assert [f["value"] for f in resumed["findings"]] == pytest.approx([f["value"] for f in metrics["findings"]])


@pytest.mark.slow
def test_a_study_that_is_not_installed_leaves_its_claim_not_measured(finished, wide_model, tmp_path, monkeypatch):
    out, _ = finished
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (copy / "metrics.json").unlink()
    monkeypatch.setattr(registry, "available", lambda: ["findings"])
    m, _, _ = run_study(fs.STUDY, study_config(fs.STUDY, _given(wide_model)), copy, progress=False)
    by_claim = {f["claim"]: f for f in m["findings"]}
    for claim in ("saturation", "incorrect>unknown", "incorrect>unknown-block", "incorrect-block>random"):
        assert by_claim[claim]["verdict"] == fm.INCONCLUSIVE and by_claim[claim]["n"] == 0
        assert "not installed" in by_claim[claim]["detail"]["not_measured"]
    assert any("icl-examples is not installed" in n for n in m["notes"])


def test_summary_and_flat_metrics():
    rec = fm.Finding("ic-lke>=hgp", "smollm2-135m-instruct", fm.HOLDS, 0.2, (0.1, 0.3), 40, {}).to_dict()
    none = fm.not_measured("saturation", "smollm2-135m-instruct", "x").to_dict()
    lines = fs.STUDY.summary({"findings": [rec, none]})
    assert "holds" in lines[1] and "[+0.100, +0.300]" in lines[1] and "n/a" in lines[2]
    rel = fm.Finding(
        "ic-lke>=mmp", "m", fm.INCONCLUSIVE, 0.07, (-0.07, 0.22), 12, {}, unit="relations", method="t", signs="9 of 12"
    ).to_dict()
    assert fs.STUDY.summary({"findings": [rel]})[1].endswith("    12 relations  t; 9 of 12")  # issue 37 item 5
    assert lines[-1] == fm.MULTIPLICITY_NOTE  # each verdict is at 95% alone, said on screen
    flat = fs.STUDY.flat_metrics({"findings": [rec, none]})
    assert flat["findings/smollm2_135m_instruct/ic_lke_hgp/verdict"] == 1.0
    assert flat["findings/smollm2_135m_instruct/saturation/verdict"] == 0.0
    assert "findings/smollm2_135m_instruct/saturation/value" not in flat
    assert all(re.fullmatch(r"[a-z0-9_/.]+", k) for k in flat)


@pytest.mark.parametrize(
    "given,match",
    [
        ({"models": "a/m,b/m"}, "two models share a folder name"),
        ({"relations": " , "}, "empty relation id"),
        ({"max_facts_per_relation": 0}, "must be >= 1"),
        ({"budget": "huge"}, "unknown value 'huge'"),
    ],
)
def test_bad_options_are_one_line_errors(given, match):
    with pytest.raises(ConfigError, match=match):
        study_config(fs.STUDY, given)


def test_the_sequence_steps_cover_both_placements_and_see_the_training_facts(tmp_path):
    given = {**_given(tmp_path / "m"), "train_data": str(tmp_path / "train")}
    cfg = fs.FindingsConfig.from_dict(study_config(fs.STUDY, given)["params"])
    givens = fs.study_givens(cfg, str(tmp_path / "m"))
    seq = {step: (g["kind"], g["placement"]) for step, g in givens.items() if step.startswith("icl-sequence")}
    assert seq == {
        "icl-sequence-unknown": ("unknown", "random"),
        "icl-sequence-incorrect": ("incorrect", "random"),
        "icl-sequence-unknown-block": ("unknown", "block"),
        "icl-sequence-incorrect-block": ("incorrect", "block"),
    }
    # issue 29 item 6: an incorrect example must be wrong against the training facts too
    assert all(givens[s]["train_data"] == str(tmp_path / "train") for s in seq)
    # every probe step reads the same training facts, so the capped facts are the same in every step (the map joins them)
    probes = fs.probe_configs(cfg, str(tmp_path / "m"))
    assert {p: c.base.train_data for p, c in probes.items()} == {p: str(tmp_path / "train") for p in fs.PROBES}
    assert fs.probe_configs(cfg, str(tmp_path / "m"))["counterfactual"].params.shots == fs.BUDGETS["tiny"]["shots"]
    assert fs.BUDGETS["paper"]["shots"] == fs.BUDGETS["small"]["shots"] == [10, 15, 20, 32]  # yuan2024 Figure 7's k
    # issue 37 item 1: the counterfactual probe draws its exemplars several times, as many as the budget's draws
    for budget in ("tiny", "small", "paper"):
        cf = fs.probe_configs(fs.FindingsConfig(budget=budget), str(tmp_path / "m"))["counterfactual"]
        assert cf.params.exemplar_draws == fs.BUDGETS[budget]["draws"] == {"tiny": 2, "small": 3, "paper": 5}[budget]


def test_choices_overrides_the_budgets_options_per_item():
    """`--choices 10` under `--budget paper` (the citable run: the paper's templates and draws, 10 options) reaches
    every multiple-choice step, and the budget's own count stays the default; fewer than 2 options is refused."""
    paper = fs.FindingsConfig(budget="paper", relations=["P36"])
    assert fs.probe_configs(paper, "m")["ic-lke"].params.choices == 100
    ten = fs.FindingsConfig(budget="paper", relations=["P36"], choices=10)
    configs = fs.probe_configs(ten, "m")
    assert {configs[p].params.choices for p in ("ic-lke", "hgp", "mmp")} == {10}
    assert configs["hgp"].params.templates == "paper"
    assert fs.study_givens(ten, "m")["icl-examples"]["choices"] == 10
    assert fs.study_givens(ten, "m")["icl-examples"]["draws"] == 5
    with pytest.raises(ConfigError, match="choices"):
        fs.FindingsConfig(budget="paper", relations=["P36"], choices=1)
    assert configs["coherency"].params.max_candidates is None  # the paper's: every candidate
    capped = fs.FindingsConfig(budget="paper", relations=["P36"], choices=10, max_candidates=20)
    assert fs.probe_configs(capped, "m")["coherency"].params.max_candidates == 20
    assert fs.probe_configs(capped, "m")["ic-lke"].to_dict() == configs["ic-lke"].to_dict()  # other steps unchanged


def _worker_argv(model: Path, out: Path, order: str | None = None) -> list[str]:
    argv = ["--models", str(model), "--relations", "P36,P1376", "--max-facts-per-relation", "3", "--budget", "tiny"]
    argv += ["--device", "cpu", "--dtype", "float32", "--out", str(out)]
    return argv + (["--order", order] if order else [])


def _workers_script():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "findings_steps.py"
    spec = importlib.util.spec_from_file_location("findings_steps", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_step_workers_fill_the_study_folders_and_the_study_reads_them_back(finished, wide_model, tmp_path, monkeypatch, capsys):
    """scripts/findings_steps.py runs the study's own steps; the study then scores nothing and reports
    what a study run alone reports."""
    workers = _workers_script()
    out = tmp_path / "run"
    assert sorted(workers.SLOWEST_FIRST) == sorted(STEPS)
    assert workers.main(_worker_argv(wide_model, out)) == 0
    for step in STEPS:
        assert (out / wide_model.name / step / "metrics.json").exists(), step

    def no_model(*a, **k):
        raise AssertionError("the study scored a step a worker had finished")

    monkeypatch.setattr("factprobe.framework.runner.load_for_probe", no_model)
    monkeypatch.setattr("factprobe.models.load_model", no_model)
    metrics, _, done = run_study(fs.STUDY, study_config(fs.STUDY, _given(wide_model)), out, progress=False)
    assert not done
    _, alone = finished
    assert [f["verdict"] for f in metrics["findings"]] == [f["verdict"] for f in alone["findings"]]
    assert [f["value"] for f in metrics["findings"]] == pytest.approx([f["value"] for f in alone["findings"]])
    # a worker of another configuration into the same folders is refused in one line, not passed as finished
    capsys.readouterr()
    assert workers.main([*_worker_argv(wide_model, out), "--max-facts-per-relation", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different configuration" in err[0], err


@pytest.mark.slow
def test_a_step_worker_leaves_a_step_another_live_process_writes(wide_model, tmp_path, capsys):
    from factprobe.file_lock import lock_file
    from factprobe.run_folder import LOCK

    workers = _workers_script()
    out = tmp_path / "run"
    busy = out / wide_model.name / "ic-lke"
    busy.mkdir(parents=True)
    with lock_file(busy / LOCK, timeout=0, label="probe ic-lke"):
        assert workers.main(_worker_argv(wide_model, out, order="ic-lke,hgp")) == 0
    said = capsys.readouterr().out
    assert "ic-lke is another worker's" in said and "hgp finished" in said
    assert not (busy / "metrics.json").exists() and (out / wide_model.name / "hgp" / "metrics.json").exists()


def test_a_step_worker_refuses_an_unknown_step_in_one_line(wide_model, tmp_path, capsys):
    assert _workers_script().main(_worker_argv(wide_model, tmp_path / "run", order="ic-lke,nope")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no step nope" in err[0] and "icl-examples" in err[0]


def test_a_step_worker_names_an_unknown_model_in_one_line(tmp_path, capsys):
    argv = ["--models", str(tmp_path / "no-such-model"), "--relations", "P36", "--budget", "tiny", "--out", str(tmp_path / "run")]
    assert _workers_script().main([*argv, "--order", "ic-lke"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-model" in err[0], err
