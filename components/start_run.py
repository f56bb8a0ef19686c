"""Step: open the MLflow parent run of a pipeline run and return its id."""

import json

from kfp import dsl

from .config import CPU_IMAGE


def run_start(pipeline: str, kfp_run_id: str, trigger: str, tracking_uri: str, params_json: str) -> str:
    """Create the parent run (experiment `factprobe/<pipeline>`), tagged with trigger, KFP run id,
    git sha and a config key (hash of the parameters, for finding previous comparable runs).
    Returns the run id, or '' when tracking is off. Raises TrackingError if the server is
    unreachable or rejects the credentials."""
    import hashlib

    from tracking.conventions import tag
    from tracking.run import TrackedRun

    from ._common import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if uri is None:
        return ""
    params = json.loads(params_json or "{}")
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    run = TrackedRun(pipeline=pipeline, run_name=f"{pipeline}-{kfp_run_id}", tracking_uri=uri, required=True,
                     tags={tag("trigger"): trigger, tag("kfp_run_id"): kfp_run_id, tag("pipeline"): pipeline,
                           tag("config_key"): key, tag("role"): "parent",
                           tag("model"): ",".join(map(str, params.get("models", []))) if isinstance(params.get("models"), list) else str(params.get("models", ""))})
    run.__enter__()  # stays RUNNING; the exit handler (finalize step) ends it
    run.log_params(params)
    return run.run_id or ""


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def start_run(pipeline: str, kfp_run_id: str, trigger: str, tracking_uri: str, models: list, probes: list,
              source: str, data: str, relations: str, max_facts_per_relation: int, examples: int, choices: int,
              seed: int) -> str:
    """Open the MLflow parent run for this pipeline run (tags: trigger, KFP run id, git sha) and return its id."""
    import json

    from components.start_run import run_start

    params = {"models": models, "probes": probes, "source": source, "data": data, "relations": relations,
              "max_facts_per_relation": int(max_facts_per_relation), "examples": int(examples),
              "choices": int(choices), "seed": int(seed)}
    return run_start(pipeline, kfp_run_id, trigger, tracking_uri, json.dumps(params))
