"""Issue 30 items 3 and 4 at the step level: models-file entries with per-model settings, the sweep's
units of work (one load per model, fact shards) and the merge step (components/steps/plan.py,
probe.py, merge.py), run locally on a tiny random model with tracking off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factprobe.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
FX = REPO / "tests" / "fixtures" / "mc_snapshot"


# --- models-file entries ----------------------------------------------------------------------------


def test_models_yaml_keeps_each_models_settings():
    from factprobe_ops.components.steps.plan import run_read_models

    doc = (
        "models:\n  - smollm2-135m-instruct\n  - name: big\n    gpus: 4\n    memory: 320Gi\n    cpu: 16\n"
        "    dtype: bfloat16\n    device_map: auto\n  - name: served\n    endpoint: http://vllm:8000/v1\n    gpus: 0\n"
    )
    assert run_read_models(doc) == [
        "smollm2-135m-instruct",
        {"name": "big", "gpus": 4, "memory": "320Gi", "cpu": "16", "dtype": "bfloat16", "device_map": "auto"},
        {"name": "served", "gpus": 0, "endpoint": "http://vllm:8000/v1"},
    ]


@pytest.mark.parametrize(
    "entry, words",
    [
        ("{name: m, gpu: 2}", ["'m'", "unknown key 'gpu'", "gpus"]),
        ("{name: m, gpus: -1}", ["'m'", "gpus=-1", "negative"]),
        ("{name: m, gpus: two}", ["'m'", "gpus='two'"]),
        ("{name: m, endpoint: 'http://h:8000/v1', device_map: auto}", ["'m'", "endpoint and device_map"]),
        ("{name: m, memory: 32 GB}", ["'m'", "memory='32 GB'"]),
        ("{name: m, cpu: four}", ["'m'", "cpu='four'"]),
        ("{name: m, endpoint: vllm:8000}", ["'m'", "endpoint='vllm:8000'"]),
    ],
)
def test_a_bad_model_entry_is_one_line_naming_file_model_and_key(tmp_path, entry, words):
    from factprobe_ops.components.steps.plan import run_read_models

    path = tmp_path / "models.yaml"
    path.write_text(f"models:\n  - ok-model\n  - {entry}\n")
    with pytest.raises(ConfigError) as err:
        run_read_models(str(path))
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg, msg
    for w in words:
        assert w in msg, msg


def test_units_carry_resources_overrides_and_the_served_model():
    from factprobe_ops.components.steps.plan import run_plan_units

    models = [
        "a",
        {"name": "big", "gpus": 2, "memory": "80Gi", "dtype": "bfloat16", "device_map": "auto"},
        {"name": "srv", "endpoint": "http://vllm:8000/v1", "gpus": 0},
    ]
    units = run_plan_units(
        models, ["ic-lke", "qa"], "CTX", {"relations": "P36"}, defaults={"gpus": 1, "cpu": "4", "memory": "32G"}
    )
    assert [(u["model"], u["probes"]) for u in units] == [
        ("a", ["ic-lke"]),
        ("a", ["qa"]),
        ("big", ["ic-lke"]),
        ("big", ["qa"]),
        ("openai:srv@http://vllm:8000/v1", ["ic-lke"]),
        ("openai:srv@http://vllm:8000/v1", ["qa"]),
    ]
    big = units[2]
    assert (big["gpus"], big["cpu"], big["memory"]) == ("2", "4", "80Gi")
    assert big["overrides"] == {"dtype": "bfloat16", "device_map": "auto"} and big["context"] == "CTX"
    assert (units[0]["gpus"], units[0]["memory"], units[4]["gpus"]) == ("1", "32G", "0")
    # the models list reaches the step through JSON: a whole number of GPUs may come as 2.0
    assert run_plan_units([{"name": "big", "gpus": 2.0}], ["ic-lke"])[0]["gpus"] == "2"
    assert run_plan_units(["a"], ["ic-lke"], defaults={"gpus": 1.0, "cpu": "4", "memory": "32G"})[0]["gpus"] == "1"
    with pytest.raises(ConfigError, match="gpus=2.5 is not a whole number"):
        run_plan_units([{"name": "big", "gpus": 2.5}], ["ic-lke"])


def test_one_load_makes_one_unit_per_model_and_shards_repeat_it():
    from factprobe_ops.components.steps.plan import run_plan_units

    units = run_plan_units(["a", "b"], ["ic-lke", "qa"], shards=3, one_load=True)
    assert [(u["model"], u["probes"], u["shard"], u["shards"]) for u in units] == [
        (m, ["ic-lke", "qa"], s, 3) for m in ("a", "b") for s in range(3)
    ]


@pytest.mark.parametrize("shards", [0, -2, "x", 1.5])
def test_shards_must_be_a_whole_number_from_one(shards):
    from factprobe_ops.components.steps.plan import run_plan_units

    with pytest.raises(ConfigError, match="shards="):
        run_plan_units(["a"], ["ic-lke"], shards=shards)


def test_a_models_dtype_is_checked_before_anything_runs():
    from factprobe_ops.components.steps.plan import run_plan_units

    with pytest.raises(ConfigError, match="dtype"):
        run_plan_units([{"name": "a", "dtype": "float8"}], ["ic-lke"], "", {"relations": "P36"})


# --- fact shards and the merge -------------------------------------------------------------------------

CONFIG = {
    "source": "triples",
    "data": str(FX / "test.jsonl"),
    "train_data": str(FX / "train"),
    "examples": 3,
    "choices": 5,
    "relations": "P36,P103",
    "max_facts_per_relation": 4,
    "device": "cpu",
    "dtype": "float32",
    "threads": 1,
    "token_budget": 1,
}


@pytest.fixture()
def items(tmp_path):
    from factprobe.framework.registry import get_probe
    from factprobe_ops.components.steps._common import run_config

    cfg = run_config(CONFIG, probe="ic-lke", model="-")
    prepared = get_probe("ic-lke").prepare(cfg)
    prepared.save(tmp_path / "items" / (get_probe("ic-lke").dataset or "ic-lke"))
    return tmp_path / "items", prepared


def _unit(model, probes, shard=0, shards=1):
    return {"model": model, "probes": probes, "shard": shard, "shards": shards, "overrides": {}}


def test_shards_split_every_fact_once_and_stably(items):
    from factprobe_ops.components.steps._common import run_config
    from factprobe_ops.components.steps.probe import shard_prepared

    _, prepared = items
    cfg = run_config(CONFIG, probe="ic-lke", model="-")
    ids = [it.fact_id for its in prepared.items.values() for it in its]
    parts = [[it.fact_id for its in shard_prepared(cfg, prepared, s, 3).items.values() for it in its] for s in range(3)]
    assert sorted(x for p in parts for x in p) == sorted(ids) and all(parts)
    assert parts == [[it.fact_id for its in shard_prepared(cfg, prepared, s, 3).items.values() for it in its] for s in range(3)]
    assert shard_prepared(cfg, prepared, 0, 3).facts == prepared.facts


def test_more_shards_than_facts_is_one_line(items):
    from factprobe_ops.components.steps._common import run_config
    from factprobe_ops.components.steps.probe import shard_prepared

    _, prepared = items
    with pytest.raises(ConfigError, match=rf"shards=99 is more than the {prepared.n_items} facts of probe ic-lke"):
        shard_prepared(run_config(CONFIG, probe="ic-lke", model="-"), prepared, 0, 99)


def _run_units(units, items_dir, root, tolerant=False):
    from factprobe_ops.components.steps.probe import run_unit_step
    from factprobe_ops.tracking.context import RunContext

    dirs = []
    for i, u in enumerate(units):
        d = root / f"unit{i}"
        run_unit_step(
            str(items_dir),
            str(d),
            u,
            CONFIG,
            RunContext(tracking_uri="none").to_json(),
            work_root=str(root / "work"),
            tolerant=tolerant,
        )
        dirs.append(str(d))
    return dirs


@pytest.mark.slow  # probes a tiny model
def test_two_shards_merged_equal_one_unsharded_run(items, tmp_path, tiny_model_path):
    """The merged results.jsonl (sorted) and metrics.json equal the unsharded run's; the cost counters
    (tokens forwarded, ...) are the shards' sums, which splitting changes."""
    from factprobe_ops.components.steps.merge import COST_SUMS, run_merge

    items_dir, _ = items
    model = str(tiny_model_path("llama"))
    one = run_merge(_run_units([_unit(model, ["ic-lke"])], items_dir, tmp_path / "a"), str(tmp_path / "m1"), str(items_dir))
    two = run_merge(
        _run_units([_unit(model, ["ic-lke"], s, 2) for s in range(2)], items_dir, tmp_path / "b"),
        str(tmp_path / "m2"),
        str(items_dir),
    )
    assert len(one) == len(two) == 1
    rows = [
        sorted((json.loads(x) for x in (Path(d[0]) / "results.jsonl").read_text().splitlines()), key=lambda r: r["key"])
        for d in (one, two)
    ]
    assert rows[0] == rows[1] and len(rows[0]) == 8
    m1, m2 = (json.loads((Path(d[0]) / "metrics.json").read_text()) for d in (one, two))
    shard_metrics = [json.loads(p.read_text()) for p in sorted((tmp_path / "b").glob("unit*/ic-lke/metrics.json"))]
    costs = set(COST_SUMS) | {"token_savings"}
    assert {k: v for k, v in m1.items() if k not in costs} == {k: v for k, v in m2.items() if k not in costs}
    assert m2["tokens_forwarded"] == sum(m["tokens_forwarded"] for m in shard_metrics)
    assert shard_metrics[0]["data_digest"] != m1["data_digest"]  # each shard alone sees other data
    assert (
        json.loads((Path(two[0]) / "run_config.json").read_text())["identity"]
        == json.loads((Path(one[0]) / "run_config.json").read_text())["identity"]
    )


@pytest.mark.slow  # probes a tiny model
def test_a_killed_shard_resumes_alone(items, tmp_path, tiny_model_path):
    """Each shard has its own work folder: rerunning shard 2 after shard 1 finished scores nothing of shard 1."""
    from factprobe_ops.components.steps.probe import run_unit_step
    from factprobe_ops.tracking.context import RunContext

    items_dir, _ = items
    model = str(tiny_model_path("llama"))
    ctx = RunContext(tracking_uri="none").to_json()
    work = str(tmp_path / "work")
    first = run_unit_step(str(items_dir), str(tmp_path / "u0"), _unit(model, ["ic-lke"], 0, 2), CONFIG, ctx, work_root=work)
    folders = sorted((tmp_path / "work" / "probe").iterdir())
    assert len(folders) == 1 and folders[0].name.endswith("-shard1of2")
    again = run_unit_step(str(items_dir), str(tmp_path / "u0b"), _unit(model, ["ic-lke"], 0, 2), CONFIG, ctx, work_root=work)
    other = run_unit_step(str(items_dir), str(tmp_path / "u1"), _unit(model, ["ic-lke"], 1, 2), CONFIG, ctx, work_root=work)
    assert first["probes"]["ic-lke"]["scored_now"] > 0 and again["probes"]["ic-lke"]["scored_now"] == 0
    assert again["probes"]["ic-lke"]["resumed"] == first["probes"]["ic-lke"]["scored_now"]
    assert other["probes"]["ic-lke"]["resumed"] == 0 and other["probes"]["ic-lke"]["scored_now"] > 0


@pytest.mark.slow  # probes a tiny model
def test_one_load_runs_a_models_probes_in_one_pod_with_one_load(items, tmp_path, tiny_model_path, monkeypatch):
    from factprobe import models

    items_dir, _ = items
    model = str(tiny_model_path("llama"))
    loads = []
    real = models.load_model
    monkeypatch.setattr(models, "load_model", lambda *a, **k: loads.append(a) or real(*a, **k))
    dirs = _run_units([_unit(model, ["ic-lke", "hgp"])], items_dir, tmp_path, tolerant=True)
    assert len(loads) == 1
    assert sorted(p.name for p in Path(dirs[0]).iterdir()) == ["hgp", "ic-lke"]
    assert all((Path(dirs[0]) / p / "metrics.json").exists() for p in ("hgp", "ic-lke"))


@pytest.mark.slow  # probes a tiny model
def test_a_failed_shard_fails_its_run_in_the_merge(items, tmp_path, tiny_model_path):
    from factprobe_ops.components.steps.merge import run_merge

    items_dir, _ = items
    model = str(tiny_model_path("llama"))
    dirs = _run_units([_unit(model, ["ic-lke"], 0, 2)], items_dir, tmp_path)
    bad = tmp_path / "bad" / "ic-lke"  # what a tolerant unit step leaves for a failed shard
    bad.mkdir(parents=True)
    (bad / "failed.json").write_text(json.dumps({"model": model, "probe": "ic-lke", "error": "OutOfMemoryError: CUDA"}))
    (bad / "shard.json").write_text(json.dumps({"model": model, "probe": "ic-lke", "shard": 1, "shards": 2}))
    out = run_merge(dirs + [str(bad.parent)], str(tmp_path / "m"), str(items_dir))
    assert json.loads((Path(out[0]) / "failed.json").read_text())["error"] == "shard 2/2: OutOfMemoryError: CUDA"
    assert not (Path(out[0]) / "metrics.json").exists()


@pytest.mark.slow  # probes a tiny model
def test_a_missing_shard_is_refused_in_one_line(items, tmp_path, tiny_model_path):
    from factprobe.errors import DataError
    from factprobe_ops.components.steps.merge import run_merge

    items_dir, _ = items
    dirs = _run_units([_unit(str(tiny_model_path("llama")), ["ic-lke"], 1, 2)], items_dir, tmp_path)
    with pytest.raises(DataError, match=r"shards \[2\] of 2 came back"):
        run_merge(dirs, str(tmp_path / "m"), str(items_dir))


@pytest.mark.slow  # probes a tiny model
def test_a_shard_with_rows_missing_is_refused_not_merged_into_a_smaller_run(items, tmp_path, tiny_model_path):
    """A shard folder that lost rows (a torn copy, a shard over other data) must not merge into a run of fewer
    facts that still looks finished: the merge names the shards and the missing count."""
    from factprobe.errors import DataError
    from factprobe_ops.components.steps.merge import run_merge

    items_dir, _ = items
    model = str(tiny_model_path("llama"))
    dirs = _run_units([_unit(model, ["ic-lke"], s, 2) for s in range(2)], items_dir, tmp_path)
    results = Path(dirs[1]) / "ic-lke" / "results.jsonl"
    results.write_text("".join(results.read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(DataError, match=r"1 missing"):
        run_merge(dirs, str(tmp_path / "m"), str(items_dir))


@pytest.mark.slow  # probes a tiny model, logs to a sqlite MLflow store
def test_the_merged_run_is_the_probe_run_and_shards_are_not(items, tmp_path, tiny_model_path):
    """The nightly comparison finds last night's probe run by `step=probe`: a sharded run logs ONE such
    run (the merged one, with its metrics and per-fact table), its shards' runs are `probe-shard`."""
    from mlflow.tracking import MlflowClient

    from factprobe_ops.components.steps.merge import run_merge
    from factprobe_ops.components.steps.probe import run_unit_step
    from factprobe_ops.tracking.context import RunContext

    items_dir, _ = items
    model = str(tiny_model_path("llama"))
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    c = MlflowClient(uri)
    parent = c.create_run(c.create_experiment("factprobe/probe")).info.run_id
    ctx = RunContext(tracking_uri=uri, parent_run_id=parent, kfp_run_id="k1").to_json()
    dirs = []
    for s in range(2):
        run_unit_step(
            str(items_dir), str(tmp_path / f"u{s}"), _unit(model, ["ic-lke"], s, 2), CONFIG, ctx, work_root=str(tmp_path / "work")
        )
        dirs.append(str(tmp_path / f"u{s}"))
    (out,) = run_merge(dirs, str(tmp_path / "m"), str(items_dir), ctx)
    runs = c.search_runs([c.get_run(parent).info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    steps = sorted(r.data.tags.get("factprobe.step") for r in runs)
    assert steps == ["probe", "probe-shard", "probe-shard"], steps
    (merged,) = [r for r in runs if r.data.tags.get("factprobe.step") == "probe"]
    assert merged.data.tags["factprobe.shards"] == "2"
    assert merged.data.metrics["accuracy"] == json.loads((Path(out) / "metrics.json").read_text())["accuracy"]
    assert {a.path for a in c.list_artifacts(merged.info.run_id, "tables")} >= {"tables/per_fact.parquet"}


def test_the_parent_run_names_a_settings_entry_by_its_model():
    """A models-file entry with settings is tagged and listed by its model, not by the mapping's text."""
    from factprobe_ops.components.steps.start_run import model_history, model_name

    assert model_name("gemma-3-270m") == "gemma-3-270m"
    assert model_name({"name": "big", "gpus": 4.0}) == "big"
    assert model_name({"name": "smollm2", "endpoint": "http://h:8000/v1"}) == "openai:smollm2@http://h:8000/v1"
    assert "{" not in model_history("r", [{"name": "big", "gpus": 4}])[0]["artifact_path"]
