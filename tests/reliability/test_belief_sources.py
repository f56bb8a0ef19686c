"""Issue 18 items 10, 11 and 18b: BELIEF template sources, the data root templates come from, and
`--draws` bounds.

Data roots are built in tmp_path from SYMLINKS to folders of the real data (never copies)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from factprobe.datasets.multiprompt import prepare_multiprompt
from factprobe.errors import ConfigError, DataError
from factprobe.framework.config import BaseConfig, RunConfig
from factprobe.framework.runner import run_probe
from factprobe.metrics import belief as mb
from factprobe.probes.belief_icl import BeliefICLConfig
from factprobe.probes.belief_mlm import BeliefMLMConfig

REPO = Path(__file__).resolve().parents[2]


def linked_root(tmp_path: Path, real: Path, folders: tuple[str, ...]) -> Path:
    """A data root whose `folders` are symlinks to the real data's."""
    root = tmp_path / "root"
    root.mkdir()
    for name in folders:
        (root / name).symlink_to(real / name, target_is_directory=True)
    return root


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def base(data: Path | str, **kw) -> BaseConfig:
    kw.setdefault("relations", ["P36"])
    kw.setdefault("max_facts_per_relation", 3)
    kw.setdefault("model", "unused")
    return BaseConfig(source=kw.pop("source", "lama"), data=str(data), device="cpu", dtype="float32", **kw)


# ------------------------------------------------------------------ item 10
def test_missing_template_source_is_an_error_naming_the_path(tmp_path, real_data_root, monkeypatch) -> None:
    """issue 18 item 10: a data root without pararel/ no longer gives 4 templates silently; the error
    names the missing path and the --template-sources value that leaves it out."""
    root = linked_root(tmp_path, real_data_root, ("lama", "lpaqa", "coherency"))
    monkeypatch.setenv("FACTPROBE_DATA", str(root))
    with pytest.raises(
        DataError,
        match=r"pararel.*not found.*--template-sources lama,lpaqa-manual,lpaqa-paraphrase,"
        r"belief-qa",
    ) as e:
        prepare_multiprompt(base(root / "lama"))
    assert str(root / "pararel" / "patterns") in str(e.value)
    # leaving it out on purpose works, and says which sources gave the templates
    prepared = prepare_multiprompt(base(root / "lama"), ["lama", "lpaqa-manual", "lpaqa-paraphrase", "belief-qa"])
    sources = {t["source"] for t in prepared.info["multiprompt_templates"]}
    assert "pararel" not in sources and {"lama", "lpaqa-manual"} <= sources


def test_missing_source_cli_is_one_line(tmp_path, real_data_root, tiny_model_path) -> None:
    """issue 18 item 10: the CLI prints one `error:` line naming the path (no traceback), before any model."""
    root = linked_root(tmp_path, real_data_root, ("lama", "lpaqa"))
    env = {**os.environ, "FACTPROBE_DATA": str(root)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "probe",
            "belief-mlm",
            "--model",
            str(tiny_model_path("bert")),
            "--source",
            "lama",
            "--data",
            str(root / "lama"),
            "--relations",
            "P36",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env=env,
    )
    assert r.returncode != 0
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert "Traceback" not in r.stderr and err[-1].startswith("error: ")
    assert str(root / "pararel" / "patterns") in err[-1]


def test_metrics_list_sources_used_with_counts(tmp_path, real_data_root, monkeypatch, tiny_model_path) -> None:
    """issue 18 item 10: metrics.json `template_sources` lists the sources actually used with the number
    of templates from each (not the five asked for)."""
    root = linked_root(tmp_path, real_data_root, ("lama", "lpaqa", "coherency"))
    monkeypatch.setenv("FACTPROBE_DATA", str(root))
    params = BeliefMLMConfig(draws=50, vocab="model", bias=False, template_sources="lama,lpaqa-manual")
    cfg = RunConfig("belief-mlm", base(root / "lama", max_facts_per_relation=2, model=str(tiny_model_path("bert"))), params)
    out = run_probe(cfg, tmp_path / "run", progress=False, log=lambda m: None)
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    used = out.metrics["templates_per_relation"]["P36"]
    assert set(m["template_sources"]) == {"lama", "lpaqa-manual"}
    assert m["template_sources"]["lama"] == 1 and sum(m["template_sources"].values()) == used
    assert m["template_sources_asked"] == ["lama", "lpaqa-manual"]


# ------------------------------------------------------------------ item 11
def test_templates_come_from_the_facts_data_root(tmp_path, real_data_root, monkeypatch) -> None:
    """issue 18 item 11: with --data in one data root and FACTPROBE_DATA at another, the templates come
    from the facts' root (not silently from FACTPROBE_DATA)."""
    toy = tmp_path / "toy"
    write(
        toy / "lama" / "relations.jsonl",
        json.dumps({"relation": "P36", "template": "[X] toy-capital [Y] .", "label": "capital", "type": "1-1"}) + "\n",
    )
    write(
        toy / "lama" / "trex" / "P36.jsonl",
        json.dumps({"sub_uri": "Q1", "obj_uri": "Q2", "sub_label": "France", "obj_label": "Paris"}) + "\n",
    )
    monkeypatch.setenv("FACTPROBE_DATA", str(real_data_root))
    prepared = prepare_multiprompt(base(toy / "lama"), ["lama"])
    assert [t["template"] for t in prepared.info["multiprompt_templates"]] == ["[X] toy-capital [Y]."]
    assert Path(prepared.info["templates_root"]) == toy.resolve() and not prepared.info["templates_note"]


def test_templates_from_elsewhere_are_noted(tmp_path, real_data_root, monkeypatch) -> None:
    """issue 18 item 11: facts outside any data root (a lone triples file) or an explicit
    --templates-root elsewhere: the templates' root is named in a note."""
    monkeypatch.setenv("FACTPROBE_DATA", str(real_data_root))
    triples = write(
        tmp_path / "facts" / "t.jsonl", json.dumps({"subject": "France", "relation": "P36", "object": "Paris"}) + "\n"
    )
    prepared = prepare_multiprompt(base(triples, source="triples"), ["lama"])
    note = prepared.info["templates_note"]
    assert note and str(real_data_root) in note and str(triples) in note
    toy = tmp_path / "toy"
    write(toy / "lama" / "relations.jsonl", json.dumps({"relation": "P36", "template": "[X] toy [Y] ."}) + "\n")
    write(toy / "lama" / "trex" / "P36.jsonl", json.dumps({"sub_label": "France", "obj_label": "Paris"}) + "\n")
    prepared = prepare_multiprompt(base(toy / "lama"), ["lama"], templates_root=str(real_data_root))
    assert str(real_data_root) in prepared.info["templates_note"]
    assert "toy" not in prepared.info["multiprompt_templates"][0]["template"]


# ------------------------------------------------------------------ item 18b
@pytest.mark.parametrize("cls", [BeliefMLMConfig, BeliefICLConfig])
def test_huge_draws_refused_with_the_config(cls) -> None:
    """issue 18 item 18b: --draws 10000000000000 is refused before any scoring (it was a traceback after)."""
    with pytest.raises(ConfigError, match="draws"):
        cls(draws=10_000_000_000_000)
    cls(draws=mb.MAX_DRAWS)


def test_huge_draws_refused_by_the_metrics() -> None:
    """issue 18 item 18b: the metric function refuses too (no MemoryError)."""
    import pandas as pd

    df = pd.DataFrame({"fact_id": ["a", "a"], "relation": ["P1", "P1"], "template_id": ["t1", "t2"], "correct": [True, False]})
    with pytest.raises(DataError, match="n_draws"):
        mb.belief_accuracies(df, n_draws=10_000_000_000_000)
    assert mb.belief_accuracies(df, n_draws=100)["acc@1"]["n_draws"] == 100


def test_huge_draws_cli_one_line(tmp_path) -> None:
    """issue 18 item 18b: the CLI says so in one line, with no traceback and no model load."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "factprobe.cli",
            "probe",
            "belief-mlm",
            "--model",
            "no/such-model",
            "--draws",
            "10000000000000",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert err[-1].startswith("error: ") and "draws" in err[-1]
