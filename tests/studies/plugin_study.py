"""A small extra study, registered from outside factprobe (tests, and the example of docs/extending.md).

`prefix-gain`: for each test fact, how much a prefix before the subject (`--prefix "Fact:"`) raises the
log-probability of `" " + object` after the subject; the headline is the mean gain (higher is better).
Enabled with `FACTPROBE_STUDY_MODULES=tests.studies.plugin_study` (or a `factprobe.studies` entry point):
`factprobe study prefix-gain`, MLflow tracking and the generic `study` pipeline then offer it without any
change to factprobe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from factprobe.config import ConfigBase, option
from factprobe.io import atomic_write_jsonl
from factprobe.studies.base import Study, StudyContext, StudyHeadline
from factprobe.studies.registry import register


@dataclass
class PrefixGainConfig(ConfigBase):
    prefix: str = option("Fact:", "text put before the subject")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(bool(self.prefix.strip()), "prefix", self.prefix, "give a non-empty prefix")


class PrefixGain(Study):
    name = "prefix-gain"
    description = "how much a prefix before the subject raises the object's log-prob (a test plug-in)"
    config_class = PrefixGainConfig
    headline_metric = StudyHeadline("mean_gain", label="mean log-prob gain of the object with the prefix")

    def prepare(self, ctx: StudyContext) -> Any:
        """The test facts (read and checked before the MLflow run opens)."""
        from factprobe.datasets.mc_dataset import load_test_and_train

        test, _ = load_test_and_train(ctx.base)
        return list(test)

    def run(self, ctx: StudyContext) -> dict[str, Any]:
        from factprobe.lm.scorer import ChoiceRequest, Scorer
        from factprobe.models import load_model

        base, facts = ctx.base, ctx.prepared
        loaded = load_model(base.model, device=base.device, dtype=base.dtype)
        scorer = Scorer(loaded.model, loaded.tokenizer, device=loaded.device, max_length=loaded.max_length)
        bare = scorer.score_choices([ChoiceRequest(f.subject, [" " + f.object]) for f in facts])
        with_prefix = scorer.score_choices([ChoiceRequest(f"{ctx.cfg.prefix} {f.subject}", [" " + f.object]) for f in facts])
        rows = [
            {
                "fact_id": f.fact_id,
                "relation": f.relation,
                "logprob": float(a[0]),
                "logprob_prefixed": float(b[0]),
                "gain": float(b[0] - a[0]),
            }
            for f, a, b in zip(facts, bare, with_prefix)
        ]
        atomic_write_jsonl(ctx.out / "per_fact.jsonl", rows)
        n = len(rows)
        return {
            "n": n,
            "model": base.model,
            "mean_logprob": sum(r["logprob"] for r in rows) / n if n else None,
            "mean_gain": sum(r["gain"] for r in rows) / n if n else None,
        }

    def summary(self, metrics: Mapping[str, Any]) -> list[str]:
        return [f"prefix-gain: mean gain {metrics['mean_gain']:+.3f} over {metrics['n']} facts"]


register(PrefixGain())
