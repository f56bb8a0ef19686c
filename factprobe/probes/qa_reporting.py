"""Reporting of the generated-answer probes (QA and counterfactual ICL, yuan2024): their flat
metrics, per-run figures and cross-run report parts. The probe classes (`qa.QAProbe`,
`counterfactual.CounterfactualProbe`) point their hooks here.

- QA: EM per relation across models (`figures/qa_em_per_relation.png`) and the `qa` table (per run,
  its scores over the eval split for its first k and per k asked).
- Counterfactual ICL: Figure 7 across models (EM against k, one line per setting, one panel per
  model, with the zero-shot EM of a QA run of the same model and the regular k0-shot EM as lines),
  the regular vs counterfactual bars (Figure 6), the `counterfactual_icl` table, and
  `em/<probe>/<model>/<setting>/k<k>` metrics; per run `em/<setting>/k<k>` (also f1, contains) and
  EM against k as metric steps of `em_by_k/<setting>` (the MLflow UI's chart of one run's Figure 7).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..framework.reporting import ReportPart, ReportRun, metric_key, number, top_level_metrics


def zero_shot_em(m: Mapping[str, Any]) -> float | None:
    """The evaluation-split zero-shot EM of a QA run with k = 0 among its shots (its top-level
    scores are those of its first k, over the eval split), else None."""
    shots = m.get("shots") or []
    if shots and int(shots[0]) == 0:
        return m.get("em")
    return None


def headline_k(head: str, m: Mapping[str, Any]) -> str:
    """A QA run's terminal line `head` with the k of its numbers: ` at k=<first k used>` (and, when
    more k ran, where the others are); `head` unchanged when it or `shots` is empty."""
    shots = m.get("shots") or []
    if not head or not shots:
        return head
    rest = f" (k={', '.join(map(str, shots[1:]))}: per_shots in metrics.json)" if len(shots) > 1 else ""
    return f"{head} at k={shots[0]}{rest}"


def figure7_text(m: Mapping[str, Any]) -> str | None:
    """A counterfactual run's Figure 7 as a plain-text table: EM per setting (rows) and k asked
    (columns) over the evaluation split, `*` where fewer exemplars fitted than asked (the k used is
    in `shots_note`); None without `figure7` rows."""
    rows = m.get("figure7") or []
    if not rows:
        return None
    ks = sorted({int(r["shots"]) for r in rows})
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    cell = {(r["setting"], int(r["shots"])): r for r in rows}

    def show(r: Mapping[str, Any] | None) -> str:
        if r is None or not number(r.get("em")):
            return "-"
        used = r.get("shots_used")
        return f"{r['em']:.3f}" + ("*" if used is not None and int(used) != int(r["shots"]) else "")

    width = max(len("setting"), *(len(s) for s in settings)) + 2
    ns = {r.get("n") for r in rows if r.get("n") is not None}
    per_cell = f", n = {ns.pop()} per cell" if len(ns) == 1 else ""
    lines = [
        f"Figure 7: EM per setting and k (evaluation split{per_cell})",
        f"{'setting':<{width}}" + "".join(f"{'k=' + str(k):>9}" for k in ks),
    ]
    lines += [f"{s:<{width}}" + "".join(f"{show(cell.get((s, k))):>9}" for k in ks) for s in settings]
    if m.get("shots_note"):
        lines.append(f"* {m['shots_note']}")
    return "\n".join(lines)


def _has_em(m: Mapping[str, Any]) -> bool:
    return m.get("em") is not None and bool(m.get("per_relation"))


def qa_rows(runs: Sequence[ReportRun]) -> list[dict]:
    """The QA table: per QA run, its scores over the eval split for its first k, then per k asked
    (`per_shots`, all asked splits)."""
    rows = []
    for r in runs:
        m = r.metrics
        if not _has_em(m):
            continue
        shots = m.get("shots") or [None]
        rows.append(
            {
                "model": r.label,
                "shots": shots[0],
                "split": "eval",
                "em": m.get("em"),
                "f1": m.get("f1"),
                "contains": m.get("contains"),
                "n": m.get("n"),
            }
        )
        for k, summary in (m.get("per_shots") or {}).items():
            rows.append(
                {
                    "model": r.label,
                    "shots": int(k),
                    "split": "asked",
                    "em": summary.get("em"),
                    "f1": summary.get("f1"),
                    "contains": summary.get("contains"),
                    "n": summary.get("n"),
                }
            )
    return rows


def qa_report(runs: Sequence[ReportRun]) -> ReportPart:
    """EM per relation across models, the `qa` table and every top-level number."""
    from ..report.plots import relation_bars

    part = ReportPart(metrics=top_level_metrics(runs))
    qa = {r.label: r.metrics for r in runs if _has_em(r.metrics)}
    if qa:
        part.figures["QA EM per relation"] = ("qa_em_per_relation", relation_bars(qa, title="QA EM per relation", metric="em"))
    rows = qa_rows(runs)
    if rows:
        part.tables["qa"] = rows
    return part


def settings_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`em/<setting>/k<k>` (also `f1/`, `contains/`) for every counterfactual `settings` entry."""
    out = {}
    for group, entry in (metrics.get("settings") or {}).items():
        setting, _, k = str(group).rpartition("@")
        if not isinstance(entry, dict) or not setting:
            continue
        for name in ("em", "f1", "contains"):
            if number(entry.get(name)):
                out[f"{name}/{metric_key(setting)}/k{metric_key(k)}"] = entry[name]
    return out


def em_by_k(metrics: Mapping[str, Any]) -> dict[int, dict[str, float]]:
    """{k: {`em_by_k/<setting>`: EM}} of a counterfactual run's `figure7` rows."""
    by_k: dict[int, dict[str, float]] = {}
    for row in metrics.get("figure7") or []:
        if number(row.get("em")):
            by_k.setdefault(int(row["shots"]), {})[f"em_by_k/{metric_key(row['setting'])}"] = row["em"]
    return dict(sorted(by_k.items()))


def counterfactual_rows(runs: Sequence[ReportRun], zero: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """The counterfactual ICL table: per model, zero-shot (from a QA run of the model, `zero` by
    model label), regular and counterfactual k0-shot, then every Figure-7 setting and k; columns
    model, setting, shots, shots_used, em, f1, contains, n."""
    rows = []
    for r in runs:
        m = r.metrics
        if not m.get("figure7"):
            continue
        model = r.label
        if model in zero:
            z = zero[model]
            rows.append(
                {
                    "model": model,
                    "setting": "zero-shot",
                    "shots": 0,
                    "shots_used": 0,
                    "em": z.get("em"),
                    "f1": z.get("f1"),
                    "contains": z.get("contains"),
                    "n": z.get("n"),
                }
            )
        for group, summary in (m.get("settings") or {}).items():
            setting, _, k = group.rpartition("@")
            if setting in ("regular", "counterfactual"):
                rows.append(
                    {
                        "model": model,
                        "setting": setting,
                        "shots": int(k),
                        "shots_used": summary.get("shots_used"),
                        "em": summary.get("em"),
                        "f1": summary.get("f1"),
                        "contains": summary.get("contains"),
                        "n": summary.get("n"),
                    }
                )
        for x in m["figure7"]:
            n = x.get("n", (m.get("settings") or {}).get(f"{x['setting']}@{x['shots']}", {}).get("n"))
            rows.append(
                {
                    "model": model,
                    "setting": x["setting"],
                    "shots": int(x["shots"]),
                    "shots_used": x.get("shots_used"),
                    "em": x.get("em"),
                    "f1": x.get("f1"),
                    "contains": x.get("contains"),
                    "n": n,
                }
            )
    return rows


def counterfactual_report(
    runs: Sequence[ReportRun], everything: Sequence[ReportRun], is_zero_shot_source: Callable[[ReportRun], bool]
) -> ReportPart:
    """Figure 7 and Figure 6 across models, the `counterfactual_icl` table, every top-level number
    and `em/<probe>/<model>/<setting>/k<k>`. The zero-shot lines come from the runs of `everything`
    that `is_zero_shot_source` accepts (QA runs) and that asked k = 0 first."""
    from ..report.plots import figure7, regular_vs_counterfactual_bars

    part = ReportPart(metrics=top_level_metrics(runs))
    zero_runs = {
        r.label: r.metrics
        for r in everything
        if is_zero_shot_source(r) and _has_em(r.metrics) and zero_shot_em(r.metrics) is not None
    }
    cf = {r.label: r.metrics for r in runs if r.metrics.get("figure7")}
    if cf:
        zero = {model: zero_shot_em(m) for model, m in zero_runs.items()}
        part.figures["counterfactual ICL: EM against k (Figure 7)"] = ("figure7_em_vs_k", figure7(cf, zero_shot=zero))
        part.figures["regular vs counterfactual exemplars (Figure 6)"] = (
            "figure6_regular_vs_counterfactual",
            regular_vs_counterfactual_bars(cf),
        )
    rows = counterfactual_rows(runs, zero_runs)
    if rows:
        part.tables["counterfactual_icl"] = rows
    for r in runs:
        for x in r.metrics.get("figure7") or []:
            part.metrics[f"em/{r.metric_name}/{x['setting']}/k{x['shots']}"] = x.get("em")
    return part
