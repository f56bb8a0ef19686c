"""Studies plug in as probes do (issue 31 item 2), following docs/extending.md.

`tests/studies/plugin_study.py` (`prefix-gain`) is loaded by `FACTPROBE_STUDY_MODULES` or a `factprobe.studies`
entry point, with no change to factprobe, and reaches `factprobe study prefix-gain`, MLflow (its headline and
direction), and the generic `study` pipeline (its options checked up front, compiled into the form, and one
local KFP run). A study that loads no model names none: not in its configuration, its identity, its folder
name or its MLflow tags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from factprobe.config import ConfigBase, option
from factprobe.errors import ConfigError
from factprobe.studies import registry
from factprobe.studies.base import Study, StudyContext, StudyHeadline

REPO = Path(__file__).resolve().parents[2]
FX = REPO / "tests" / "fixtures" / "mc_snapshot"
MODULE = "tests.studies.plugin_study"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        registry.PLUGIN_ENV: MODULE,
        "FACTPROBE_WORK": str(tmp_path / "work"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


@pytest.fixture
def fresh_registry(monkeypatch):
    """The built-in studies only, not yet loaded (the state is restored after the test), the plug-in module not
    imported yet (a module imported once registers once: the built-ins are kept, not imported again)."""
    builtins = {k: v for k, v in registry.load_studies().items() if type(v).__module__ in registry.BUILTIN_MODULES}
    monkeypatch.setattr(registry, "_REGISTRY", builtins)
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    monkeypatch.delenv(registry.PLUGIN_ENV, raising=False)
    return registry


@pytest.fixture
def plugin(fresh_registry, monkeypatch):
    """The registry with the plug-in loaded through the environment variable."""
    monkeypatch.setenv(registry.PLUGIN_ENV, MODULE)
    registry.load_studies()
    return registry.get_study("prefix-gain")


# --- registration -------------------------------------------------------------------------------


def test_the_environment_variable_loads_a_study_module_after_the_built_ins(fresh_registry, monkeypatch):
    monkeypatch.setenv(registry.PLUGIN_ENV, f" {MODULE} ,")
    names = registry.available()
    assert names[:3] == ["icl-examples", "icl-sequence", "findings"] and names[3:] == ["prefix-gain"]
    assert registry.get_study("prefix-gain").config_class.__name__ == "PrefixGainConfig"


def test_an_entry_point_loads_a_study_module(fresh_registry, monkeypatch):
    import importlib.metadata as md

    seen = []

    def entry_points(group=None, **kw):
        seen.append(group)
        return [md.EntryPoint("prefix-gain", MODULE, group)] if group == registry.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(md, "entry_points", entry_points)
    assert "prefix-gain" in registry.available() and registry.ENTRY_POINT_GROUP in seen


def test_a_module_that_cannot_be_imported_is_one_error_naming_it(fresh_registry, monkeypatch):
    monkeypatch.setenv(registry.PLUGIN_ENV, "no_such_pkg.studies")
    with pytest.raises(ConfigError, match=r"cannot import study module 'no_such_pkg.studies' \(from FACTPROBE_STUDY_MODULES"):
        registry.load_studies()


@pytest.mark.slow
def test_the_cli_says_so_in_one_line(fresh_registry, monkeypatch, capsys):
    monkeypatch.setenv(registry.PLUGIN_ENV, "no_such_pkg.studies")
    from factprobe.cli import main

    assert main(["study", "prefix-gain", "--no-track"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot import study module 'no_such_pkg.studies'") and "\n" not in err


def test_register_refuses_a_non_study_and_a_name_taken_by_another_class(fresh_registry):
    with pytest.raises(ConfigError, match="is not a factprobe.studies.base.Study"):
        registry.register(object())  # type: ignore[arg-type]

    class A(Study):
        name = "twice"

    class B(Study):
        name = "twice"

    registry.register(A())
    registry.register(A())  # the same class again (a module imported twice) replaces it
    with pytest.raises(ConfigError, match=r"study name 'twice' is registered twice \(A, B\)"):
        registry.register(B())


def test_unknown_study_lists_the_registered_ones(plugin):
    with pytest.raises(ConfigError, match="unknown study 'nope'; known: icl-examples, icl-sequence, findings, prefix-gain"):
        registry.get_study("nope")


# --- headline -----------------------------------------------------------------------------------


def test_the_built_in_studies_declare_their_headline_and_direction(plugin):
    assert registry.get_study("icl-examples").headline_metric == StudyHeadline(
        "n95", False, registry.get_study("icl-examples").headline_metric.label
    )
    assert registry.get_study("icl-sequence").headline_metric.metric == "mean_prob_correct"
    assert registry.get_study("icl-sequence").headline_metric.higher_is_better
    assert registry.get_study("findings").headline_metric is None  # a table of verdicts has no one number
    assert plugin.headline_metric.metric == "mean_gain"


def test_headline_row_reads_the_flat_metrics_and_skips_a_missing_or_nan_value():
    from factprobe_ops.tracking.study_run import study_headline

    class S(Study):
        name = "s"
        headline_metric = StudyHeadline("steps", higher_is_better=False)

    assert study_headline(S(), {"steps": 3, "other": 1.0}) == {
        "name": "headline/s",
        "metric": "steps",
        "value": 3.0,
        "higher_is_better": False,
        "label": "steps",
    }
    assert study_headline(S(), {"steps": float("nan")}) is None and study_headline(S(), {}) is None
    assert study_headline(Study(), {"steps": 3}) is None


# --- a study that loads no model ---------------------------------------------------------------


@dataclass
class CountConfig(ConfigBase):
    at_least: int = option(1, "count the relations with at least this many facts")


class RelationCount(Study):
    """Reads the facts only (the base flags for its data), loads no model."""

    name = "relation-count"
    config_class = CountConfig
    loads_model = False
    headline_metric = StudyHeadline("relations", higher_is_better=False)

    def run(self, ctx: StudyContext) -> dict:
        from factprobe.sources import load_facts

        facts = load_facts(ctx.base.source, ctx.base.data, None)
        sizes: dict = {}
        for f in facts:
            sizes[f.relation] = sizes.get(f.relation, 0) + 1
        return {"relations": sum(1 for n in sizes.values() if n >= ctx.cfg.at_least), "facts": len(facts)}


class NoHeadline(RelationCount):
    name = "no-headline"
    headline_metric = None


@pytest.fixture
def counting(monkeypatch):
    mod = types.ModuleType("tests_counting_study")
    mod.STUDY = RelationCount()
    monkeypatch.setitem(sys.modules, "tests_counting_study", mod)
    monkeypatch.setattr(registry, "_REGISTRY", {"relation-count": mod.STUDY, "no-headline": NoHeadline()})
    monkeypatch.setattr(registry, "_loaded", True)
    return mod.STUDY


def test_a_study_that_loads_no_model_names_none(counting, tmp_path):
    from factprobe.studies.cli import default_out, study_config

    config = study_config(counting, {"source": "triples", "data": str(FX / "test.jsonl"), "at_least": 2})
    assert "model" not in config["base"] and "device" not in config["base"] and config["base"]["source"] == "triples"
    assert default_out(counting, config) == Path("runs/study-relation-count")


@pytest.mark.slow
def test_a_study_that_loads_no_model_has_no_model_flag(counting, capsys):
    from factprobe.cli import main

    with pytest.raises(SystemExit):  # no --model flag to give
        main(["study", "relation-count", "--model", "x"])
    assert "unrecognized arguments: --model x" in capsys.readouterr().err


@pytest.mark.slow
def test_mlflow_tags_a_headline_with_its_direction_and_no_model_for_a_study_that_loads_none(counting, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from factprobe.cli import main

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    data = ["--source", "triples", "--data", str(FX / "test.jsonl"), "--no-progress", "--tracking-uri", uri]
    assert main(["study", "relation-count", "--out", str(tmp_path / "a"), *data]) == 0
    assert main(["study", "no-headline", "--out", str(tmp_path / "b"), *data]) == 0
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("factprobe/study-relation-count")
    assert exp.tags["mlflow.experiment.primaryMetric.name"] == "headline/relation-count"
    assert exp.tags["mlflow.experiment.primaryMetric.greaterIsBetter"] == "false"  # the study's direction
    (run,) = c.search_runs([exp.experiment_id])
    head = json.loads(run.data.tags["factprobe.headline"])
    assert head == {
        "name": "headline/relation-count",
        "metric": "relations",
        "value": run.data.metrics["relations"],
        "higher_is_better": False,
        "label": "relations",
    }
    assert run.data.metrics["headline/relation-count"] == run.data.metrics["relations"] > 0
    assert "factprobe.model" not in run.data.tags and "factprobe.model_revision" not in run.data.tags
    identity = json.loads((tmp_path / "a" / "metrics.json").read_text())["identity"]
    assert identity["model_revisions"] == {} and identity["numerics"] == {}  # no weights hashed, no device resolved
    assert run.data.tags["factprobe.source"] == "triples" and "relation-count-" in run.info.run_name
    (bare,) = c.search_runs([c.get_experiment_by_name("factprobe/study-no-headline").experiment_id])
    assert "factprobe.headline" not in bare.data.tags and not any(k.startswith("headline/") for k in bare.data.metrics)


# --- the plug-in through the CLI and MLflow -----------------------------------------------------


@pytest.mark.slow
def test_a_plugin_study_runs_through_the_cli_and_mlflow(tmp_path, tiny_model_path):
    model = tiny_model_path("gpt2")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "study",
            "prefix-gain",
            "--model",
            str(model),
            "--source",
            "triples",
            "--data",
            str(FX / "test.jsonl"),
            "--prefix",
            "Fact:",
            "--out",
            str(tmp_path / "o"),
            "--no-progress",
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'm.db'}",
        ],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    rows = (tmp_path / "o" / "per_fact.jsonl").read_text().splitlines()
    assert metrics["n"] == len(rows) == 16 and "prefix-gain: mean gain" in p.stdout and "MLflow run" in p.stdout
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    (run,) = c.search_runs([c.get_experiment_by_name("factprobe/study-prefix-gain").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["prefix"] == "Fact:"
    assert run.data.metrics["headline/prefix-gain"] == pytest.approx(metrics["mean_gain"])
    assert json.loads(run.data.tags["factprobe.headline"])["higher_is_better"] is True
    assert run.data.tags["factprobe.model"] == str(model)
    assert "per_fact.json" in {a.path.split("/")[-1] for a in c.list_artifacts(run.info.run_id, "tables")}


# --- the generic study pipeline -----------------------------------------------------------------


def test_the_plan_checks_the_study_and_its_options_before_anything_runs(plugin):
    from factprobe_ops.components.steps.study import run_study_plan

    data = {"source": "triples", "data": str(FX / "test.jsonl")}
    cells = run_study_plan("prefix-gain", ["a", "b"], {"options": json.dumps(data)}, "CTX")
    assert cells == [{"model": "a", "context": "CTX"}, {"model": "b", "context": "CTX"}]  # one per model
    assert run_study_plan("findings", ["a", "b"], {"options": ""}, "CTX") == [{"model": "", "context": "CTX"}]
    for options, message in (
        ({"prefx": "x"}, "options: unknown option 'prefx' for study prefix-gain; its options: "),
        ({"prefix": " "}, "prefix=' ': give a non-empty prefix"),
        ({"model": "x"}, "'model' is set by the pipeline's `models` parameter"),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
            run_study_plan("prefix-gain", ["a"], {"options": json.dumps(options)}, "")
    with pytest.raises(ConfigError, match="parameter study: unknown study 'nope'; registered: .*prefix-gain"):
        run_study_plan("nope", ["a"], {}, "")
    with pytest.raises(ConfigError, match="parameter models: the models list is empty"):
        run_study_plan("prefix-gain", [], {}, "")
    with pytest.raises(ConfigError, match=r"parameter models: \{'name': 'a'\} is not a model name"):
        run_study_plan("prefix-gain", [{"name": "a"}], {}, "")


@pytest.mark.slow
def test_the_generic_pipeline_takes_the_plugins_options_and_shows_them_in_the_form(plugin, tmp_path):
    import yaml
    from kfp import compiler

    from factprobe_ops.pipelines.catalogue import get_pipeline, parse_params

    pipe = get_pipeline("study")
    got = parse_params(pipe, ["study=prefix-gain", "prefix=Q:", "source=triples", f"data={FX / 'test.jsonl'}"], "study")
    assert got["study"] == "prefix-gain" and json.loads(got["options"])["prefix"] == "Q:"
    with pytest.raises(ConfigError, match="pipeline study has no parameter 'n'"):  # icl-examples' option, not this study's
        parse_params(pipe, ["study=prefix-gain", "n=1"], "study")
    with pytest.raises(ConfigError, match="prefix='': give a non-empty prefix"):
        parse_params(pipe, ["study=prefix-gain", "prefix="], "study")
    path = tmp_path / "study.yaml"
    compiler.Compiler().compile(pipe, str(path))
    params = next(yaml.safe_load_all(path.read_text()))["root"]["inputDefinitions"]["parameters"]
    assert set(params) == {"study", "models", "tracking_uri", "trigger", "work_root", "options"}
    assert "prefix-gain (" in params["study"]["description"] and "prefix)" in params["study"]["description"]


@pytest.mark.slow
@pytest.mark.pipeline
def test_a_plugin_study_runs_through_the_local_generic_pipeline(tmp_path, tiny_model_path):
    model = tiny_model_path("gpt2")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "pipeline",
            "run",
            "study",
            "--param",
            "study=prefix-gain",
            "--param",
            f'models=["{model}"]',
            "--param",
            "source=triples",
            "--param",
            f"data={FX / 'test.jsonl'}",
            "--param",
            "prefix=Fact:",
        ],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    runs = c.search_runs([c.get_experiment_by_name("factprobe/study").experiment_id])
    (child,) = [r for r in runs if r.data.tags.get("factprobe.step") == "study"]
    assert child.info.status == "FINISHED" and child.data.tags["factprobe.study"] == "prefix-gain"
    assert "headline/prefix-gain" in child.data.metrics and child.data.params["prefix"] == "Fact:"
