"""Reporting of the generated-answer probes (QA and counterfactual ICL, yuan2024): their flat
metrics, per-run figures and cross-run report parts. The probe classes (`qa.QAProbe`,
`counterfactual.CounterfactualProbe`) point their hooks here.

- QA: EM per relation across models (`figures/qa_em_per_relation.png`) and the `qa` table (per run,
  its scores over the eval split for its first k and per k asked). After a run the screen shows
  EM, F1 and Contains at every k with their 95% intervals (`shots_text`); MLflow gets the intervals
  as `em_ci_low` / `em_ci_high` and `em_ci_low/shots/<k>` (also f1, contains; `ci_flat`).
- Both: every score summary (`metrics.qa.summarize_qa`) carries `em_ci`, `f1_ci`, `contains_ci`, the
  95% percentile bootstrap over the questions, as the multiple-choice probes' `accuracy_ci`.
- Counterfactual ICL: Figure 7 across models (EM against k, one line per setting, one panel per
  model, with the zero-shot EM of a QA run of the same model and the regular k0-shot EM as lines),
  the regular vs counterfactual bars (Figure 6), the `counterfactual_icl` table, and
  `em/<probe>/<model>/<setting>/k<k>` metrics; per run `em/<setting>/k<k>` (also f1, contains) with
  `em_ci_low/<setting>/k<k>` and `em_ci_high/...`, and EM against k as metric steps of
  `em_by_k/<setting>` (the MLflow UI's chart of one run's Figure 7). The screen shows Figure 7 and
  every setting and k with its three scores and their intervals (`figure7_text`, `intervals_text`).
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
    rest = f" (k={', '.join(map(str, shots[1:]))}: in the table above)" if len(shots) > 1 else ""
    return f"{head} at k={shots[0]}{rest}"


SCORES = (("em", "EM"), ("f1", "F1"), ("contains", "Contains"))


def with_ci(value: Any, ci: Any) -> str:
    """`0.500 [0.250, 0.750]`: a score and its 95% interval (`-` for none, the score alone without one)."""
    if not number(value):
        return "-"
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(number(v) for v in ci):
        return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
    return f"{value:.3f}"


def _scores_line(lead: str, entry: Mapping[str, Any]) -> str:
    return lead + "".join(f"{with_ci(entry.get(k), entry.get(f'{k}_ci')):>24}" for k, _ in SCORES)


def _scores_header(lead: str) -> str:
    return lead + "".join(f"{f'{title} [95% CI]':>24}" for _, title in SCORES)


def shots_text(m: Mapping[str, Any]) -> str | None:
    """A QA run's scores at EVERY k it ran, each with its 95% interval over the questions: one line
    per k (the k used; `per_shots` when several k ran, the top-level scores for one k); None
    without scores."""
    shots = m.get("shots") or []
    per = m.get("per_shots") or ({str(shots[0]): m} if shots and number(m.get("em")) else {})
    if not per:
        return None
    split = "every asked split" if m.get("per_split") else "evaluation split"
    lines = [
        f"QA scores per k ({split}; 95% bootstrap intervals over the questions)",
        _scores_header(f"{'k':<8}{'n':>6}"),
    ]
    lines += [_scores_line(f"{k:<8}{e.get('n', ''):>6}", e) for k, e in per.items() if isinstance(e, Mapping)]
    if m.get("shots_note"):
        lines.append(m["shots_note"])
    return "\n".join(lines)


def ci_columns(entry: Mapping[str, Any]) -> dict[str, float | None]:
    """`em_ci_low`, `em_ci_high` (also f1, contains) of a score summary, for the report tables (None
    where it has no interval)."""
    out: dict[str, float | None] = {}
    for name, _ in SCORES:
        ci = entry.get(f"{name}_ci")
        ok = isinstance(ci, (list, tuple)) and len(ci) == 2
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = (ci[0], ci[1]) if ok else (None, None)
    return out


def ci_flat(m: Mapping[str, Any]) -> dict[str, float]:
    """`<score>_ci_low` / `<score>_ci_high` of the top-level scores and `<score>_ci_low/shots/<k>` (and
    high) of every `per_shots` entry: the intervals as MLflow metrics (lists are not metrics)."""
    out: dict[str, float] = {}
    for suffix, entry in (("", m), *((f"/shots/{metric_key(k)}", e) for k, e in (m.get("per_shots") or {}).items())):
        for name, _ in SCORES:
            ci = entry.get(f"{name}_ci") if isinstance(entry, Mapping) else None
            if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(number(v) for v in ci):
                out[f"{name}_ci_low{suffix}"], out[f"{name}_ci_high{suffix}"] = ci
    return out


def intervals_text(m: Mapping[str, Any]) -> str | None:
    """A counterfactual run's EM, F1 and Contains with their 95% intervals per setting and k (the
    regular and counterfactual k0 settings, then Figure 7's); None without `settings`."""
    settings = m.get("settings") or {}
    if not settings:
        return None
    width = max(len("setting"), *(len(str(g).rpartition("@")[0]) for g in settings)) + 2
    lines = [
        "95% intervals per setting and k: bootstrap over the questions; a setting asked with several exemplar "
        "draws: crossed t-interval over draws x questions",
        _scores_header(f"{'setting':<{width}}{'k':>4}{'n':>6}"),
    ]
    for group, e in settings.items():
        setting, _, k = str(group).rpartition("@")
        if isinstance(e, Mapping):
            lines.append(_scores_line(f"{setting:<{width}}{k:>4}{e.get('n', ''):>6}", e))
    return "\n".join(lines)


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
    ci = intervals_text(m)
    return "\n".join(lines + (["", ci] if ci else []))


def _has_em(m: Mapping[str, Any]) -> bool:
    return m.get("em") is not None and bool(m.get("per_relation"))


def qa_rows(runs: Sequence[ReportRun]) -> list[dict]:
    """The QA table: per QA run, its scores over the eval split for its first k, then per k asked
    (`per_shots`, all asked splits), each with its 95% intervals (`ci_columns`)."""
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
                **ci_columns(m),
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
                    **ci_columns(summary),
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
    """`em/<setting>/k<k>` (also `f1/`, `contains/`) for every counterfactual `settings` entry, and its
    95% interval as `em_ci_low/<setting>/k<k>` and `em_ci_high/...` (also f1, contains)."""
    out = {}
    for group, entry in (metrics.get("settings") or {}).items():
        setting, _, k = str(group).rpartition("@")
        if not isinstance(entry, dict) or not setting:
            continue
        for name in ("em", "f1", "contains"):
            if number(entry.get(name)):
                out[f"{name}/{metric_key(setting)}/k{metric_key(k)}"] = entry[name]
            ci = entry.get(f"{name}_ci")
            if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(number(v) for v in ci):
                out[f"{name}_ci_low/{metric_key(setting)}/k{metric_key(k)}"] = ci[0]
                out[f"{name}_ci_high/{metric_key(setting)}/k{metric_key(k)}"] = ci[1]
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
    model, setting, shots, shots_used, em, f1, contains, n and the intervals (`ci_columns`)."""
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
                    **ci_columns(z),
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
                        **ci_columns(summary),
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
                    **ci_columns(x),
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
