"""Self-contained HTML and Markdown reports across probe runs (figures inlined as PNG).

A page is its title, the summary sections its parts put first (the multiple-choice accuracy
summary, `accuracy_summary_html` / `accuracy_summary_markdown`), every figure, then every table
(`html_table` / `markdown_table`: one column per key, in first-seen order; None shown as `—`).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

_STYLE = "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}</style>"


def figure_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def summary_rows(metrics_by_run: Mapping[str, dict]) -> list[dict]:
    """One row per (model, probe) run: accuracy with CI, macro accuracy, prob_mass (the gold option's probability mass), n."""
    rows = []
    for name, m in metrics_by_run.items():
        lo, hi = (float("nan") if v is None else v for v in (m.get("accuracy_ci") or [None, None]))
        rows.append(
            {
                "run": name,
                "accuracy": m["accuracy"],
                "ci_low": lo,
                "ci_high": hi,
                "macro_accuracy": m.get("macro_accuracy"),
                "prob_mass": float("nan") if m.get("prob_mass") is None else m["prob_mass"],
                "n": m["n"],
            }
        )
    return sorted(rows, key=lambda r: -r["accuracy"])


def accuracy_summary_markdown(metrics_by_run: Mapping[str, dict]) -> str:
    """The accuracy summary (one row per run) and the relation x run accuracy table, in Markdown."""
    lines = ["| run | accuracy | 95% CI | macro acc | prob_mass | n |", "|---|---|---|---|---|---|"]
    for r in summary_rows(metrics_by_run):
        lines.append(
            f"| {r['run']} | {r['accuracy']:.3f} | [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
            f"{(r['macro_accuracy'] or float('nan')):.3f} | {r['prob_mass']:.3f} | {r['n']} |"
        )
    rels = sorted({rel for m in metrics_by_run.values() for rel in m.get("per_relation", {})})
    lines += ["", "| relation | " + " | ".join(metrics_by_run) + " |", "|---|" + "---|" * len(metrics_by_run)]
    for rel in rels:
        cells = [f"{m.get('per_relation', {}).get(rel, {}).get('accuracy', float('nan')):.3f}" for m in metrics_by_run.values()]
        lines.append(f"| {rel} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def accuracy_summary_html(metrics_by_run: Mapping[str, dict]) -> str:
    """The accuracy summary table (one row per run) in HTML."""
    rows = "".join(
        f"<tr><td>{html.escape(r['run'])}</td><td>{r['accuracy']:.3f}</td><td>[{r['ci_low']:.3f}, {r['ci_high']:.3f}]</td>"
        f"<td>{(r['macro_accuracy'] or float('nan')):.3f}</td><td>{r['prob_mass']:.3f}</td><td>{r['n']}</td></tr>"
        for r in summary_rows(metrics_by_run)
    )
    return (
        "<table><tr><th>run</th><th>accuracy</th><th>95% CI</th>"
        f"<th>macro acc</th><th>prob_mass</th><th>n</th></tr>{rows}</table>"
    )


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(c for r in rows for c in r))


def _fmt(v: Any) -> str:
    return "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def markdown_table(rows: Sequence[Mapping[str, Any]], title: str) -> str:
    """`## title` and the rows as a Markdown table; "" for no rows."""
    if not rows:
        return ""
    cols = _columns(rows)
    lines = [f"## {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def html_table(rows: Sequence[Mapping[str, Any]], title: str) -> str:
    """`<h2>title</h2>` and the rows as an HTML table; "" for no rows."""
    if not rows:
        return ""
    cols = _columns(rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"


def html_page(
    title: str, summaries: Sequence[str], figures: Mapping[str, bytes], tables: Mapping[str, Sequence[Mapping[str, Any]]]
) -> str:
    """The whole HTML report: title, summary sections, figures (PNG bytes by title), tables."""
    imgs = "".join(
        f"<h2>{html.escape(name)}</h2><img alt='{html.escape(name)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'/>"
        for name, png in figures.items()
    )
    body = "".join(summaries) + imgs + "".join(html_table(rows, name) for name, rows in tables.items())
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>{_STYLE}"
        f"</head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def markdown_page(title: str, summaries: Sequence[str], tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The whole Markdown report: title, summary sections, tables."""
    return (
        f"# {title}\n\n"
        + "".join(summaries)
        + "".join("\n" + markdown_table(rows, name) for name, rows in tables.items() if rows)
    )
