"""Every built-in probe's results.jsonl and metrics.json on a fixed fixture, for "no behaviour change" checks.

    python scripts/probe_snapshot.py --out DIR            # run every probe, write DIR/<probe>/{results.jsonl,metrics.json}
    python scripts/probe_snapshot.py --check --base DIR   # run again and compare byte for byte with DIR

The models are tiny RANDOM models (factprobe/models/testing.py) built into a fixed folder
(`--models`, default /tmp/factprobe-snapshot-models), so paths and weights are the same on every run;
their numbers mean nothing and are never results. The facts: tests/fixtures/mc_snapshot (the four
multiple-choice probes), the built-in countryinfo set (QA, counterfactual ICL) and LAMA T-REx under
the data root (coherency, BELIEF; `FACTPROBE_DATA`, default ../shared/data).
Volatile metrics.json keys (wall-clock times) are removed before writing and the checkout's path
becomes `<repo>`; nothing else is touched.
Exit status: 0 when every file is identical (--check), 1 otherwise, naming the files and first difference.
"""

from __future__ import annotations

import argparse
import difflib
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FX = REPO / "tests" / "fixtures" / "mc_snapshot"
#: metrics.json keys that hold wall-clock measurements (removed: they differ on every run)
VOLATILE = ("seconds", "elapsed", "wall", "tokens_per_second", "items_per_second", "duration")


def _models(root: Path) -> dict[str, Path]:
    """The tiny RANDOM models: gpt2, a llama with a 2048-token window and louder weights (as
    tests/probes/test_qa.py widens it, so k-shot blocks fit), and bert (masked)."""
    from factprobe.models.testing import make_tiny_random_model, widen_tiny_llama

    root.mkdir(parents=True, exist_ok=True)
    out = {kind: make_tiny_random_model(kind, root) for kind in ("gpt2", "llama", "bert")}
    wide = widen_tiny_llama(out["llama"], root / "wide")
    out["wide"] = wide
    return out


def configs(models: dict[str, Path], data: Path) -> dict[str, dict]:
    """{probe: flat run config} of the fixed fixture."""
    mc = {
        "model": str(models["gpt2"]),
        "source": "triples",
        "data": str(FX / "test.jsonl"),
        "train_data": str(FX / "train"),
        "choices": 5,
        "seed": 3,
    }
    prompts = {"prompts_root": str(FX / "prompts")}
    lama = {"source": "lama", "data": str(data / "lama"), "relations": "P36,P19", "max_facts_per_relation": 3}
    cpu = {"device": "cpu", "dtype": "float32"}
    return {
        "ic-lke": {**mc, "examples": 4, **cpu},
        "eic-lke": {**mc, "examples": 4, "eic_interleave": 2, "eic_tests_per_sequence": 3, "tuple_separator": " ", **cpu},
        "hgp": {**mc, **prompts, **cpu},
        "mmp": {**mc, **prompts, **cpu},
        "qa": {
            "model": str(models["wide"]),
            "relations": "P36,P1376",
            "max_facts_per_relation": 3,
            "shots": "0,2",
            "qa_train_per_relation": 3,
            **cpu,
        },
        "counterfactual": {
            "model": str(models["wide"]),
            "relations": "P36,P1376,P37",
            "max_facts_per_relation": 2,
            "qa_train_per_relation": 6,
            "shots": "2,4",
            "known_shots": 3,
            "counterfactual_answer": "label",
            **cpu,
        },  # the draw before issue 20 (default now fact)
        "coherency": {"model": str(models["llama"]), **lama, "max_candidates": 8, **cpu},
        "belief-icl": {"model": str(models["wide"]), **lama, "max_templates": 3, "samples": 2, "draws": 20, **cpu},
        "belief-mlm": {"model": str(models["bert"]), **lama, "max_templates": 3, "vocab": "common", **cpu},  # the
        # vocabulary before issue 20 (default now model)
    }


def _own(probe: str, flat: dict) -> dict:
    from factprobe.framework.registry import get_probe

    cls = get_probe(probe).config_class
    from factprobe.framework.config import BaseConfig

    names = set(cls.field_names()) | set(BaseConfig.field_names())
    unknown = sorted(set(flat) - names)
    if unknown:
        raise SystemExit(f"snapshot config of {probe} names options it does not have: {unknown}")
    return {"probe": probe, **flat}


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if not any(w in k for w in VOLATILE)}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def run_all(out: Path, models_root: Path, data: Path, only: list[str] | None = None) -> None:
    from factprobe.framework.config import RunConfig
    from factprobe.framework.runner import run_probe

    models = _models(models_root)
    for probe, flat in configs(models, data).items():
        if only and probe not in only:
            continue
        work = out / ".work" / probe
        shutil.rmtree(work, ignore_errors=True)
        cfg = RunConfig.from_dict(_own(probe, flat))
        run_probe(cfg, work, progress=False, log=lambda m: None)
        dst = out / probe
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / "results.jsonl", dst / "results.jsonl")
        metrics = _strip(json.loads((work / "metrics.json").read_text(encoding="utf-8")))
        text = json.dumps(metrics, indent=1, sort_keys=True).replace(str(REPO), "<repo>")  # where the checkout lives
        (dst / "metrics.json").write_text(text + "\n", encoding="utf-8")
        rows = len((dst / "results.jsonl").read_text(encoding="utf-8").splitlines())
        print(f"{probe}: {rows} rows", flush=True)
    shutil.rmtree(out / ".work", ignore_errors=True)


def compare(base: Path, got: Path) -> list[str]:
    """Differences between two snapshot folders, one line per differing or missing file."""
    bad = []
    for f in sorted(p.relative_to(base) for p in base.rglob("*") if p.is_file()):
        a, b = base / f, got / f
        if not b.exists():
            bad.append(f"{f}: missing")
        elif a.read_bytes() != b.read_bytes():
            diff = list(difflib.unified_diff(a.read_text().splitlines(), b.read_text().splitlines(), lineterm="", n=0))
            bad.append(f"{f}: differs: " + " | ".join(diff[2:6])[:600])
    return bad


def main(argv: list[str] | None = None) -> int:
    from factprobe.paths import data_root

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write the snapshot here")
    p.add_argument("--check", action="store_true", help="run into a temp folder and compare with --base")
    p.add_argument("--base", type=Path, default=Path("/work/snapshot-before"), help="the snapshot to compare with")
    p.add_argument("--models", type=Path, default=Path("/tmp/factprobe-snapshot-models"))
    p.add_argument("--only", help="comma-separated probes")
    a = p.parse_args(argv)
    only = a.only.split(",") if a.only else None
    if a.check:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            run_all(Path(d), a.models, data_root(), only)
            bad = [b for b in compare(a.base, Path(d)) if not only or b.split("/")[0] in only]
        print("\n".join(bad) if bad else f"OK: every file identical to {a.base}")
        return 1 if bad else 0
    if not a.out:
        p.error("give --out DIR or --check")
    run_all(a.out, a.models, data_root(), only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
