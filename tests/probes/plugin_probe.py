"""A tiny extra probe, registered from outside factprobe (tests only): one module, one registration.

`object-logprob`: for each test fact, the summed log-prob of `" " + object` after the subject.
Enabled with `FACTPROBE_PROBE_MODULES=tests.probes.plugin_probe`; the CLI, the components and the
pipelines then offer it without any change to factprobe.
"""

from __future__ import annotations

from dataclasses import dataclass

from factprobe.config import ConfigBase, option
from factprobe.datasets.mc_dataset import load_test_and_train
from factprobe.datasets.prepared import Prepared
from factprobe.framework.base import Probe
from factprobe.framework.registry import register


@dataclass
class ObjectLogprobConfig(ConfigBase):
    object_prefix: str = option(" ", "text between the subject and the object")


class ObjectLogprob(Probe):
    name = "object-logprob"
    description = "summed log-prob of the object after the subject (a test plug-in)"
    config_class = ObjectLogprobConfig
    dataset = "facts"

    def prepare(self, cfg):  # the framework applies --relations and --max-facts-per-relation (issue 42)
        test, train = load_test_and_train(cfg.base)
        items: dict = {}
        for f in test:
            items.setdefault(f.relation, []).append(f)
        return Prepared(kind="facts", items=items, facts={"test": test, "train": train})

    def score_batch(self, session, state, batch):
        from factprobe.lm.scorer import ChoiceRequest

        p = session.cfg.params.object_prefix
        scores = session.scorer.score_choices([ChoiceRequest(f.subject, [p + f.object]) for f in batch])
        return [
            {"key": f.fact_id, "fact_id": f.fact_id, "relation": f.relation, "logprob": float(s[0])}
            for f, s in zip(batch, scores)
        ]

    def metrics(self, rows, prepared, cfg):
        return {"n": len(rows), "mean_logprob": sum(r["logprob"] for r in rows) / len(rows) if rows else None}


register(ObjectLogprob())
