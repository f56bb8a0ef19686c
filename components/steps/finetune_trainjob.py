"""Step: one setting fine-tuned on several GPU nodes through a Kubeflow Trainer TrainJob
(components/steps/trainjob_manifest.py builds and validates it). CPU step with the PVC mounted.

Always writes the manifest (YAML) to its artifact, so a cluster without Kubeflow Trainer (or a
reviewer) gets the exact object to `kubectl apply -f`. With `submit`, it creates the TrainJob in
`namespace` (the step's service account needs `create`/`get` on `trainjobs.trainer.kubeflow.org`),
waits until it succeeds or fails, and copies the adapter the job wrote to the PVC into its output
(the same folder layout as the single-node step: `train_out_dir`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext

#: how long a TrainJob may run before the step gives up (the job keeps its checkpoints)
WAIT_S = 24 * 3600


def trainjob_name(kfp_run_id: str, setting: str) -> str:
    """A DNS-1035 name, unique per pipeline run and setting: `ft-<setting>-<run id prefix>`."""
    import re

    run = re.sub(r"[^a-z0-9]", "", (kfp_run_id or "local").lower())[:12] or "local"
    return f"ft-{setting}-{run}"[:63].rstrip("-")


def run_trainjob_step(
    table_path: str,
    manifest_path: str,
    adapter_dir: str,
    model: str,
    setting: str,
    ft: dict,
    num_nodes: int,
    submit: bool,
    namespace: str,
    context: RunContext | str,
    work_root: str = "",
) -> dict:
    """Build, validate and write the TrainJob of `setting` (`num_nodes` nodes); with `submit`,
    create it, wait and copy its adapter to `adapter_dir`. `context` (the pipeline run's
    `RunContext` or its JSON) names the KFP run (job name, folders), the trigger and the tracking
    server the nodes log to (a server URI only, not a local store). Returns {"name", "submitted", "out"}."""
    import shutil

    import yaml

    from factprobe_ops.components.config import cluster_config
    from factprobe_ops.tracking.context import RunContext

    from .finetune import finetune_config, smoke_banner, table_or_none, train_out_dir
    from .trainjob_manifest import submit_trainjob, trainjob_manifest, validate_trainjob

    ctx = RunContext.from_json(context)
    kfp_run_id, trigger, tracking_uri = ctx.kfp_run_id, ctx.trigger, ctx.tracking_uri
    table = table_or_none(table_path)
    if table is not None and submit:
        # the nodes read the table from the PVC, not from this pod's artifact folder
        shared = train_out_dir(work_root, kfp_run_id, model, setting, "table")
        shared.mkdir(parents=True, exist_ok=True)
        shutil.copy2(table, shared / "known_unknown.parquet")
        table = str(shared / "known_unknown.parquet")
    fingerprint = finetune_config(ft, model, setting, table, "-").fingerprint_digest()
    out = train_out_dir(work_root, kfp_run_id, model, setting, fingerprint)
    cfg = finetune_config(ft, model, setting, table, str(out))
    name = trainjob_name(kfp_run_id, setting)
    manifest = trainjob_manifest(
        name,
        cfg.to_dict(),
        cluster_config(),
        num_nodes=int(num_nodes),
        tracking_uri=tracking_uri if "://" in tracking_uri else "",
        labels={"factprobe.io/setting": setting},
    )
    validate_trainjob(manifest)
    Path(manifest_path).parent.mkdir(parents=True, exist_ok=True)
    Path(manifest_path).write_text(yaml.safe_dump(manifest, sort_keys=False))
    print(smoke_banner(ft, trigger), flush=True)
    print(f"TrainJob {name}: {num_nodes} node(s), manifest written to {manifest_path}", flush=True)
    Path(adapter_dir).mkdir(parents=True, exist_ok=True)
    if not submit:
        (Path(adapter_dir) / "NOT_TRAINED.txt").write_text(
            f"submit=false: the TrainJob {name} was written, not created; kubectl apply -f the manifest\n"
        )
        return {"name": name, "submitted": False, "out": str(out)}
    submit_trainjob(manifest, namespace)
    _wait(name, namespace)
    weights = out / "adapter" if (out / "adapter").is_dir() else out / "model"
    shutil.rmtree(adapter_dir, ignore_errors=True)
    shutil.copytree(weights, adapter_dir)
    return {"name": name, "submitted": True, "out": str(out)}


def _wait(name: str, namespace: str, poll_s: float = 30.0) -> None:
    """Until the TrainJob's last condition is Complete (return) or Failed (RuntimeError)."""
    import time

    from kubeflow.trainer.constants import constants
    from kubernetes import client

    api = client.CustomObjectsApi()
    start = time.monotonic()
    while time.monotonic() - start < WAIT_S:
        job = api.get_namespaced_custom_object(constants.GROUP, constants.VERSION, namespace, constants.TRAINJOB_PLURAL, name)
        conditions = {c["type"]: c for c in (job.get("status") or {}).get("conditions", []) if c.get("status") == "True"}
        if "Failed" in conditions:
            raise RuntimeError(f"TrainJob {namespace}/{name} failed: {conditions['Failed'].get('message', '')}")
        if "Complete" in conditions:
            return
        time.sleep(poll_s)
    raise TimeoutError(f"TrainJob {namespace}/{name} still running after {WAIT_S} s")
