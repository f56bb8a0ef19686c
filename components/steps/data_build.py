"""Step: build each probe dataset once for every model of a pipeline run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factprobe_ops.tracking.context import RunContext


def run_data_build(out_dir: str, config: dict, probes: list, context: RunContext | str) -> dict:
    """For each dataset kind the `probes` need (probes sharing a kind share one build), prepare the
    items with the first such probe and save them to `out_dir/<kind>/`; log a child run of
    the pipeline run (`context`: its `RunContext`, or that as JSON) with each dataset as `log_input`.
    `probe.prepare` holds the items to the framework's data contract before anything is saved
    (`factprobe.framework.contract`: a broken rule is one line naming the probe and the rule, and
    `relations` and `max_facts_per_relation` are applied for every probe, plug-ins included).

    Returns {"n_items", "n_relations", "digest", "datasets", "dropped"} (counts over all kinds)."""
    from pathlib import Path

    import pandas as pd

    from factprobe.framework.registry import get_probe
    from factprobe.identity import data_digest
    from factprobe_ops.tracking.context import RunContext
    from factprobe_ops.tracking.conventions import tag
    from factprobe_ops.tracking.run import TrackedRun

    from ._common import expand_options, run_config

    by_kind: dict[str, str] = {}
    for name in probes:
        by_kind.setdefault(get_probe(str(name)).dataset or str(name), str(name))
    ctx = RunContext.from_json(context)
    n_items = n_relations = 0
    digest = ""
    dropped: dict[str, str] = {}
    with TrackedRun.from_context(
        ctx, run_name="data-build", required=True, tags={tag("step"): "data-build", tag("source"): str(config.get("source", ""))}
    ) as run:
        for kind, probe_name in by_kind.items():
            cfg = run_config(config, probe=probe_name, model="-")
            prepared = get_probe(probe_name).prepare(cfg)
            prepared.save(Path(out_dir) / kind)
            digest = data_digest(prepared)  # the content digest the probe steps' identities carry
            n_items += prepared.n_items
            n_relations = max(n_relations, len(prepared.items))
            dropped.update(prepared.dropped)
            items = pd.DataFrame(
                [{"fact_id": it.fact_id, "relation": it.relation} for its in prepared.items.values() for it in its]
            )
            run.log_input(items, name=f"{cfg.base.source}-{kind}", source=str(cfg.base.data or cfg.base.source), digest=digest)
            if prepared.dropped:
                run.log_text("\n".join(prepared.dropped.values()), f"{kind}/dropped_relations.txt")
        run.set_tags({tag("dataset_digest"): digest})
        run.log_params(expand_options(config))
        run.log_metrics({"n_items": n_items, "n_relations": n_relations, "n_dropped": len(dropped)})
    return {"n_items": n_items, "n_relations": n_relations, "digest": digest, "datasets": sorted(by_kind), "dropped": dropped}
