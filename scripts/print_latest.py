"""After `make run` / `make run-all`: print the main numbers of the latest local pipeline run(s)
from MLflow, and how to open the MLflow UI to compare them.

`python scripts/print_latest.py` prints the latest `probe` pipeline run (what `make run` does);
`--all` prints the latest run of every factprobe pipeline experiment in the store. `--markdown` prints
the summary as the Markdown table that is also the parent run's description in the MLflow UI
(`factprobe_ops.tracking.probe_logging.summary_markdown`: model x probe x headline metric, 95% interval, n)."""

from __future__ import annotations

import argparse

from mlflow.tracking import MlflowClient

HEADLINE = (
    "accuracy",
    "acc",
    "em",
    "f1",
    "contains",
    "coherency",
    "coherency_round1",
    "coherency_round2",
    "correct_round1",
    "correct_round2",
    "known_rate",
)


def describe(r) -> str:
    m = r.data.metrics
    if "accuracy" in m and "accuracy_ci_low" in m:
        return (
            f"accuracy {m['accuracy']:.3f}  (95% CI {m['accuracy_ci_low']:.3f}-"
            f"{m.get('accuracy_ci_high', float('nan')):.3f}, "
            f"n={int(m.get('n', 0))})"
        )
    shown = [f"{k} {m[k]:.3f}" for k in HEADLINE if k in m]
    n = m.get("n", m.get("n_items"))
    return ", ".join(shown) + (f"  (n={int(n)})" if n is not None else "")


def markdown_rows(children) -> list[dict]:
    """Rows for `summary_markdown` from child probe runs carrying a `factprobe.headline` tag."""
    import json

    rows = []
    for r in sorted(children, key=lambda r: (r.data.tags.get("factprobe.model", ""), r.data.tags.get("factprobe.probe", ""))):
        if "factprobe.headline" in r.data.tags:
            rows.append(
                {
                    "model": r.data.tags.get("factprobe.model", ""),
                    "probe": r.data.tags.get("factprobe.probe", ""),
                    "headline": json.loads(r.data.tags["factprobe.headline"]),
                }
            )
    return rows


def print_latest(client: MlflowClient, experiment: str, markdown: bool = False) -> bool:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return False
    parents = client.search_runs(
        [exp.experiment_id],
        filter_string="tags.`factprobe.role` = 'parent'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not parents:
        return False
    parent = parents[0]
    children = client.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    print(
        f"\n{experiment}: pipeline run {parent.data.tags.get('factprobe.kfp_run_id')} ({parent.info.status}), "
        f"MLflow parent run {parent.info.run_id} (experiment {exp.experiment_id})"
    )
    if markdown and markdown_rows(children):
        from factprobe_ops.tracking.probe_logging import summary_markdown

        print(summary_markdown(markdown_rows(children)))
        return True
    for r in sorted(children, key=lambda r: (r.data.tags.get("factprobe.model", ""), r.info.start_time)):
        probe = r.data.tags.get("factprobe.probe")
        if probe:
            print(f"  {r.data.tags.get('factprobe.model', ''):<24} {probe:<15} {describe(r)}")
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="every factprobe pipeline experiment, not only factprobe/probe")
    ap.add_argument("--markdown", action="store_true", help="the summary as a Markdown table (the parent run's description)")
    args = ap.parse_args()
    from factprobe_ops.tracking.conventions import resolve_tracking_uri

    uri = resolve_tracking_uri()
    client = MlflowClient(uri)
    names = (
        ["factprobe/probe"]
        if not args.all
        else sorted(e.name for e in client.search_experiments() if e.name.startswith("factprobe/"))
    )
    found = [name for name in names if print_latest(client, name, args.markdown)]
    if not found:
        raise SystemExit(f"no finished factprobe pipeline run at {uri}")
    exp = client.get_experiment_by_name(found[0])
    page = f"#/experiments/{exp.experiment_id}/runs" if exp else ""
    # MLflow 3.17 takes the experiment page's kind from its app-wide GenAI / Machine learning switch (the URL's
    # workflowType, else the browser's last choice), not from the experiment's mlflow.experimentKind tag
    print(
        f"\nCompare them in the MLflow UI:\n  .venv/bin/mlflow ui --backend-store-uri {uri} --port 5000\n"
        f"  then open http://127.0.0.1:5000/{page}?workflowType=machine_learning"
    )


if __name__ == "__main__":
    main()
