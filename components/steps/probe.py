"""Step: run one multiple-choice probe (IC-LKE, EIC-LKE, HGP or MMP) for one model. GPU step."""


def work_dir(work_root: str, key: str):
    """Stable working folder of a probe (so a rerun resumes): `<root>/probe/<key>`."""
    import os
    from pathlib import Path

    from factprobe.paths import cache_root

    root = Path(work_root or os.environ.get("FACTPROBE_WORK") or cache_root() / "work")
    return root / "probe" / key


def run_probe_step(items_dir: str, out_dir: str, model: str, probe: str, examples: int, choices: int, seed: int,
                   parent_run_id: str, tracking_uri: str, work_root: str = "", kfp_run_id: str = "",
                   trigger: str = "local", pipeline: str = "probe") -> dict:
    """Probe `model` on the prepared items in `items_dir`; results go to a stable work folder
    (resumable) and are copied to `out_dir`. Logs a nested child run; tracking is required, so
    an unreachable server fails the step after the results are safely on disk."""
    import shutil
    from pathlib import Path

    from factprobe.probes.config import ProbeConfig
    from factprobe.probes.runner import load_prepared, run_probe
    from tracking.conventions import tag
    from tracking.probe_logging import log_probe_outcome, probe_run

    from ._common import resolve_tracking_uri

    prepared = load_prepared(items_dir)
    import json

    meta = json.loads((Path(items_dir) / "meta.json").read_text())
    data_cfg = json.loads((Path(items_dir) / "data_config.json").read_text())
    data_cfg.update(probe=probe, model=model, examples=int(examples), choices=int(choices), seed=int(seed))
    cfg = ProbeConfig(**data_cfg)
    key = f"{cfg.results_key()}-{meta['digest']}"
    work = work_dir(work_root, key)
    uri = resolve_tracking_uri(tracking_uri)
    # Results first, tracking second: a dead tracking server must not cost the scored facts.
    outcome = run_probe(cfg, work, prepared=prepared, progress=False)
    with probe_run(cfg, uri, enabled=uri is not None and bool(parent_run_id), required=True, trigger=trigger,
                   parent_run_id=parent_run_id, pipeline=pipeline, run_name=f"{probe}-{model}",
                   extra_tags={tag("step"): "probe", tag("kfp_run_id"): kfp_run_id, tag("dataset_digest"): meta["digest"]},
                   step_key=f"{pipeline}/{kfp_run_id}/probe/{key}") as run:
        log_probe_outcome(run, outcome, cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("results.jsonl", "metrics.json", "run_config.json"):
        shutil.copy2(work / name, out / name)
    m = outcome.metrics
    return {"accuracy": m["accuracy"], "prob_mass": m["prob_mass"], "n": m["n"], "model": model, "probe": probe,
            "run_id": run.run_id or "", "scored_now": outcome.n_scored_now, "resumed": outcome.n_resumed}
