"""How a map reads: the HTML page of a map folder (`write_page`) and the terminal summary (`format_summary`),
both from the summary dict (`knowledge_map.json`). Every number is a relation mean with its 95%
t-interval over relations, the pooled share beside it (`factprobe.knowledge_maps.stats`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..identity import short
from ..io import atomic_write_text
from ..report.html import html_page

CATEGORY_TEXT = {
    "every": "known under every probe",
    "majority": "known under a majority",
    "none": "known under none",
    "disputed": "disputed",
}


def _num(v: Any) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def with_ci(value: Any, lo: Any, hi: Any) -> str:
    """`0.312 [0.220, 0.404]`; `—` for an undefined value, no interval where it is undefined."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if lo is None or hi is None or any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
        return f"{value:.3f}"
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def _stat(d: dict, name: str) -> str:
    return with_ci(d.get(name), d.get(f"{name}_ci_low"), d.get(f"{name}_ci_high"))


def share_rows(summary: dict) -> list[dict]:
    """One row per model: each category's share (relation mean [95% CI]) and the pooled share."""
    rows = []
    for m in summary.get("models", []):
        row = {"model": m["label"], "facts": m["n_facts"]}
        for cat, text in CATEGORY_TEXT.items():
            s = m["shares"][cat]
            row[text] = with_ci(s["value"], s["ci_low"], s["ci_high"])
            row[f"{cat} (pooled)"] = _num(s["pooled"])
        row["relations"] = m["shares"]["every"]["n_relations"]
        rows.append(row)
    return rows


def pair_rows(summary: dict) -> list[dict]:
    """One row per model and probe pair: kappa and eta both ways (relation mean [95% CI]), raw agreement, facts."""
    return [
        {
            "model": m["label"],
            "probes": f"{p['probe_a']} / {p['probe_b']}",
            "kappa": _stat(p, "kappa"),
            "eta(a|b)": _stat(p, "eta_a_given_b"),
            "eta(b|a)": _stat(p, "eta_b_given_a"),
            "agreement (pooled)": _num(p["agreement"]),
            "facts": p["n_facts"],
        }
        for m in summary.get("models", [])
        for p in m.get("pairs", [])
    ]


def sharing_rows(summary: dict) -> list[dict]:
    labels = {m["model"]: m["label"] for m in summary.get("models", [])}
    return [
        {
            "robust facts of": labels.get(r["model_a"], r["model_a"]),
            "known robustly by": labels.get(r["model_b"], r["model_b"]),
            "sharing rate (pooled)": _num(r["rate"]),
            "relation mean [95% CI]": with_ci(r["value"], r["ci_low"], r["ci_high"]),
            "robust facts": r["n_robust_a"],
            "shared": r["n_shared"],
        }
        for r in summary.get("cross_model", {}).get("sharing", [])
    ]


def run_rows(summary: dict) -> list[dict]:
    return [
        {
            "probe": r["probe"],
            "model": r["label"],
            "model revision": short(r["model_revision"]) if r.get("model_revision") else "none recorded",
            "data digest": short(r["data_digest"]) if r.get("data_digest") else "none recorded",
            "verdict read": r["verdict"],
            "facts": r["n_facts"],
            "facts in some runs only": r["n_partial"],
            "run": r["ref"],
        }
        for r in summary.get("runs", [])
    ]


def _intro(summary: dict) -> str:
    probes = ", ".join(p["probe"] for p in summary.get("probes", []))
    models = ", ".join(m["label"] for m in summary.get("models", []))
    cross = summary.get("cross_model", {})
    return (
        f"{len(summary.get('runs', []))} runs: probes {probes} on models {models}. {summary.get('n_facts', 0):,} facts "
        f"probed by every run, over {summary.get('n_relations', 0)} relations; {summary.get('n_partial', 0):,} facts "
        f"probed by some runs only are counted apart (tables/partial_facts.parquet). Known under every probe by every "
        f"model: {cross.get('n_known_everywhere', 0):,} facts. Shares and agreement are relation means with 95% "
        "t-intervals over relations; pooled values are over facts."
    )


def write_page(folder: Path, summary: dict) -> Path:
    """Write `folder`/knowledge_map.html from `summary` and the PNGs under `folder`/figures; returns its path."""
    import html

    figs = {p.stem.replace("_", " "): p.read_bytes() for p in sorted((folder / "figures").glob("*.png"))}
    tables: dict[str, list[dict]] = {
        "Robust shares per model": share_rows(summary),
        "Probe pairs: Cohen's kappa and subsumption eta both ways": pair_rows(summary),
        "Across models: knowledge sharing rate of robust facts (zhao2024 section 6.4)": sharing_rows(summary),
        "Runs: what each probe read": run_rows(summary),
    }
    for m in summary.get("models", []):
        tables[f"{m['label']}: most disputed facts ({m['n_disputed']:,} in all, tables/disputed.parquet)"] = m.get(
            "top_disputed", []
        )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in summary.get("notes", []))
    head = f"<p>{html.escape(_intro(summary))}</p>" + (f"<ul>{notes}</ul>" if notes else "")
    path = folder / "knowledge_map.html"
    atomic_write_text(path, html_page("Knowledge map", [head], figs, tables))
    return path


def format_summary(summary: dict) -> str:
    """The terminal's view of a map: per model its shares and probe pairs, then the cross-model numbers."""
    lines = [_intro(summary), ""]
    for m in summary.get("models", []):
        lines.append(f"{m['label']} ({m['n_facts']:,} facts, {m['shares']['every']['n_relations']} relations):")
        for cat, text in CATEGORY_TEXT.items():
            s = m["shares"][cat]
            lines.append(f"  {text:<24}{with_ci(s['value'], s['ci_low'], s['ci_high']):<28}pooled {_num(s['pooled'])}")
        for p in m.get("pairs", []):
            lines.append(
                f"  {p['probe_a']} / {p['probe_b']}: kappa {_stat(p, 'kappa')}, eta({p['probe_a']}|{p['probe_b']}) "
                f"{_stat(p, 'eta_a_given_b')}, eta({p['probe_b']}|{p['probe_a']}) {_stat(p, 'eta_b_given_a')}"
            )
        lines.append(f"  disputed facts: {m['n_disputed']:,}")
    rows = sharing_rows(summary)
    if rows:
        lines += ["", "knowledge sharing rate of robust facts (row's robust facts the column knows robustly):"]
        lines += [
            f"  {r['robust facts of']} -> {r['known robustly by']}: {r['sharing rate (pooled)']} "
            f"(relation mean {r['relation mean [95% CI]']}; {r['shared']:,} of {r['robust facts']:,})"
            for r in rows
        ]
    return "\n".join(lines + [*summary.get("notes", [])])


__all__ = ["format_summary", "pair_rows", "run_rows", "share_rows", "sharing_rows", "with_ci", "write_page"]
