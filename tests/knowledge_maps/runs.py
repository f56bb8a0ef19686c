"""Hand-made finished run folders for the knowledge map's tests (no model: the numbers are chosen by hand).

`VERDICTS[fact] = (relation, ic-lke, hgp per template, qa)` with gold probabilities; `write_runs`
writes one folder per probe as `factprobe probe` leaves it (metrics.json naming probe, model,
revision, data digest; results.jsonl rows in the probe's own shape: one row per fact for ic-lke,
one per template for hgp, qa rows with a split).
"""

from __future__ import annotations

import json
from pathlib import Path

#: fact -> (relation, ic-lke right, ic-lke gold_prob, hgp [(right, gold_prob) per template], qa right)
TABLE = {
    "P1|f1": ("P1", True, 0.9, [(True, 0.8), (True, 0.8)], True),  # every probe: k = 3
    "P1|f2": ("P1", True, 0.9, [(True, 0.8), (False, 0.2)], True),  # hgp 1 of 2 templates: a tie is wrong; k = 2
    "P1|f3": ("P1", False, 0.1, [(False, 0.1)], True),  # k = 1
    "P1|f4": ("P1", False, 0.1, [(False, 0.1)], False),  # none
    "P2|f5": ("P2", True, 0.7, [(True, 0.6)], False),  # k = 2
    "P2|f6": ("P2", False, 0.2, [(True, 0.9), (True, 0.9), (False, 0.3)], False),  # hgp 2 of 3: right; k = 1
}
DIGESTS = {"ic-lke": "sha256:" + "1" * 64, "hgp": "sha256:" + "2" * 64, "qa": "sha256:" + "3" * 64}


def write_run(
    folder: Path, probe: str, model: str, rows: list[dict], revision: str = "local-sha256:" + "a" * 64, digest: str | None = None
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    digest = digest or DIGESTS[probe]
    metrics = {"probe": probe, "model": model, "model_revision": revision, "data_digest": digest, "n": len(rows)}
    metrics["identity"] = {
        "model_revision": revision,
        "data_digest": digest,
        "config_key": "k",
        "inputs": [],
        "numerics": {"dtype": "float32", "device": "cpu"},
    }
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "run_config.json").write_text(json.dumps({"config": {"probe": probe, "model": model}}))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def rows_of(probe: str, table: dict = TABLE) -> list[dict]:
    rows = []
    for fact, (rel, ic, ic_p, hgp, qa) in table.items():
        if probe == "ic-lke":
            rows.append({"key": fact, "fact_id": fact, "relation": rel, "correct": ic, "gold_prob": ic_p, "options": ["x"] * 5})
        elif probe == "hgp":
            rows += [
                {"key": f"{fact}#t{i}", "fact_id": fact, "relation": rel, "template": f"t{i}", "correct": r, "gold_prob": p}
                for i, (r, p) in enumerate(hgp)
            ]
        else:
            rows.append(
                {
                    "key": f"{fact}#eval",
                    "fact_id": fact,
                    "relation": rel,
                    "split": "eval",
                    "setting": "regular",
                    "correct": qa,
                    "em": float(qa),
                    "gold": ["x"],
                }
            )
    if probe == "qa":  # a train-split row of another fact: the qa verdict reads the eval split only
        rows.append(
            {
                "key": "P1|t9#train",
                "fact_id": "P1|t9",
                "relation": "P1",
                "split": "train",
                "setting": "regular",
                "correct": True,
                "em": 1.0,
                "gold": ["y"],
            }
        )
    return rows


def write_runs(root: Path, model: str = "model-a", table: dict = TABLE, probes=("ic-lke", "hgp", "qa"), **kw) -> list[str]:
    return [str(write_run(root / f"{p}-{model}", p, model, rows_of(p, table), **kw)) for p in probes]
