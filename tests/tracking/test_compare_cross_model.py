"""`factprobe compare RUN RUN RUN --out DIR`: cross-model maps (issue 20 item 4; Wu et al. 2024 section
4.2, Figures 5-6, Tables 1 and 10), and the same maps in the report step.

Three tiny result folders, built here, of three models over 10 facts in 3 relations:

    fact      f1 f2 f3 f4 | f5 f6 f7 f8 | f9 f10
    relation  R1          | R2          | R3
    small     1  1  0  0  | 1  0  0  0  | 1  0      acc R1 1/2, R2 1/4, R3 1/2
    large     1  0  1  1  | 1  1  0  0  | 1  1      acc R1 3/4, R2 1/2, R3 1
    other     1  0  0  0  | 1  1  1  1  | 0  0      acc R1 1/4, R2 1,   R3 0

small (100M) and large (1B) are family A, other (500M) family B.
- eta(small | large): small knows {f1, f2, f5, f9}, large also knows f1, f5, f9 -> pooled 3/4;
  per relation R1 1/2 ({f1,f2} -> f1), R2 1, R3 1; mean over relations 5/6.
- Pearson r over the 3 relations, deviations from the mean in twelfths:
  small (1, -2, 1), large (0, -3, 3), other (-2, 7, -5);
  r(small, large) = 9 / sqrt(6 * 18) = sqrt(3)/2; r(small, other) = -21 / sqrt(6 * 78);
  r(large, other) = -36 / sqrt(18 * 78). Within family A: sqrt(3)/2; across: the mean of the other two.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from factprobe.cli import main
from factprobe.errors import ConfigError

FACTS = [
    ("f1", "R1"),
    ("f2", "R1"),
    ("f3", "R1"),
    ("f4", "R1"),
    ("f5", "R2"),
    ("f6", "R2"),
    ("f7", "R2"),
    ("f8", "R2"),
    ("f9", "R3"),
    ("f10", "R3"),
]
KNOWN = {
    "org/small": {"f1", "f2", "f5", "f9"},
    "org/large": {"f1", "f3", "f4", "f5", "f6", "f9", "f10"},
    "org/other": {"f1", "f5", "f6", "f7", "f8"},
}
CONFIG = {
    "probe": "ic-lke",
    "source": "lama",
    "data": None,
    "train_data": None,
    "relations": None,
    "max_facts_per_relation": None,
    "seed": 0,
    "choices": 100,
    "skip_small_relations": False,
}
R_SL = 9 / math.sqrt(6 * 18)
R_SO = -21 / math.sqrt(6 * 78)
R_LO = -36 / math.sqrt(18 * 78)
META_YAML = """
- {model: org/small, family: A, size: 100M}
- {model: org/large, family: A, size: 1B}
- {model: org/other, family: B, size: 500000000}
"""


def _rows(model, facts=FACTS, known=None):
    known = KNOWN[model] if known is None else known
    return [
        {
            "fact_id": f"{rel}|{f}",
            "relation": rel,
            "subject": f,
            "correct": f in known,
            "gold_prob": 0.9 if f in known else 0.1,
            "confidence": 0.9 if f in known else 0.4,
        }
        for f, rel in facts
    ]


def _run(folder, model, digest="d1", facts=FACTS, known=None, config=None, metrics=None):
    """A finished probe folder as `factprobe probe` leaves it: results.jsonl, run_config.json, metrics.json."""
    folder.mkdir(parents=True)
    rows = _rows(model, facts, known)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "run_config.json").write_text(
        json.dumps({"results_key": "k", "config": {**CONFIG, **(config or {}), "model": model}})
    )
    (folder / "metrics.json").write_text(
        json.dumps({"data_digest": digest, "model": model, **(metrics or {}), "identity": identity(model, digest)})
    )
    return folder


def identity(model, digest, dtype="float32", device="cpu", transformers="5.0.0", inputs=()):
    """The measurement identity a probe run records (factprobe.identity), made by hand."""
    return {
        "model_revision": f"local-sha256:{abs(hash(model)):x}",
        "data_digest": digest,
        "config_key": "k",
        "numerics": {
            "dtype": dtype,
            "device": device,
            "device_name": device,
            "attn_implementation": "sdpa",
            "torch": "2.13.0",
            "transformers": transformers,
            "peft": None,
            "factprobe": "0.1.0",
        },
        "inputs": [{"name": n, "location": loc, "digest": digest} for n, loc in inputs],
    }


@pytest.fixture
def three(tmp_path):
    runs = [_run(tmp_path / n, f"org/{n}") for n in ("small", "large", "other")]
    meta = tmp_path / "meta.yaml"
    meta.write_text(META_YAML)
    return tmp_path, [str(r) for r in runs], meta


def test_three_runs_write_the_maps_and_the_figures(three, capsys):
    tmp, runs, meta = three
    out = tmp / "maps"
    assert main(["compare", *runs, "--out", str(out), "--model-meta", str(meta)]) == 0
    text = capsys.readouterr().out
    res = json.loads((out / "cross_model.json").read_text())
    assert (out / "heatmap.png").stat().st_size > 1000 and (out / "pearson.png").stat().st_size > 1000
    # Figure 5's order: families by the accuracy of their model closest to 7B (A: large, mean over relations 0.75;
    # B: other, 0.417), models by average accuracy (large 0.75, small 0.417)
    assert res["order"] == ["org/large", "org/small", "org/other"]
    assert res["heatmap"]["org/small"] == pytest.approx({"R1": 0.5, "R2": 0.25, "R3": 0.5})
    assert res["heatmap"]["org/large"] == pytest.approx({"R1": 0.75, "R2": 0.5, "R3": 1.0})
    assert res["heatmap"]["org/other"] == pytest.approx({"R1": 0.25, "R2": 1.0, "R3": 0.0})
    p = res["pearson"]
    assert p["org/small"]["org/large"] == pytest.approx(math.sqrt(3) / 2)
    assert p["org/large"]["org/small"] == pytest.approx(R_SL)
    assert p["org/small"]["org/other"] == pytest.approx(R_SO) and p["org/large"]["org/other"] == pytest.approx(R_LO)
    fc = res["family_correlation"]
    assert fc["within"] == pytest.approx(R_SL) and fc["across"] == pytest.approx((R_SO + R_LO) / 2)
    assert (fc["n_within"], fc["n_across"]) == (1, 2)
    assert list(res["eta"]) == ["org/small vs org/large"]  # other is alone in its family
    eta = res["eta"]["org/small vs org/large"]
    assert eta["pooled"] == pytest.approx(3 / 4) and eta["relation_mean"] == pytest.approx(5 / 6)
    assert eta["per_relation"] == pytest.approx({"R1": 0.5, "R2": 1.0, "R3": 1.0})
    assert res["base_vs_finetuned"] == {}
    models = {m["label"]: m for m in res["models"]}
    assert models["org/large"]["size"] == 1e9 and models["org/other"]["family"] == "B"
    assert models["org/small"]["digest"] == "d1" and models["org/small"]["accuracy"] == pytest.approx(0.4)
    assert res["n_facts"] == 10 and res["metric"] == "accuracy"
    # the console: the heatmap as a table, the family means, eta
    assert "M2 = org/small  (family A, size 100M)" in text
    assert "R2                       0.500   0.250   1.000" in text
    assert f"within families {R_SL:.3f} (1 pair), across families {(R_SO + R_LO) / 2:.3f} (2 pairs)" in text
    assert f"  r(org/small, org/other) = {R_SO:.3f}" in text
    assert "org/small vs org/large: eta 0.833 (pooled over facts 0.750;" in text  # Table 1's number first
    assert "families are by architecture" not in text  # every family came from --model-meta
    assert "cross_model.json" in text


def test_csv_metadata_gives_the_same_maps_and_json_prints_them(three, capsys):
    tmp, runs, _ = three
    meta = tmp / "meta.csv"
    meta.write_text("model,family,size\norg/small,A,100M\norg/large,A,1e9\norg/other,B,0.5B\n")
    assert main(["compare", *runs, "--model-meta", str(meta), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["eta"]["org/small vs org/large"]["pooled"] == pytest.approx(0.75)
    assert res["family_correlation"]["within"] == pytest.approx(R_SL)


def test_two_runs_keep_the_fact_by_fact_comparison_unless_asked(three, capsys):
    tmp, runs, _ = three
    assert main(["compare", runs[0], runs[1], "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "facts joined: 10" in out and "McNemar" in out and "cross-model" not in out
    two = tmp / "two.yaml"
    two.write_text("\n".join(META_YAML.strip().splitlines()[:2]))
    assert main(["compare", runs[0], runs[1], "--cross-model", "--model-meta", str(two)]) == 0
    out = capsys.readouterr().out
    assert (
        "cross-model maps of 2 runs over 10 facts" in out and "org/small vs org/large: eta 0.833 (pooled over facts 0.750" in out
    )


def test_runs_on_different_fact_sets_are_refused_naming_their_digests(three, capsys):
    tmp, runs, meta = three
    fewer = _run(tmp / "fewer", "org/other", digest="d2", facts=FACTS[:8])  # no R3
    args = ["compare", runs[0], runs[1], str(fewer), "--model-meta", str(meta)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the runs test different fact sets")
    assert "data digest d1: org/small (10 facts), org/large (10 facts); data digest d2: org/other (8 facts)" in err[0]
    assert "--intersect to compare the 8 facts all 3 runs share" in err[0]
    # --intersect: the 8 common facts, and it says so
    assert main([*args, "--intersect", "--out", str(tmp / "x")]) == 0
    out = capsys.readouterr().out
    assert "--intersect: compared on the 8 facts all 3 runs share (of org/small 10, org/large 10, org/other 8)" in out
    res = json.loads((tmp / "x" / "cross_model.json").read_text())
    assert res["n_facts"] == 8 and set(res["heatmap"]["org/small"]) == {"R1", "R2"}
    assert res["intersect"]["n_per_run"] == {"org/small": 10, "org/large": 10, "org/other": 8}
    # small knows {f1, f2, f5} of the 8, large f1 and f5 of them
    assert res["eta"]["org/small vs org/large"]["pooled"] == pytest.approx(2 / 3)


def test_same_facts_asked_differently_are_refused_even_with_intersect(tmp_path, capsys):
    a = _run(tmp_path / "a", "org/small")
    b = _run(tmp_path / "b", "org/large", config={"choices": 20})
    c = _run(tmp_path / "c", "org/other")
    assert main(["compare", str(a), str(b), str(c), "--intersect"]) == 2
    err = capsys.readouterr().err
    assert "runs org/small and org/large ask the facts differently: --choices 100 (org/small) vs 20 (org/large)" in err


def test_metadata_naming_models_not_in_the_runs_is_one_error(three, capsys):
    tmp, runs, _ = three
    meta = tmp / "extra.yaml"
    meta.write_text(META_YAML + "- {model: org/ghost, family: A, size: 7B}\n- {model: org/phantom, family: C}\n")
    assert main(["compare", *runs, "--model-meta", str(meta)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"error: --model-meta {meta} names model(s) that are in none of the runs: org/ghost, org/phantom")


@pytest.mark.parametrize(
    "text, message",
    [
        ("model,family,size\norg/small,A,lots\n", r"meta.csv:2: size of 'org/small': 'lots' is not a parameter count"),
        ("family,size\nA,1B\n", "the CSV header has no 'model' column"),
        ("model,family,size\norg/small,A,1B\norg/small,A,2B\n", r"meta.csv:3: model 'org/small' is given twice"),
        ("model,family,size,colour\norg/small,A,1B,red\n", r"unknown field\(s\) colour"),
    ],
)
def test_bad_metadata_records_are_named(tmp_path, text, message):
    from factprobe.report.model_meta import read_model_meta

    meta = tmp_path / "meta.csv"
    meta.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_model_meta(meta)


def test_base_against_fine_tuned_from_the_metadata(three, capsys):
    tmp, runs, _ = three
    chat = _run(tmp / "chat", "org/large-chat", known={"f1", "f5", "f6", "f7"})
    meta = tmp / "ft.yaml"
    meta.write_text(META_YAML + "- {model: org/large-chat, family: A, size: 1B, base: org/large}\n")
    assert main(["compare", *runs, str(chat), "--model-meta", str(meta), "--out", str(tmp / "ft")]) == 0
    res = json.loads((tmp / "ft" / "cross_model.json").read_text())
    ft = res["base_vs_finetuned"]["org/large-chat vs org/large"]
    # the fine-tuned model knows {f1, f5, f6, f7}; its base knows f1, f5, f6 of them: eta 3/4 (R3: it knows
    # nothing there, no eta)
    assert ft["eta"] == pytest.approx(3 / 4) and ft["eta_per_relation"] == pytest.approx({"R1": 1.0, "R2": 2 / 3, "R3": None})
    # accuracy 4/10 against 7/10
    assert ft["accuracy_delta"] == pytest.approx(-0.3)
    assert ft["accuracy_delta_per_relation"] == pytest.approx({"R1": 0.25 - 0.75, "R2": 0.75 - 0.5, "R3": 0 - 1.0})
    assert "org/large-chat vs org/large" not in res["eta"]  # same size: no size pair
    assert "fine-tuned vs base org/large-chat vs org/large: accuracy delta -0.300" in capsys.readouterr().out
    meta.write_text(META_YAML + "- {model: org/large-chat, family: A, base: org/nowhere}\n")
    with pytest.raises(ConfigError, match="the base 'org/nowhere' of 'org/large-chat' is in none of the runs"):
        from factprobe.report.model_meta import resolve_model_meta

        resolve_model_meta(["org/small", "org/large", "org/other", "org/large-chat"], meta)


def test_family_size_and_base_come_from_the_model_folders(tmp_path):
    """config.json's model_type, the safetensors headers' parameter count (4*3 + 3 = 15), an adapter's
    base_model_name_or_path, a full fine-tuning output's finetune_config.json."""
    import numpy as np
    from safetensors.numpy import save_file

    from factprobe.report.model_meta import base_pairs, config_meta, resolve_model_meta

    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]}))
    save_file({"w": np.zeros((4, 3), dtype=np.float32), "b": np.zeros(3, dtype=np.float32)}, str(base / "model.safetensors"))
    meta = config_meta(str(base))
    assert (meta.family, meta.size, meta.base) == ("gemma3", 15.0, None)
    adapter = tmp_path / "ft" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    full = tmp_path / "full" / "model"
    full.mkdir(parents=True)
    (full / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))
    (tmp_path / "full" / "finetune_config.json").write_text(json.dumps({"config": {"model": str(base)}}))
    metas = resolve_model_meta([str(base), str(adapter), str(full)])
    assert metas[str(adapter)].family == "gemma3" and metas[str(adapter)].size == 15.0
    assert base_pairs(metas) == {str(adapter): str(base), str(full): str(base)}
    assert config_meta("org/not-here").source == "unknown"


def test_two_runs_of_one_model_are_refused(three, capsys):
    tmp, runs, _ = three
    assert main(["compare", runs[0]]) == 2
    assert capsys.readouterr().err.startswith(f"error: compare needs at least two runs, got 1: {runs[0]}")
    again = _run(tmp / "again", "org/small")
    assert main(["compare", *runs, str(again)]) == 2
    assert "both probe model org/small; the cross-model maps take one run per model" in capsys.readouterr().err


def test_the_report_step_draws_the_maps_of_two_models(tmp_path):
    """Two models' ic-lke runs in a pipeline report: heatmap and Pearson figures, the heatmap, Pearson
    and eta tables in the Markdown report, the family/size of each from its config (none here: the
    models are names without folders, so no size pair and no eta table)."""
    from factprobe.metrics.multiple_choice import summarize
    from factprobe_ops.components.steps.report import cross_model_parts, load_runs, run_report
    from factprobe_ops.tracking.context import RunContext

    dirs = []
    for n in ("small", "large"):
        m = f"org/{n}"
        metrics = summarize(pd.DataFrame(_rows(m)), n_boot=20)
        dirs.append(str(_run(tmp_path / n, m, metrics={**metrics, "probe": "ic-lke"})))
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    run_report(dirs, str(html), str(md), RunContext())
    text = md.read_text()
    assert (
        "## cross_model_ic-lke\n\n| model | family | size | base | accuracy | R1 | R2 | R3 |\n|---|---|---|---|---|---|---|---|\n"
        "| org/large | — | — | — | 0.700 | 0.750 | 0.500 | 1.000 |\n"  # no family: by accuracy, best first
        "| org/small | — | — | — | 0.400 | 0.500 | 0.250 | 0.500 |"
    ) in text
    assert f"| org/large | 1.000 | {R_SL:.3f} |" in text  # cross_model_pearson_ic-lke (Figure 5 order)
    assert "| within a family | — | 0 |" in text and "cross_model_eta_ic-lke" not in text
    page = html.read_text()
    assert "<h2>ic-lke: accuracy, model x relation (Figure 5 order)</h2><img" in page
    assert "<h2>ic-lke: Pearson r of per-relation accuracy between models</h2><img" in page

    parts = cross_model_parts(load_runs(dirs))
    assert len(parts) == 1
    assert [stem for stem, _ in parts[0].figures.values()] == ["cross_model_heatmap_ic-lke", "cross_model_pearson_ic-lke"]
    rows = {r["model"]: r for r in parts[0].tables["cross_model_pearson_ic-lke"]}
    assert rows["org/small"]["org/large"] == pytest.approx(R_SL)
    assert parts[0].metrics == {}  # no family known: no within/across mean, no eta
    # one model only, or a model run twice: no maps, and the second says why
    assert cross_model_parts(load_runs(dirs[:1])) == []
    again = str(_run(tmp_path / "again", "org/small", metrics={"probe": "ic-lke"}))
    notes = cross_model_parts(load_runs([*dirs, again]))
    assert len(notes) == 1 and "org/small has 2 runs" in notes[0].tables["cross_model_notes"][0]["note"]
    assert cross_model_parts(load_runs([dirs[0], again])) == []  # one model in two settings: nothing to say


def test_the_report_step_eta_and_family_means_with_model_folders(tmp_path):
    """Models given as folders with config.json and weights: family and size from them, so the report
    has eta of the smaller in the larger model and the within-family Pearson mean as parent metrics."""
    import numpy as np
    from safetensors.numpy import save_file

    from factprobe.metrics.multiple_choice import summarize
    from factprobe_ops.components.steps.report import cross_model_parts, load_runs

    dirs = []
    for n, width in (("small", 2), ("large", 8)):
        folder = tmp_path / "models" / n
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
        save_file({"w": np.zeros((width, 4), dtype=np.float32)}, str(folder / "model.safetensors"))
        metrics = summarize(pd.DataFrame(_rows(f"org/{n}")), n_boot=20)
        dirs.append(str(_run(tmp_path / f"run-{n}", str(folder), known=KNOWN[f"org/{n}"], metrics=metrics)))
    (part,) = cross_model_parts(load_runs(dirs))
    eta = {r["pair"]: r for r in part.tables["cross_model_eta_ic-lke"]}
    assert eta["small vs large"]["eta_pooled"] == pytest.approx(3 / 4)
    assert eta["small vs large"]["eta_relation_mean"] == pytest.approx(5 / 6)
    assert part.metrics["eta/ic-lke/small vs large"] == pytest.approx(3 / 4)
    assert part.metrics["pearson_within/ic-lke"] == pytest.approx(R_SL)
    heat = {r["model"]: r for r in part.tables["cross_model_ic-lke"]}
    assert heat["small"]["family"] == "llama" and heat["small"]["size"] == 8 and heat["large"]["size"] == 32


@pytest.mark.slow
def test_the_report_step_logs_the_maps_to_the_parent_run(tmp_path):
    """The cross-model figures, tables and metrics reach the pipeline's parent MLflow run (names with
    spaces and slashes are valid MLflow metric names)."""
    import numpy as np
    from mlflow.tracking import MlflowClient
    from safetensors.numpy import save_file

    from factprobe.metrics.multiple_choice import summarize
    from factprobe_ops.components.steps.report import run_report
    from factprobe_ops.tracking.context import RunContext

    dirs = []
    for n, width in (("small", 2), ("large", 8)):
        folder = tmp_path / "models" / n
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
        save_file({"w": np.zeros((width, 4), dtype=np.float32)}, str(folder / "model.safetensors"))
        metrics = summarize(pd.DataFrame(_rows(f"org/{n}")), n_boot=20)
        dirs.append(str(_run(tmp_path / f"run-{n}", str(folder), known=KNOWN[f"org/{n}"], metrics=metrics)))
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    c = MlflowClient(uri)
    parent = c.create_run(c.create_experiment("factprobe/probe")).info.run_id
    run_report(dirs, str(tmp_path / "r.html"), str(tmp_path / "r.md"), RunContext(tracking_uri=uri, parent_run_id=parent))
    arts = {a.path for d in ("tables", "figures") for a in c.list_artifacts(parent, d)}
    assert {
        "figures/cross_model_heatmap_ic-lke.png",
        "figures/cross_model_pearson_ic-lke.png",
        "tables/cross_model_ic-lke.json",
        "tables/cross_model_pearson_ic-lke.json",
        "tables/cross_model_eta_ic-lke.json",
    } <= arts
    m = c.get_run(parent).data.metrics
    assert m["eta/ic-lke/small vs large"] == pytest.approx(3 / 4)
    assert m["pearson_within/ic-lke"] == pytest.approx(R_SL)
