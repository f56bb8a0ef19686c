"""A plug-in probe with a metric no built-in probe has (tests only): `hit_rate`, overall and per relation.

`hit-rate`: a fact is a hit when the model gives its object a higher log-prob after the subject
than the object's characters reversed. The module declares its own reporting (headline, per-fact
columns, per-relation metric, per-fact verdict) and nothing outside it names it: enabled with
`FACTPROBE_PROBE_MODULES=tests.probes.novel_metric_probe`, it runs through `factprobe probe`,
the `probe` pipeline, the report step and `factprobe compare`.
"""

from __future__ import annotations

from dataclasses import dataclass

from factprobe.config import ConfigBase, option
from factprobe.datasets.mc_dataset import load_test_and_train
from factprobe.datasets.prepared import Prepared
from factprobe.framework.base import Probe
from factprobe.framework.registry import register
from factprobe.framework.reporting import Headline


@dataclass
class HitRateConfig(ConfigBase):
    hit_prefix: str = option(" ", "text between the subject and the object")


class HitRate(Probe):
    name = "hit-rate"
    description = "hit rate: the object beats its reversed spelling after the subject (a test plug-in)"
    config_class = HitRateConfig
    dataset = "facts"
    headline_metric = Headline("hit_rate", "hit_rate")
    per_fact_columns = ("fact_id", "relation", "subject", "gold", "hit")
    relation_metric = "hit_rate"
    fact_verdict = "hit"

    def prepare(self, cfg):
        test, train = load_test_and_train(cfg.base)
        items: dict = {}
        for f in test:
            items.setdefault(f.relation, []).append(f)
        return Prepared(kind="facts", items=items, facts={"test": test, "train": train})

    def score_batch(self, session, state, batch):
        from factprobe.lm.scorer import ChoiceRequest

        p = session.cfg.params.hit_prefix
        scores = session.scorer.score_choices([ChoiceRequest(f.subject, [p + f.object, p + f.object[::-1]]) for f in batch])
        return [
            {
                "key": f.fact_id,
                "fact_id": f.fact_id,
                "relation": f.relation,
                "subject": f.subject,
                "gold": f.object,
                "hit": bool(s[0] > s[1]),
            }
            for f, s in zip(batch, scores)
        ]

    def metrics(self, rows, prepared, cfg):
        def rate(rs):
            return sum(r["hit"] for r in rs) / len(rs) if rs else None

        rels = sorted({r["relation"] for r in rows})
        return {
            "n": len(rows),
            "hit_rate": rate(rows),
            "per_relation": {
                rel: {"hit_rate": rate([r for r in rows if r["relation"] == rel]), "n": sum(r["relation"] == rel for r in rows)}
                for rel in rels
            },
        }


PROBE = register(HitRate())
