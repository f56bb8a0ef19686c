"""Self-contained HTML and Markdown reports of a multi-model probe run (figures inlined as PNG)."""
from __future__ import annotations

import base64
import html
import io


def figure_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def summary_rows(metrics_by_run: dict[str, dict]) -> list[dict]:
    """One row per (model, probe) run: accuracy with CI, macro accuracy, gold prob mass, n."""
    rows = []
    for name, m in metrics_by_run.items():
        lo, hi = (float("nan") if v is None else v for v in (m.get("accuracy_ci") or [None, None]))
        rows.append({"run": name, "accuracy": m["accuracy"], "ci_low": lo, "ci_high": hi,
                     "macro_accuracy": m.get("macro_accuracy"), "prob_mass": float("nan") if m.get("prob_mass") is None else m["prob_mass"], "n": m["n"]})
    return sorted(rows, key=lambda r: -r["accuracy"])


def markdown_report(metrics_by_run: dict[str, dict], title: str) -> str:
    lines = [f"# {title}", "", "| run | accuracy | 95% CI | macro acc | gold prob | n |", "|---|---|---|---|---|---|"]
    for r in summary_rows(metrics_by_run):
        lines.append(f"| {r['run']} | {r['accuracy']:.3f} | [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
                     f"{(r['macro_accuracy'] or float('nan')):.3f} | {r['prob_mass']:.3f} | {r['n']} |")
    rels = sorted({rel for m in metrics_by_run.values() for rel in m.get("per_relation", {})})
    lines += ["", "| relation | " + " | ".join(metrics_by_run) + " |", "|---|" + "---|" * len(metrics_by_run)]
    for rel in rels:
        cells = [f"{m.get('per_relation', {}).get(rel, {}).get('accuracy', float('nan')):.3f}" for m in metrics_by_run.values()]
        lines.append(f"| {rel} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def html_report(metrics_by_run: dict[str, dict], figures: dict[str, bytes], title: str) -> str:
    imgs = "".join(
        f"<h2>{html.escape(name)}</h2><img alt='{html.escape(name)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'/>"
        for name, png in figures.items()
    )
    rows = "".join(
        f"<tr><td>{html.escape(r['run'])}</td><td>{r['accuracy']:.3f}</td><td>[{r['ci_low']:.3f}, {r['ci_high']:.3f}]</td>"
        f"<td>{(r['macro_accuracy'] or float('nan')):.3f}</td><td>{r['prob_mass']:.3f}</td><td>{r['n']}</td></tr>"
        for r in summary_rows(metrics_by_run)
    )
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}</style>"
            f"</head><body><h1>{html.escape(title)}</h1><table><tr><th>run</th><th>accuracy</th><th>95% CI</th>"
            f"<th>macro acc</th><th>gold prob</th><th>n</th></tr>{rows}</table>{imgs}</body></html>")
