"""The multiple-choice dataset of IC-LKE, EIC-LKE, HGP and MMP: facts -> `Prepared` items.

1. Test facts come from the configured source (`--relations` selects, unknown ids are an error).
2. Training facts (for in-context examples) come from `--train-data`; without it each relation's
   test facts are split by subject (`split_train_test`, half for training), deterministically.
3. Items: T-REx-style (`build_mc`) with the gold plus `choices - 1` distractors, or Nobel years.
   The distractor pool and every object known to be correct for a subject come from ALL loaded
   facts (test and training), so a distractor is never a correct answer listed in either file.
4. Relations whose pool is too small are dropped with their reason. When `--relations` names
   such a relation the run is refused, unless `skip_small_relations`; without `--relations`
   ("every usable relation") they are skipped and listed in metrics.json.

`info` records, per relation, the distractor pool size and the share of training facts whose
subject equals the object (the examples a `--drop-self-examples` run would not use).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..facts import FactSet, MCItem
from ..sources import load_facts
from .cap import sample_facts_per_relation
from .examples import TRAIN_FRACTION, self_example_share, split_train_test
from .nobel_mc import build_nobel_mc
from .prepared import Prepared
from .trex_mc import build_mc


def load_test_and_train(base) -> tuple[FactSet, FactSet]:
    """(test, train) facts for a `BaseConfig`: the source's facts and the training facts."""
    test = load_facts(base.source, base.data, None)
    if base.relations:
        test = test.select(base.relations)
    if base.train_data:
        train = load_facts("lpaqa-train", base.train_data, None)
        train = FactSet([f for f in train if f.relation in test.relations], dict(test.relations), train.source)
    else:
        train, test = split_train_test(test, train_fraction=TRAIN_FRACTION, seed=base.seed)
    return test, train


def prepare_mc(base, choices: int, skip_small_relations: bool = False) -> Prepared:
    """Load facts and build the multiple-choice items (see the module docstring)."""
    test, train = load_test_and_train(base)
    if base.source == "nobel":
        build = build_nobel_mc(
            sample_facts_per_relation(test, base.max_facts_per_relation, seed=base.seed), n_choices=choices, seed=base.seed
        )
        pool_sizes: dict[str, int] = {}
    else:
        build = build_mc(test, n_choices=choices, seed=base.seed, max_facts_per_relation=base.max_facts_per_relation, known=train)
        pool_sizes = dict(build.pool_sizes)
    items: dict[str, list[MCItem]] = {}
    for it in build.items:
        items.setdefault(it.relation, []).append(it)
    dropped = dict(build.dropped)
    if base.relations and not skip_small_relations:
        bad = {r: dropped[r] for r in base.relations if r in dropped}
        if bad:
            raise ConfigError(
                "cannot probe requested relation(s) (--skip-small-relations probes the rest): " + "; ".join(bad.values())
            )
    if not items:
        why = "; ".join(dropped.values()) or "no facts"
        raise ConfigError(f"no relation of {test.source or base.source} can be probed with --choices {choices} ({why})")
    info = {
        "distractor_pool_size": pool_sizes,
        "skipped_facts": dict(build.skipped),
        "skip_reasons": dict(getattr(build, "skip_reasons", {})),
        "self_example_share": {r: self_example_share(train, r) for r in items},
    }
    return Prepared(kind="mc", items=items, facts={"test": test, "train": train}, dropped=dropped, info=info)
