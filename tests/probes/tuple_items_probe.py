"""A plug-in that breaks the data contract (tests only): its items are plain tuples.

`tuple-items`: (relation, subject, object) tuples with their own `item_keys`, so that before the
framework checked the contract it ran on the CLI and failed only when a pipeline's data-build step
saved the items (`AttributeError: 'tuple' object has no attribute 'to_dict'`; issue 42 item 1).
Enabled with `FACTPROBE_PROBE_MODULES=tests.probes.tuple_items_probe`.
"""

from __future__ import annotations

from dataclasses import dataclass

from factprobe.config import ConfigBase
from factprobe.datasets.mc_dataset import load_test_and_train
from factprobe.datasets.prepared import Prepared
from factprobe.framework.base import Probe
from factprobe.framework.registry import register


@dataclass
class TupleItemsConfig(ConfigBase):
    pass


class TupleItems(Probe):
    name = "tuple-items"
    description = "the object's log-prob, with plain tuple items (breaks the data contract)"
    config_class = TupleItemsConfig
    dataset = "tuple-items"

    def prepare(self, cfg):
        test, train = load_test_and_train(cfg.base)
        items: dict = {}
        for f in test:
            items.setdefault(f.relation, []).append((f.relation, f.subject, f.object))
        return Prepared(kind="tuple-items", items=items, facts={"test": test, "train": train})

    def item_keys(self, cfg, prepared, item):
        return ["|".join(item)]

    def score_batch(self, session, state, batch):
        from factprobe.lm.scorer import ChoiceRequest

        scores = session.scorer.score_choices([ChoiceRequest(s, [" " + o]) for _, s, o in batch])
        return [{"key": "|".join(t), "relation": t[0], "logprob": float(s[0])} for t, s in zip(batch, scores)]

    def metrics(self, rows, prepared, cfg):
        return {"n": len(rows)}


PROBE = register(TupleItems())
