"""A plug-in probe whose headline is "lower is better" (tests only): `miss_rate`, the share of missed facts.

`miss-rate`: a fact is a miss (`miss`, its per-fact verdict) when the model gives its object a lower
log-prob after the subject than the object's characters reversed. The headline declares its
direction (`Headline(higher_is_better=False)`), so every gate reads a fact as right when `miss` is
False: a rise of the miss rate is the drop `regress` and the nightly test flag. Enabled with
`FACTPROBE_PROBE_MODULES=tests.probes.miss_rate_probe`; tests/reliability/test_verdict_contract.py
registers it in-process.
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
class MissRateConfig(ConfigBase):
    miss_prefix: str = option(" ", "text between the subject and the object")


class MissRate(Probe):
    name = "miss-rate"
    description = "miss rate: the object loses to its reversed spelling after the subject (a test plug-in)"
    config_class = MissRateConfig
    dataset = "facts"
    headline_metric = Headline("miss_rate", "miss_rate", higher_is_better=False)
    per_fact_columns = ("fact_id", "relation", "subject", "gold", "miss")
    relation_metric = "miss_rate"
    fact_verdict = "miss"

    def prepare(self, cfg):
        test, train = load_test_and_train(cfg.base)
        items: dict = {}
        for f in test:
            items.setdefault(f.relation, []).append(f)
        return Prepared(kind="facts", items=items, facts={"test": test, "train": train})

    def score_batch(self, session, state, batch):
        from factprobe.lm.scorer import ChoiceRequest

        p = session.cfg.params.miss_prefix
        scores = session.scorer.score_choices([ChoiceRequest(f.subject, [p + f.object, p + f.object[::-1]]) for f in batch])
        return [
            {
                "key": f.fact_id,
                "fact_id": f.fact_id,
                "relation": f.relation,
                "subject": f.subject,
                "gold": f.object,
                "miss": bool(s[0] < s[1]),
            }
            for f, s in zip(batch, scores)
        ]

    def metrics(self, rows, prepared, cfg):
        def rate(rs):
            return sum(r["miss"] for r in rs) / len(rs) if rs else None

        rels = sorted({r["relation"] for r in rows})
        return {
            "n": len(rows),
            "miss_rate": rate(rows),
            "per_relation": {
                rel: {"miss_rate": rate([r for r in rows if r["relation"] == rel]), "n": sum(r["relation"] == rel for r in rows)}
                for rel in rels
            },
        }


PROBE = register(MissRate())
