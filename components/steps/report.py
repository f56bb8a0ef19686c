"""Step: aggregate all (model, probe) results into figures, tables and an HTML + Markdown report.

What each kind of result adds (recognised by its metrics, so any probe with the same metrics fits):
- multiple choice (`accuracy` + `per_relation`): the model x relation accuracy heatmap and
  per-relation bars, the summary table, `acc/<probe>/<model>[/<relation>]` metrics;
- counterfactual ICL (`figure7`): Figure 7 across models (EM against k, one line per setting, one
  panel per model, with the zero-shot EM of a QA run of the same model and the regular k0-shot EM
  as lines), the regular vs counterfactual bars (Figure 6) and the `counterfactual_icl` table;
- QA (`em` + `per_relation`, no `figure7`): EM per relation and the `qa` table;
- coherency (`coherency_round1`): per-relation / per-cardinality bars and the `coherency` table.
Every run's top-level numbers go to the parent run as `<metric>/<probe>/<model>`.
"""
from pathlib import Path


def load_failures(dirs: list[str]) -> list[dict]:
    """[{"model", "probe", "error"}] of the probe output folders a tolerant probe step marked failed
    (`failed.json`, components/steps/probe.py)."""
    import json

    return [json.loads((Path(d) / "failed.json").read_text()) for d in dirs if (Path(d) / "failed.json").exists()]


def load_results(dirs: list[str]) -> dict[str, dict]:
    """{"<probe>:<model>": metrics} from probe output folders (metrics.json + run_config.json);
    folders of failed probe steps (`load_failures`) are left out."""
    import json
    from pathlib import Path

    out = {}
    for d in dirs:
        if (Path(d) / "failed.json").exists():
            continue
        cfg = json.loads((Path(d) / "run_config.json").read_text())["config"]
        out[f"{cfg['probe']}:{cfg['model']}"] = json.loads((Path(d) / "metrics.json").read_text())
    return out


def metric_safe(run_name: str) -> str:
    """`<probe>:<model>` as part of an MLflow metric name: `<probe>/<model>`, a model path reduced
    to its folder name (MLflow refuses names that resolve like other paths, e.g. with `//`)."""
    probe, _, model = run_name.partition(":")
    if "/" in model and (model.startswith(("/", ".", "~")) or Path(model).expanduser().exists()):
        model = Path(model).name
    return f"{probe}/{model}"


def _model(run_name: str) -> str:
    return metric_safe(run_name).partition("/")[2]


def _is_mc(m: dict) -> bool:
    return m.get("accuracy") is not None and bool(m.get("per_relation"))


def _is_counterfactual(m: dict) -> bool:
    return bool(m.get("figure7"))


def _is_coherency(m: dict) -> bool:
    return "coherency_round1" in m and "per_relation" in m


def _is_qa(m: dict) -> bool:
    return m.get("em") is not None and bool(m.get("per_relation")) and not _is_counterfactual(m)


def zero_shot_em(m: dict) -> float | None:
    """The evaluation-split zero-shot EM of a QA run with k = 0 among its shots (its top-level
    scores are those of its first k, over the eval split), else None."""
    shots = m.get("shots") or []
    if shots and int(shots[0]) == 0:
        return m.get("em")
    return None


def counterfactual_rows(everything: dict[str, dict]) -> list[dict]:
    """The counterfactual ICL table: per model, zero-shot (from a QA run of the model), regular and
    counterfactual k0-shot, then every Figure-7 setting and k; columns model, setting, shots,
    shots_used, em, f1, contains, n."""
    zero = {_model(name): m for name, m in everything.items() if _is_qa(m) and zero_shot_em(m) is not None}
    rows = []
    for name, m in everything.items():
        if not _is_counterfactual(m):
            continue
        model = _model(name)
        if model in zero:
            z = zero[model]
            rows.append({"model": model, "setting": "zero-shot", "shots": 0, "shots_used": 0, "em": z.get("em"),
                         "f1": z.get("f1"), "contains": z.get("contains"), "n": z.get("n")})
        for group, summary in (m.get("settings") or {}).items():
            setting, _, k = group.rpartition("@")
            if setting in ("regular", "counterfactual"):
                rows.append({"model": model, "setting": setting, "shots": int(k), "shots_used": summary.get("shots_used"),
                             "em": summary.get("em"), "f1": summary.get("f1"), "contains": summary.get("contains"),
                             "n": summary.get("n")})
        for r in m["figure7"]:
            n = r.get("n", (m.get("settings") or {}).get(f"{r['setting']}@{r['shots']}", {}).get("n"))
            rows.append({"model": model, "setting": r["setting"], "shots": int(r["shots"]), "shots_used": r.get("shots_used"),
                         "em": r.get("em"), "f1": r.get("f1"), "contains": r.get("contains"), "n": n})
    return rows


def coherency_rows(everything: dict[str, dict]) -> list[dict]:
    """The coherency table: per model, overall then per relation then per cardinality."""
    keys = ("coherency", "coherency_round1", "coherency_round2", "correct_round1", "correct_round2", "n_items")
    rows = []
    for name, m in everything.items():
        if not _is_coherency(m):
            continue
        model = _model(name)
        rows.append({"model": model, "group": "overall", "key": "*", **{k: m.get(k) for k in keys}})
        for group, table in (("relation", m.get("per_relation") or {}), ("cardinality", m.get("per_cardinality") or {})):
            for key, entry in table.items():
                if group == "cardinality" and not entry.get("n_items"):
                    continue
                rows.append({"model": model, "group": group, "key": key, **{k: entry.get(k) for k in keys}})
    return rows


def qa_rows(everything: dict[str, dict]) -> list[dict]:
    """The QA table: per QA run, its scores per k asked (`per_shots`, all asked splits) and over the
    eval split for its first k."""
    rows = []
    for name, m in everything.items():
        if not _is_qa(m):
            continue
        model = _model(name)
        shots = m.get("shots") or [None]
        rows.append({"model": model, "shots": shots[0], "split": "eval", "em": m.get("em"), "f1": m.get("f1"),
                     "contains": m.get("contains"), "n": m.get("n")})
        for k, summary in (m.get("per_shots") or {}).items():
            rows.append({"model": model, "shots": int(k), "split": "asked", "em": summary.get("em"), "f1": summary.get("f1"),
                         "contains": summary.get("contains"), "n": summary.get("n")})
    return rows


def _markdown_table(rows: list[dict], title: str) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    fmt = lambda v: "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = [f"## {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _html_table(rows: list[dict], title: str) -> str:
    import html

    if not rows:
        return ""
    cols = list(rows[0])
    fmt = lambda v: "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"


def run_report(result_dirs: list[str], html_path: str, md_path: str, parent_run_id: str, tracking_uri: str,
               pipeline: str = "probe") -> dict[str, dict]:
    """Write the HTML and Markdown reports; log figures, tables and per-run metrics to the parent
    run (see the module docstring for what each kind of result adds). Returns the metrics by run name."""

    from pathlib import Path

    import matplotlib.pyplot as plt
    import pandas as pd

    from factprobe.io import atomic_write_text
    from factprobe.report.html import figure_png, html_report, markdown_report, summary_rows
    from factprobe.report.plots import accuracy_heatmap, coherency_bars, figure7, regular_vs_counterfactual_bars, relation_bars
    from tracking.run import TrackedRun

    from ._common import resolve_tracking_uri

    everything = load_results(result_dirs)
    # The heatmap, bars and summary table cover the runs with per-relation accuracy (multiple-choice
    # probes); the other kinds add their own figures and tables; every run's scalars are logged below.
    metrics = {k: m for k, m in everything.items() if _is_mc(m)}
    cf = {_model(k): m for k, m in everything.items() if _is_counterfactual(m)}
    coh = {_model(k): m for k, m in everything.items() if _is_coherency(m)}
    qa = {_model(k): m for k, m in everything.items() if _is_qa(m)}
    figs: dict[str, tuple[str, object]] = {}  # title -> (artifact file, figure)
    if metrics or not (cf or coh or qa):
        figs["accuracy heatmap (model x relation)"] = ("figures/accuracy_heatmap.png", accuracy_heatmap(metrics))
        figs["per-relation accuracy"] = ("figures/per_relation_accuracy.png", relation_bars(metrics))
    if cf:
        zero = {model: zero_shot_em(m) for model, m in qa.items() if zero_shot_em(m) is not None}
        figs["counterfactual ICL: EM against k (Figure 7)"] = ("figures/figure7_em_vs_k.png", figure7(cf, zero_shot=zero))
        figs["regular vs counterfactual exemplars (Figure 6)"] = (
            "figures/figure6_regular_vs_counterfactual.png", regular_vs_counterfactual_bars(cf))
    if qa:
        figs["QA EM per relation"] = ("figures/qa_em_per_relation.png", relation_bars(qa, title="QA EM per relation", metric="em"))
    if coh:
        figs["coherency per relation and cardinality"] = ("figures/coherency.png", coherency_bars(coh))
    failures = load_failures(result_dirs)  # named in the report and tagged; the others are reported as usual
    tables = {"counterfactual_icl": counterfactual_rows(everything), "qa": qa_rows(everything),
              "coherency": coherency_rows(everything), "failed": failures}
    tables = {k: v for k, v in tables.items() if v}
    title = f"factprobe {pipeline}: {len(everything)} run(s)"
    page = html_report(metrics, {t: figure_png(f) for t, (_, f) in figs.items()}, title)
    extra = "".join(_html_table(rows, name) for name, rows in tables.items())
    atomic_write_text(html_path, page.replace("</body>", extra + "</body>", 1) if extra else page)
    atomic_write_text(md_path, markdown_report(metrics, title) + "".join(
        "\n" + _markdown_table(rows, name) for name, rows in tables.items()))
    uri = resolve_tracking_uri(tracking_uri)
    if uri is not None and parent_run_id:
        run = TrackedRun(pipeline=pipeline, tracking_uri=uri, required=True, run_id=parent_run_id)
        run.__enter__()
        for artifact, fig in figs.values():
            run.log_figure(fig, artifact)
        if metrics or not tables:
            run.log_table(pd.DataFrame(summary_rows(metrics)), "tables/summary.json")
        for name, rows in tables.items():
            run.log_table(pd.DataFrame(rows), f"tables/{name}.json")
        if failures:
            run.set_tags({"factprobe.failed_models": ", ".join(sorted({f"{f['probe']}:{f['model']}" for f in failures}))[:5000]})
        run.log_text(__import__("json").dumps(everything, indent=1, default=float), "summary/summary.json")
        run.log_text(Path(html_path).read_text(), "report/report.html")  # .html: the MLflow UI renders it
        flat = {f"{k}/{metric_safe(name)}": v for name, m in everything.items() if name not in metrics
                for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for name, m in metrics.items():
            safe = metric_safe(name)
            flat[f"acc/{safe}"] = m["accuracy"]
            for rel, r in m.get("per_relation", {}).items():
                flat[f"acc/{safe}/{rel}"] = r["accuracy"]
        for name, m in everything.items():
            if _is_counterfactual(m):
                for r in m["figure7"]:
                    flat[f"em/{metric_safe(name)}/{r['setting']}/k{r['shots']}"] = r.get("em")
        run.log_metrics(flat)
    plt.close("all")
    return everything
