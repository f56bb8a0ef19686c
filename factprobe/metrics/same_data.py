"""Are two runs comparable fact by fact? `check_same_data` refuses, in one line naming the options and
the flags that make them comparable, two runs whose configurations or data digests say they test
different items; `data_differences` and `describe_differences` say how two runs' data options differ
(`factprobe.metrics.comparison` pairs the facts once this check passed).
"""

from __future__ import annotations

from ..errors import DataError

#: run options that decide which facts (and distractors) a run tests, in the order a difference is named.
#: Runs that differ in one of these test different items, so `compare` refuses them (see `data_differences`).
DATA_OPTIONS = ("source", "data", "train_data", "max_facts_per_relation", "seed", "choices", "skip_small_relations")
#: an option that only narrows the facts: runs differing in it are joined on the relations both have
SUBSET_OPTIONS = ("relations",)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(value) -> str:
    if value is None:
        return "not set"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def data_differences(config_a: dict | None, config_b: dict | None) -> dict[str, tuple]:
    """{option: (value in a, value in b)} of the `DATA_OPTIONS` and `SUBSET_OPTIONS` in which two
    runs' configurations (flat `RunConfig.to_dict()` dicts) differ. An option that only one run's
    probe has (e.g. `choices` of a multiple-choice probe) is not compared; {} when either config is
    unknown (None)."""
    if config_a is None or config_b is None:
        return {}
    out: dict[str, tuple] = {}
    for name in (*DATA_OPTIONS, *SUBSET_OPTIONS):
        if name not in config_a or name not in config_b:
            continue
        va, vb = config_a[name], config_b[name]
        if name in SUBSET_OPTIONS:
            va, vb = (sorted(map(str, v)) if v else None for v in (va, vb))
        if va != vb:
            out[name] = (config_a[name], config_b[name])
    return out


def describe_differences(diffs: dict[str, tuple]) -> str:
    """`--train-data data/lama_train (a) vs not set (b); --seed 0 (a) vs 1 (b)`."""
    return "; ".join(f"{_flag(k)} {_shown(a)} (a) vs {_shown(b)} (b)" for k, (a, b) in diffs.items())


def _fix(diffs: dict[str, tuple]) -> str:
    flags = " ".join(
        f"{_flag(k)} {_shown(a)}" if not isinstance(a, bool) else (_flag(k) if a else "")
        for k, (a, b) in diffs.items()
        if a is not None and a is not False
    )
    unset = [_flag(k) for k, (a, b) in diffs.items() if a is None or a is False]
    how = f"run b again with {flags}" if flags else "run b again"
    if unset:
        how += f" and without {', '.join(unset)}"
    return how + " (or a with b's options), so that both build the same facts and distractors"


def check_same_data(
    config_a: dict | None, config_b: dict | None, digest_a: str | None = None, digest_b: str | None = None
) -> str:
    """Refuse (DataError, one line) two runs whose configurations or data digests say they test
    different items: a different `--source`, `--data`, `--train-data`, `--max-facts-per-relation`,
    `--seed`, `--choices` or `--skip-small-relations` (named, with the flags that make them
    comparable), or the same options with different test-fact digests (the data files changed).
    Such runs can share some fact ids (`relation|subject|object`) and would otherwise be joined
    silently on facts with other distractors or splits. A difference in `--relations` only is
    allowed: the facts of a relation do not depend on which other relations were asked for, so the
    join is over the relations both ran; the returned note says so ("" when nothing differs)."""
    diffs = data_differences(config_a, config_b)
    if digest_a and digest_a == digest_b:
        # the same content at another location (`--data` spelled out as the source's default; a laptop's
        # ../shared/data and a cluster's claim, /mnt/factprobe/data): the digest covers every fact set read
        diffs.pop("data", None)
        diffs.pop("train_data", None)
    hard = {k: v for k, v in diffs.items() if k not in SUBSET_OPTIONS}
    if hard:
        raise DataError(f"the runs were built from different data: {describe_differences(hard)}; {_fix(hard)}")
    if diffs:
        return (
            f"note: the runs asked for different relations ({describe_differences(diffs)}); "
            f"only the relations both ran are compared"
        )
    if digest_a and digest_b and digest_a != digest_b and config_a is not None and config_b is not None:
        raise DataError(
            f"the runs were made with the same data options but test different facts (data digest "
            f"{digest_a} (a) vs {digest_b} (b)): the data files changed between them; rerun both on "
            f"the same files"
        )
    return ""
