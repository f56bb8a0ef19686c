"""A plug-in probe whose headline is `win_rate` (tests only; issue 42 item 2): every gate must speak it.

`win-rate`: a fact is a win (`win`, its per-fact verdict) when the model gives its object a higher
log-prob after the subject than the object's characters reversed; the headline `win_rate` is the share
of wins, higher is better. Enabled with `FACTPROBE_PROBE_MODULES=tests.probes.win_rate_probe`;
tests/tracking/test_gate_metric.py registers it in-process.
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
class WinRateConfig(ConfigBase):
    win_prefix: str = option(" ", "text between the subject and the object")


class WinRate(Probe):
    name = "win-rate"
    description = "win rate: the object beats its reversed spelling after the subject (a test plug-in)"
    config_class = WinRateConfig
    dataset = "facts"
    headline_metric = Headline("win_rate", "win_rate")
    per_fact_columns = ("fact_id", "relation", "subject", "gold", "win")
    relation_metric = "win_rate"
    fact_verdict = "win"

    def prepare(self, cfg):
        test, train = load_test_and_train(cfg.base)
        items: dict = {}
        for f in test:
            items.setdefault(f.relation, []).append(f)
        return Prepared(kind="facts", items=items, facts={"test": test, "train": train})

    def score_batch(self, session, state, batch):
        from factprobe.lm.scorer import ChoiceRequest

        p = session.cfg.params.win_prefix
        scores = session.scorer.score_choices([ChoiceRequest(f.subject, [p + f.object, p + f.object[::-1]]) for f in batch])
        return [
            {
                "key": f.fact_id,
                "fact_id": f.fact_id,
                "relation": f.relation,
                "subject": f.subject,
                "gold": f.object,
                "win": bool(s[0] > s[1]),
            }
            for f, s in zip(batch, scores)
        ]

    def metrics(self, rows, prepared, cfg):
        def rate(rs):
            return sum(r["win"] for r in rs) / len(rs) if rs else None

        rels = sorted({r["relation"] for r in rows})
        return {
            "n": len(rows),
            "win_rate": rate(rows),
            "per_relation": {
                rel: {"win_rate": rate([r for r in rows if r["relation"] == rel]), "n": sum(r["relation"] == rel for r in rows)}
                for rel in rels
            },
        }


PROBE = register(WinRate())
