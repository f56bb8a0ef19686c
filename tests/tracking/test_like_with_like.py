"""Compare and gate like with like (issue 28 item 3, and the compare / regress cases of item 7).

`compare`, `regress`, `baseline promote`, the nightly comparison and the cross-model maps read each
run's measurement identity (`identity` in metrics.json / run_config.json, or the MLflow tags) and
refuse, or say in one line, what differs: data (digest and input locations), numerics (dtype,
device type, transformers major version), a missing identity. Result folders are written here by
hand as `factprobe probe` leaves them; the replayed candidate probe is a stand-in (`fake_run_probe`)
that scores every prepared item right, so what is tested is what `regress` asks it to run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from factprobe.cli import main

CONFIG = {
    "probe": "ic-lke",
    "model": "m",
    "base_model": None,
    "source": "lama",
    "data": None,
    "train_data": None,
    "relations": None,
    "max_facts_per_relation": None,
    "seed": 0,
    "device": "auto",
    "dtype": "auto",
    "choices": 100,
    "skip_small_relations": False,
    "examples": 50,
}


def identity(digest="sha256:" + "d1" * 32, dtype="float32", device="cpu", transformers="5.0.0", inputs=(), model="m"):
    """A measurement identity as factprobe.identity records it."""
    return {
        "model_revision": f"local-sha256:{model}",
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


def rows(n=20, right=lambda i: i % 2 == 0, relations=("P36", "P19")):
    return [
        {
            "key": f"k{i}",
            "fact_id": f"{relations[i % len(relations)]}|Q{i}|Q{100 + i}",
            "relation": relations[i % len(relations)],
            "correct": bool(right(i)),
        }
        for i in range(n)
    ]


def folder(path: Path, rs: list[dict], ident: dict | None = None, config: dict | None = None) -> str:
    """A finished probe folder: results.jsonl, run_config.json and metrics.json (with `ident` when given)."""
    path.mkdir(parents=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rs))
    extra = {"identity": ident} if ident is not None else {}
    (path / "run_config.json").write_text(json.dumps({"results_key": "k", "config": config or CONFIG, **extra}))
    digest = {"data_digest": ident["data_digest"]} if ident is not None else {}
    (path / "metrics.json").write_text(json.dumps({"probe": (config or CONFIG)["probe"], **digest, **extra}))
    return str(path)


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------ compare: reading, JSON, headers, keys
def test_truncated_results_jsonl_is_one_line_naming_file_and_line(tmp_path, capsys):
    a = folder(tmp_path / "a", rows(), identity())
    b = folder(tmp_path / "b", rows(), identity())
    f = Path(b) / "results.jsonl"
    f.write_text(f.read_text()[:-25])  # cut inside the last record
    rc, _, err = cli(capsys, "compare", a, b, "--n-boot", "20")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {f} line 20: not a whole JSON record") and "truncated" in err


def test_truncated_per_fact_parquet_is_one_line(tmp_path, capsys):
    a = folder(tmp_path / "a", rows(), identity())
    table = tmp_path / "per_fact.parquet"
    pd.DataFrame(rows()).to_parquet(table)
    table.write_bytes(table.read_bytes()[:-40])
    rc, _, err = cli(capsys, "compare", a, table, "--n-boot", "20")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {table}: not a readable parquet table") and "truncated" in err


def test_empty_results_jsonl_says_it_is_empty(tmp_path, capsys):
    a = folder(tmp_path / "a", rows(), identity())
    b = tmp_path / "b"
    b.mkdir()
    (b / "results.jsonl").write_text("")
    rc, _, err = cli(capsys, "compare", a, b, "--n-boot", "20")
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {b / 'results.jsonl'}: empty, no result rows"), err


def test_json_writes_null_for_an_undefined_pearson(tmp_path, capsys):
    """One relation: Pearson r of per-relation accuracy is undefined; strict JSON has no NaN."""
    one = rows(relations=("P36",))
    a, b = folder(tmp_path / "a", one, identity()), folder(tmp_path / "b", one, identity())
    rc, out, _ = cli(capsys, "compare", a, b, "--json", "--n-boot", "20")
    assert rc == 0 and "NaN" not in out
    res = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert res["pearson_per_relation"] is None and res["pearson_per_relation_reason"].startswith("undefined")


def test_headers_stay_apart_and_keys_name_the_metric(tmp_path, capsys):
    """`accuracy` (8 characters) used to give 'naccuracy Aaccuracy B' and the keys were acc_a/acc_b."""
    a, b = folder(tmp_path / "a", rows(), identity()), folder(tmp_path / "b", rows(right=lambda i: i < 15), identity())
    rc, out, _ = cli(capsys, "compare", a, b, "--n-boot", "20")
    assert rc == 0
    header = next(line for line in out.splitlines() if line.startswith("relation"))
    assert header.split() == ["relation", "n", "accuracy", "A", "accuracy", "B", "B", "-", "A"]
    assert "  accuracy A  accuracy B" in header
    row = next(line for line in out.splitlines() if line.startswith("P19"))
    assert row.split()[2:4] == ["0.000", "0.700"]  # under their headers
    rc, out, _ = cli(capsys, "compare", a, b, "--json", "--n-boot", "20")
    res = json.loads(out)
    assert res["accuracy_a"] == pytest.approx(0.5) and res["accuracy_b"] == pytest.approx(0.75)
    assert "acc_a" not in res and set(res["per_relation"]["P36"]) >= {"accuracy_a", "accuracy_b"}


def test_mc_items_against_ic_lke_advises_what_is_possible(tmp_path, capsys):
    """They prepare different items: 'run b again with --source countryinfo --data items.jsonl' (an
    ic-lke run on an items file) was impossible advice."""
    mc_cfg = {
        "probe": "mc-items",
        "model": "m",
        "source": "countryinfo",
        "data": "/x/items.jsonl",
        "train_data": None,
        "relations": None,
        "max_facts_per_relation": None,
        "seed": 0,
        "examples": 0,
    }
    mc = folder(tmp_path / "mc", rows(), identity(), mc_cfg)
    ic = folder(tmp_path / "ic", rows(), identity("sha256:" + "e" * 64))
    for x, y in ((mc, ic), (ic, mc)):
        rc, _, err = cli(capsys, "compare", x, y, "--n-boot", "20")
        assert rc == 2 and err.count("\n") == 1, err
        assert "again with" not in err and "prepare different items" in err
        assert "mc-items runs only with runs of mc-items" in err
        assert "ic-lke runs only with runs of ic-lke, eic-lke, hgp, mmp" in err


# ------------------------------------------------------------------ compare: like with like
def test_compare_refuses_other_data_naming_the_inputs(tmp_path, capsys):
    a = folder(tmp_path / "a", rows(), identity("sha256:" + "1" * 64, inputs=[("data", "/data/v1/trex")]))
    b = folder(tmp_path / "b", rows(), identity("sha256:" + "2" * 64, inputs=[("data", "/data/v2/trex")]))
    rc, _, err = cli(capsys, "compare", a, b, "--n-boot", "20")
    assert rc == 2 and err.count("\n") == 1
    assert "error: the runs were made on different data: data digest sha256:111111111111 (a) vs sha256:222222222222 (b)" in err
    assert "inputs that differ: data /data/v1/trex (a) vs /data/v2/trex (b)" in err and "--intersect" in err
    # the same place, other content: said so
    c = folder(tmp_path / "c", rows(), identity("sha256:" + "3" * 64, inputs=[("data", "/data/v1/trex")]))
    rc, _, err = cli(capsys, "compare", a, c, "--n-boot", "20")
    assert rc == 2 and "the inputs are at the same locations (data /data/v1/trex), so their content changed" in err


def test_only_intersect_pairs_a_subset_of_facts(tmp_path, capsys):
    a = folder(tmp_path / "a", rows(20))
    b = folder(tmp_path / "b", rows(12))
    rc, _, err = cli(capsys, "compare", a, b, "--n-boot", "20")
    assert rc == 2 and "the runs test different facts: 8 fact(s) only in run a" in err and "--intersect" in err
    rc, out, err = cli(capsys, "compare", a, b, "--intersect", "--n-boot", "20")
    assert rc == 0 and "facts joined: 12 (only in A: 8, only in B: 0)" in out  # two runs: still fact by fact
    assert "note: --intersect: compared on the 12 facts both runs test" in err


def test_intersect_leaves_out_facts_whose_items_differ(tmp_path, capsys):
    base = rows(10)
    changed = [dict(r, item_digest="x" if i < 7 else "y") for i, r in enumerate(base)]
    a = folder(tmp_path / "a", [dict(r, item_digest="x") for r in base], identity("sha256:" + "1" * 64))
    b = folder(tmp_path / "b", changed, identity("sha256:" + "2" * 64))
    rc, out, err = cli(capsys, "compare", a, b, "--intersect", "--n-boot", "20")
    assert rc == 0 and "3 shared fact(s) left out: their items (prompt, options or answer) differ" in err
    assert "facts joined: 7" in out


def test_compare_says_in_one_line_that_numerics_differ(tmp_path, capsys):
    a = folder(tmp_path / "a", rows(), identity(dtype="bfloat16", device="cuda"))
    b = folder(tmp_path / "b", rows(), identity(transformers="4.57.0"))
    rc, out, err = cli(capsys, "compare", a, b, "--n-boot", "20")
    assert rc == 0 and "facts joined: 20" in out
    lines = [line for line in err.splitlines() if "numerics" in line]
    assert lines == [
        (
            "note: runs a and b ran with different numerics (dtype bfloat16 (a) vs float32 (b); device cuda (a) "
            "vs cpu (b); transformers 5.x (a) vs 4.x (b)): part of any difference may come from the numerics, "
            "not the models"
        )
    ]


def test_compare_warns_once_about_runs_without_identity_and_goes_on(tmp_path, capsys):
    a = folder(tmp_path / "a", rows())
    b = folder(tmp_path / "b", rows(), identity())
    rc, out, err = cli(capsys, "compare", a, b, "--n-boot", "20")
    assert rc == 0 and "facts joined: 20" in out
    assert err.splitlines() == [
        (
            f"warning: run a ({a}) records no measurement identity (it was made before factprobe "
            "recorded model, data and numerics): data and numerics are not checked"
        )
    ]


def test_cross_model_maps_name_the_inputs_that_differ_and_the_numerics(tmp_path, capsys):
    cfg = {**CONFIG}
    a = folder(tmp_path / "a", rows(), identity(inputs=[("data", "/d/one")], model="a"), {**cfg, "model": "org/a"})
    b = folder(
        tmp_path / "b", rows(), identity(inputs=[("data", "/d/one")], model="b", dtype="bfloat16"), {**cfg, "model": "org/b"}
    )
    c = folder(
        tmp_path / "c", rows(), identity("sha256:" + "9" * 64, inputs=[("data", "/d/two")], model="c"), {**cfg, "model": "org/c"}
    )
    rc, _, err = cli(capsys, "compare", a, b, c)
    assert rc == 2
    assert "note: runs 1 and 2 ran with different numerics (dtype float32 (1) vs bfloat16 (2))" in err
    assert "inputs that differ: data /d/one (1) vs /d/two (3)" in err.splitlines()[-1]


# ------------------------------------------------------------------ regress on given runs
def _gate(capsys, tmp_path, base, cand, *extra):
    return cli(capsys, "regress", "--candidate", cand, "--baseline", base, "--no-track", *extra)


def test_regress_never_gates_on_a_subset(tmp_path, capsys):
    """A candidate folder on 12 of the baseline's 20 items used to pass."""
    base = folder(tmp_path / "base", rows(20), identity())
    cand = folder(tmp_path / "cand", rows(12), identity())
    rc, out, err = _gate(capsys, tmp_path, base, cand)
    assert rc == 2 and "PASS" not in out
    assert (
        "error: the candidate lacks 8 of the baseline's 20 facts (e.g. P19|Q13|Q113); regress gates on every baseline fact" in err
    )


def test_regress_refuses_a_candidate_on_other_data(tmp_path, capsys):
    base = folder(tmp_path / "base", rows(), identity(inputs=[("data", "/d/items.jsonl")]))
    cand = folder(tmp_path / "cand", rows(), identity("sha256:" + "7" * 64, inputs=[("data", "/e/items.jsonl")]))
    rc, out, err = _gate(capsys, tmp_path, base, cand)
    assert rc == 2 and "PASS" not in out
    assert "the candidate was probed on other data than the baseline: data digest" in err
    assert "data /d/items.jsonl (baseline) vs /e/items.jsonl (candidate)" in err


def test_regress_names_the_setting_that_made_other_data(tmp_path, capsys):
    """issue 41 item 8: a candidate whose only difference was `--seed` was refused with "the inputs are at the
    same locations ..., so their content changed in between". The line names the setting and both values."""
    inputs = [("data", "/d/items.jsonl")]
    base = folder(tmp_path / "base", rows(), identity(inputs=inputs))
    other = identity("sha256:" + "7" * 64, inputs=inputs)
    cand = folder(tmp_path / "cand", rows(), other, config={**CONFIG, "seed": 1, "model": "m2"})
    rc, out, err = _gate(capsys, tmp_path, base, cand)
    assert rc == 2 and "PASS" not in out and err.count("\n") == 1
    assert "settings that differ: --seed 0 (baseline) vs 1 (candidate)" in err, err
    assert "content changed in between" not in err and "--model" not in err
    cand2 = folder(tmp_path / "cand2", rows(), other, config={**CONFIG, "seed": 1, "choices": 10, "relations": ["P36"]})
    rc, _, err = _gate(capsys, tmp_path, base, cand2)
    assert rc == 2 and "--seed 0 (baseline) vs 1 (candidate); --choices 100 (baseline) vs 10 (candidate)" in err
    assert "--relations not set (baseline) vs P36 (candidate)" in err


def test_regress_refuses_other_numerics_unless_allowed(tmp_path, capsys):
    base = folder(tmp_path / "base", rows(), identity(dtype="bfloat16", device="cuda"))
    cand = folder(tmp_path / "cand", rows(), identity())
    rc, out, err = _gate(capsys, tmp_path, base, cand)
    assert rc == 2 and "PASS" not in out
    assert (
        "the candidate's numerics differ from the baseline's: dtype bfloat16 (baseline) vs float32 (candidate); "
        "device cuda (baseline) vs cpu (candidate)"
    ) in err and "--allow-numerics-change" in err
    rc, out, err = _gate(capsys, tmp_path, base, cand, "--allow-numerics-change")
    assert rc == 0 and "PASS" in out
    assert "note: numerics differ (allowed by --allow-numerics-change): dtype bfloat16 (baseline) vs float32" in out


def test_regress_refuses_a_baseline_without_identity(tmp_path, capsys):
    base = folder(tmp_path / "base", rows())
    cand = folder(tmp_path / "cand", rows(), identity())
    rc, _, err = _gate(capsys, tmp_path, base, cand)
    assert rc == 2 and err.count("\n") == 1
    assert f"baseline {base} records no measurement identity" in err and "must be re-probed" in err


def test_regress_out_writes_the_report_and_the_decision(tmp_path, capsys):
    base = folder(tmp_path / "base", rows(), identity())
    cand = folder(tmp_path / "cand", rows(right=lambda i: True), identity())
    out_dir = tmp_path / "gate"
    rc, out, _ = _gate(capsys, tmp_path, base, cand, "--out", out_dir)
    assert rc == 0
    report = (out_dir / "gate_report.txt").read_text()
    assert report.strip() == out.strip() and "regression gate: PASS" in report
    decision = json.loads((out_dir / "gate.json").read_text())
    assert decision["decision"] == "PASS" and decision["passed"] is True and decision["n"] == 20
    assert decision["candidate_value"] == 1.0 and decision["baseline_value"] == 0.5 and decision["candidate"] == cand
    assert decision["metric"] == "accuracy" and decision["direction"] == "higher is better"


# ------------------------------------------------------------------ regress replays the baseline's data
ITEMS = [
    {
        "id": f"q{i}",
        "relation": "capital",
        "prompt": f"The capital of land {i} is [Y]",
        "options": [f"City{i}", f"Town{i}", f"Village{i}"],
        "answer": f"City{i}",
    }
    for i in range(6)
]
MC_CONFIG = {
    "probe": "mc-items",
    "model": "m",
    "base_model": None,
    "source": "countryinfo",
    "data": "items.jsonl",
    "train_data": None,
    "relations": None,
    "max_facts_per_relation": None,
    "seed": 0,
    "device": "auto",
    "dtype": "auto",
    "token_budget": None,
    "out": None,
    "slot": "[Y]",
    "fields": "",
    "option_score": "sum",
    "examples": 0,
    "example_separator": "\n",
    "on_too_long": "truncate",
}


def _write_items(path: Path, items: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def _prepared(data: Path):
    from factprobe.framework.config import RunConfig
    from factprobe.framework.registry import get_probe

    return get_probe("mc-items").prepare(RunConfig.from_dict({**MC_CONFIG, "data": str(data)}))


@pytest.fixture
def fake_run_probe(monkeypatch):
    """Stands in for the probe run: records (cfg, prepared) and scores every prepared item right."""
    from factprobe.framework import runner

    seen = []

    def fake(cfg, out, on_start=None, prepared=None, **_):
        seen.append((cfg, prepared))
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        items = [it for its in prepared.items.values() for it in its]
        (out / "results.jsonl").write_text(
            "".join(
                json.dumps({"key": it.fact_id, "fact_id": it.fact_id, "relation": it.relation, "correct": True}) + "\n"
                for it in items
            )
        )
        (out / "run_config.json").write_text(json.dumps({"results_key": "k", "config": cfg.to_dict()}))

    monkeypatch.setattr(runner, "run_probe", fake)
    return seen


@pytest.fixture
def mc_baseline(tmp_path, monkeypatch):
    """An mc-items baseline made in folder `made/` with the relative --data items.jsonl: its identity
    records the absolute location and the digest; `elsewhere/items.jsonl` is another file."""
    from factprobe.identity import data_digest

    items = _write_items(tmp_path / "made" / "items.jsonl", ITEMS)
    _write_items(tmp_path / "elsewhere" / "items.jsonl", [dict(i, id=f"x{n}") for n, i in enumerate(ITEMS)])
    ident = identity(data_digest(_prepared(items)), inputs=[("data", str(items))])
    prepared = _prepared(items)
    base_rows = [
        {"key": it.fact_id, "fact_id": it.fact_id, "relation": it.relation, "correct": n % 2 == 0}
        for n, it in enumerate(it for its in prepared.items.values() for it in its)
    ]
    base = folder(tmp_path / "base", base_rows, ident, MC_CONFIG)
    (tmp_path / "model").mkdir()  # the candidate's model folder (the stand-in probe never loads it)
    monkeypatch.chdir(tmp_path / "elsewhere")
    return base, items


def test_regress_replays_the_baseline_inputs_by_location_and_pins_numerics(tmp_path, capsys, fake_run_probe, mc_baseline):
    """Run from another working folder, the baseline's relative --data used to name another file."""
    base, items = mc_baseline
    rc, _, err = cli(
        capsys,
        "regress",
        "--candidate",
        tmp_path / "model",
        "--baseline",
        base,
        "--no-track",
        "--out",
        tmp_path / "gate",
        "--max-drop",
        "0.99",
    )
    assert rc == 0, err
    ((cfg, _),) = fake_run_probe
    assert cfg.base.data == str(items) and cfg.base.dtype == "float32" and cfg.base.device == "cpu"
    saved = json.loads((tmp_path / "gate" / "candidate" / "run_config.json").read_text())["config"]
    assert saved["data"] == str(items) and saved["dtype"] == "float32" and saved["device"] == "cpu"
    assert "facts" not in err


def test_regress_refuses_before_scoring_when_the_baseline_data_changed(tmp_path, capsys, fake_run_probe, mc_baseline):
    """After the options changed, the identical model used to show a 'significant' change and pass."""
    base, items = mc_baseline
    _write_items(items, [dict(i, options=[*i["options"][:2], "Hamlet"]) for i in ITEMS])
    rc, out, err = cli(
        capsys, "regress", "--candidate", tmp_path / "model", "--baseline", base, "--no-track", "--out", tmp_path / "gate"
    )
    assert rc == 2 and fake_run_probe == [] and "PASS" not in out
    assert err.startswith("error: the baseline's data changed since it was probed: data digest sha256:")
    assert f"(re-read now from data {items})" in err


def test_regress_refuses_a_baseline_device_this_machine_lacks(tmp_path, capsys, fake_run_probe, mc_baseline):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    base, _ = mc_baseline
    path = Path(base) / "metrics.json"
    m = json.loads(path.read_text())
    m["identity"]["numerics"].update(device="cuda", device_name="NVIDIA H100 80GB HBM3", dtype="bfloat16")
    path.write_text(json.dumps(m))
    rc, _, err = cli(capsys, "regress", "--candidate", tmp_path / "model", "--baseline", base, "--no-track")
    assert rc == 2 and fake_run_probe == []
    assert "the baseline ran on cuda (NVIDIA H100 80GB HBM3) and this machine has no cuda device" in err
    rc, _, err = cli(
        capsys,
        "regress",
        "--candidate",
        tmp_path / "model",
        "--baseline",
        base,
        "--no-track",
        "--allow-numerics-change",
        "--max-drop",
        "0.99",
    )
    assert rc == 0, err
    ((cfg, _),) = fake_run_probe
    assert cfg.base.dtype == "bfloat16" and cfg.base.device == "auto"  # the dtype stays pinned
    assert "note: numerics differ (allowed by --allow-numerics-change): device cuda (baseline) vs cpu" in err


# ------------------------------------------------------------------ MLflow: baseline filter, promote
@pytest.fixture
def store(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    exp = client.create_experiment("factprobe/probe", artifact_location=(tmp_path / "artifacts").as_uri())

    def run(probe="ic-lke", tags=None, ident=None, table_bytes=None):
        r = client.create_run(exp, tags={"factprobe.probe": probe, **(tags or {})})
        rid = r.info.run_id
        client.log_metric(rid, "accuracy", 0.5)
        f = tmp_path / f"t-{rid}" / "per_fact.parquet"
        f.parent.mkdir()
        pd.DataFrame(rows()).to_parquet(f)
        if table_bytes is not None:
            f.write_bytes(table_bytes(f.read_bytes()))
        client.log_artifact(rid, str(f), "tables")
        if ident is not None:
            client.set_tag(rid, "factprobe.data_digest", ident["data_digest"])
            client.set_tag(rid, "factprobe.numerics", json.dumps(ident["numerics"]))
            client.set_tag(rid, "factprobe.model_revision", ident["model_revision"])
            for i in ident["inputs"]:
                client.log_param(rid, f"identity.input.{i['name']}", i["location"])
        client.set_terminated(rid)
        return rid

    return client, run, uri


def test_a_baseline_filter_matching_two_runs_is_refused_naming_them(store, tmp_path, capsys):
    _, run, uri = store
    ic = run("ic-lke", {"factprobe.baseline": "true"}, identity())
    hgp = run("hgp", {"factprobe.baseline": "true"}, identity())
    cand = folder(tmp_path / "cand", rows(), identity())
    rc, out, err = cli(
        capsys, "regress", "--candidate", cand, "--baseline", "factprobe.baseline=true", "--no-track", "--tracking-uri", uri
    )
    assert rc == 2 and "PASS" not in out
    assert "factprobe.baseline=true matches 2 finished probe runs" in err
    assert f"{ic} (ic-lke)" in err and f"{hgp} (hgp)" in err and "give the run id" in err
    # by id: gated (the identity read from the run's tags and params)
    rc, out, err = cli(capsys, "regress", "--candidate", cand, "--baseline", ic, "--no-track", "--tracking-uri", uri)
    assert rc == 0 and "PASS" in out, err


def test_compare_of_a_run_with_a_truncated_per_fact_artifact_is_one_line(store, tmp_path, capsys):
    _, run, uri = store
    rid = run(ident=identity(), table_bytes=lambda b: b[: len(b) // 2])
    a = folder(tmp_path / "a", rows(), identity())
    rc, _, err = cli(capsys, "compare", a, rid, "--tracking-uri", uri, "--n-boot", "20")
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"error: run {rid}: tables/per_fact.parquet: not a readable parquet table")


def test_promote_refuses_a_run_without_identity(store, capsys):
    from factprobe_ops.tracking.baseline import BASELINE_TAG

    client, run, uri = store
    old, new = run(), run(ident=identity())
    rc, _, err = cli(capsys, "baseline", "promote", old, "--tracking-uri", uri)
    assert rc == 2 and f"run {old} records no measurement identity" in err
    assert client.get_run(old).data.tags.get(BASELINE_TAG) is None
    rc, _, _ = cli(capsys, "baseline", "promote", new, "--tracking-uri", uri)
    assert rc == 0 and client.get_run(new).data.tags.get(BASELINE_TAG) == "true"
    # a new baseline on other data or numerics says what candidates will now be gated on
    newer = run(ident=identity("sha256:" + "4" * 64, dtype="bfloat16"))
    rc, out, err = cli(capsys, "baseline", "promote", newer, "--tracking-uri", uri)
    assert rc == 0 and f"run {newer} is now the baseline" in out
    assert err.splitlines() == [
        f"note: the baseline changes what candidates are gated on: data digest sha256:d1d1d1d1d1d1 "
        f"(previous baseline {new}) vs sha256:444444444444 (new) (no input file recorded: the "
        f"source's own data or the options differ); dtype float32 (previous baseline {new}) vs "
        "bfloat16 (new)"
    ]


def test_compare_refuses_other_relations_unless_intersect(tmp_path, capsys):
    """--relations P36 against --relations P36,P19: a subset, paired only with --intersect."""
    a = folder(tmp_path / "a", rows(relations=("P36",)), config={**CONFIG, "relations": ["P36"]})
    b = folder(tmp_path / "b", rows(), config={**CONFIG, "relations": ["P36", "P19"]})
    rc, _, err = cli(capsys, "compare", a, b, "--n-boot", "20")
    assert (
        rc == 2
        and "error: the runs asked for different relations (--relations P36 (a) vs P36,P19 (b)); pass "
        "--intersect to compare the relations both ran"
        in err
    )
    rc, out, err = cli(capsys, "compare", a, b, "--intersect", "--n-boot", "20")
    assert rc == 0 and "only the relations both ran are compared" in err and "P19" not in out.split("relation ")[-1]


# ------------------------------------------------------------------ the regression pipeline's gate step
def test_the_pipeline_gate_step_checks_like_with_like(tmp_path):
    from factprobe.errors import ConfigError, DataError
    from factprobe_ops.components.steps.regression_gate import run_gate
    from factprobe_ops.tracking.context import RunContext

    ctx, md = RunContext(tracking_uri="none"), str(tmp_path / "gate.md")
    base = folder(tmp_path / "base", rows(20), identity())
    with pytest.raises(DataError, match="the candidate lacks 8 of the baseline's 20 facts"):
        run_gate(folder(tmp_path / "few", rows(12), identity()), base, 0.02, 0.05, md, ctx)
    with pytest.raises(DataError, match="the candidate was probed on other data than the baseline"):
        run_gate(folder(tmp_path / "other", rows(), identity("sha256:" + "5" * 64)), base, 0.02, 0.05, md, ctx)
    bf16 = folder(tmp_path / "bf16", rows(), identity(dtype="bfloat16"))
    with pytest.raises(ConfigError, match="numerics differ from the baseline's: dtype float32 \\(baseline\\) vs bfloat16"):
        run_gate(bf16, base, 0.02, 0.05, md, ctx)
    assert run_gate(bf16, base, 0.02, 0.05, md, ctx, allow_numerics_change=True)["decision"] == "PASS"
    assert "numerics differ (allowed by --allow-numerics-change)" in Path(md).read_text()
    with pytest.raises(ConfigError, match="baseline .* records no measurement identity"):
        run_gate(base, folder(tmp_path / "old", rows()), 0.02, 0.05, md, ctx)
