"""Step: open the MLflow parent run of a pipeline run and return the run context of its steps."""

import json
from datetime import UTC


def run_start(pipeline: str, kfp_run_id: str, trigger: str, tracking_uri: str, params_json: str) -> str:
    """Create the parent run (experiment `factprobe/<pipeline>`), tagged with trigger, KFP run id,
    git sha and a config key (hash of the parameters except the model list, for finding previous
    comparable runs).
    The run fills the MLflow UI's Source column (`mlflow.source.name` `factprobe/pipelines/<pipeline>`,
    type JOB) and Model column (`mlflow.log-model.history`: one entry per model, named by its label).
    Returns the pipeline run's one `RunContext` (tracking/context.py) as JSON, with the parent run
    filled in (none when tracking is off): every later step takes it as its one `context` input. Raises TrackingError if the server is
    unreachable or rejects the credentials. In a local run the id is also recorded for the stop on
    Ctrl-C / SIGTERM (`_common.record_parent_run`)."""
    import hashlib

    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.run import TrackedRun

    from ._common import expand_options, record_parent_run

    ctx = RunContext.start(tracking_uri, pipeline=pipeline, trigger=trigger, kfp_run_id=kfp_run_id)
    if ctx.uri is None:
        return ctx.to_json()
    params = expand_options(json.loads(params_json or "{}"))  # the options JSON, as the parameters it sets
    # The model list is not part of the key: each model's own probe run carries its key (the run
    # config's results key), so adding a model to a sweep changes no other model's key.
    key = hashlib.sha256(json.dumps({k: v for k, v in params.items() if k != "models"}, sort_keys=True).encode()).hexdigest()[:16]
    probes = params.get("probes") if isinstance(params.get("probes"), list) else []
    run = TrackedRun.from_context(
        ctx,
        run_name=f"{pipeline}-{kfp_run_id}",
        required=True,
        child=False,
        headline_family=headline_family(probes),
        headline_greater=headline_greater(probes),
        tags={
            tag("trigger"): trigger,
            tag("kfp_run_id"): kfp_run_id,
            tag("pipeline"): pipeline,
            tag("config_key"): key,
            tag("role"): "parent",
            "mlflow.source.name": f"factprobe/pipelines/{pipeline}",
            "mlflow.source.type": "JOB",
            tag("model"): ",".join(map(model_name, params.get("models", [])))
            if isinstance(params.get("models"), list)
            else str(params.get("models", "")),
        },
    )
    run.open()  # stays RUNNING; the exit handler (finalize step) ends it
    record_parent_run(run.run_id or "", kfp_run_id, pipeline)  # a stopped local run marks it KILLED
    run.log_params(params)
    models = params.get("models") if isinstance(params.get("models"), list) else []
    if models:
        run.set_tags({"mlflow.log-model.history": json.dumps(model_history(run.run_id or "", models))})
    return ctx.with_parent(run.run_id or "").to_json()


def headline_family(probes: list) -> str:
    """The headline family of a pipeline's experiment (its primary metric in the MLflow UI): that of
    the first of the pipeline's `probes` that declares a headline ('' when none does: the default).
    Unknown names are skipped: the plan step refuses them, with the list of known probes."""
    from factprobe.framework.registry import get_probe, probe_names

    known = set(probe_names())
    for name in (str(p) for p in probes if str(p) in known):
        head = get_probe(name).headline_metric
        if head is not None:
            return head.family
    return ""


def headline_greater(probes: list) -> bool:
    """Whether greater is better for the headline `headline_family(probes)` names (the probe's declared
    direction, `Headline.higher_is_better`; True when no probe declares a headline)."""
    from factprobe.framework.registry import get_probe, probe_names

    known = set(probe_names())
    for name in (str(p) for p in probes if str(p) in known):
        head = get_probe(name).headline_metric
        if head is not None:
            return bool(getattr(head, "higher_is_better", True))
    return True


def model_name(model) -> str:
    """A models-list entry as the parent run names it: the model itself, or a settings entry's name (or
    `openai:NAME@ENDPOINT` for a served one), never the mapping's text."""
    if isinstance(model, dict) and model.get("name"):
        from .plan import model_spec

        return model_spec(model)
    return str(model)


def model_history(run_id: str, models: list) -> list[dict]:
    """`mlflow.log-model.history` entries naming each model (what the runs table's Models column
    lists: `artifact_path` and flavors); no model is stored, the names say what was probed."""
    from datetime import datetime

    from factprobe_ops.tracking.probe_logging import model_label

    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return [
        {"run_id": run_id, "artifact_path": model_label(model_name(m)), "utc_time_created": now, "flavors": {"transformers": {}}}
        for m in models
    ]
