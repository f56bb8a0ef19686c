"""After `make run`: print each model's accuracy from the latest local probe pipeline run, and how
to open the MLflow UI to compare them."""
from __future__ import annotations

import os
from pathlib import Path

from mlflow.tracking import MlflowClient

uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlruns.db'}"
client = MlflowClient(uri)
exp = client.get_experiment_by_name("factprobe/probe")
if exp is None:
    raise SystemExit(f"no factprobe/probe experiment at {uri}")
parent = client.search_runs([exp.experiment_id], filter_string="tags.`factprobe.role` = 'parent'",
                            order_by=["attributes.start_time DESC"], max_results=1)[0]
children = client.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
print(f"\npipeline run {parent.data.tags.get('factprobe.kfp_run_id')} ({parent.info.status}), MLflow parent run {parent.info.run_id}")
for r in sorted(children, key=lambda r: r.data.tags.get("factprobe.model", "")):
    if "acc" in r.data.metrics:
        m = r.data.metrics
        print(f"  {r.data.tags.get('factprobe.model'):<24} {r.data.tags.get('factprobe.probe'):<8} "
              f"accuracy {m['acc']:.3f}  (95% CI {m.get('acc_ci_low', float('nan')):.3f}-{m.get('acc_ci_high', float('nan')):.3f}, n={int(m['n'])})")
print(f"\nCompare them in the MLflow UI:\n  .venv/bin/mlflow ui --backend-store-uri {uri} --port 5000\n"
      f"  then open http://127.0.0.1:5000/#/experiments/{exp.experiment_id}")
