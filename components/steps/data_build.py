"""Step: build the multiple-choice dataset once for every model and probe of a pipeline run."""


def data_config(source: str, data: str, train_data: str, relations: str, max_facts_per_relation: int,
                examples: int, choices: int, seed: int):
    """A ProbeConfig holding the data-deciding fields (the probe/model fields are placeholders)."""
    from factprobe.probes.config import ProbeConfig

    from ._common import optional

    return ProbeConfig(source=source, data=optional(data), train_data=optional(train_data), relations=optional(relations),
                       max_facts_per_relation=int(max_facts_per_relation) or None, examples=int(examples),
                       choices=int(choices), seed=int(seed))


def run_data_build(out_dir: str, source: str, data: str, train_data: str, relations: str, max_facts_per_relation: int,
                   examples: int, choices: int, seed: int, parent_run_id: str, tracking_uri: str) -> dict:
    """Prepare items (factprobe.probes.runner.prepare_data), save them to `out_dir`, log a child
    run with the dataset as `log_input`. Returns {"n_items", "n_relations", "digest", "dropped"}."""
    import pandas as pd

    from factprobe.probes.runner import prepare_data, save_prepared
    from tracking.conventions import tag
    from tracking.run import TrackedRun

    from ._common import resolve_tracking_uri

    cfg = data_config(source, data, train_data, relations, max_facts_per_relation, examples, choices, seed)
    uri = resolve_tracking_uri(tracking_uri)
    with TrackedRun(pipeline="probe", run_name="data-build", tracking_uri=uri, parent_run_id=parent_run_id,
                    required=True, enabled=uri is not None and bool(parent_run_id),
                    tags={tag("step"): "data-build", tag("source"): source}) as run:
        prepared = prepare_data(cfg)
        save_prepared(prepared, out_dir)
        from factprobe.io import atomic_write_json

        atomic_write_json(f"{out_dir}/data_config.json", cfg.to_dict())
        digest = prepared.test.digest()
        run.set_tags({tag("dataset_digest"): digest})
        run.log_params({"source": source, "data": data, "relations": relations, "choices": choices, "seed": seed,
                        "max_facts_per_relation": max_facts_per_relation})
        run.log_metrics({"n_items": prepared.n_items, "n_relations": len(prepared.items), "n_dropped": len(prepared.dropped)})
        items = pd.DataFrame([{"fact_id": it.fact_id, "relation": it.relation, "subject": it.subject, "gold": it.gold}
                              for its in prepared.items.values() for it in its])
        run.log_input(items, name=f"{source}-mc{choices}", source=str(data or source), digest=digest)
        if prepared.dropped:
            run.log_text("\n".join(f"{r}: {w}" for r, w in prepared.dropped.items()), "dropped_relations.txt")
    return {"n_items": prepared.n_items, "n_relations": len(prepared.items), "digest": digest, "dropped": prepared.dropped}
