"""The data contract of every probe, checked and applied by the framework right after `prepare`.

What `Probe.prepare(cfg)` returns must be a `factprobe.datasets.prepared.Prepared` whose

1. **test facts** are `facts["test"]` (a `FactSet`);
2. **items** are `{relation: [item, ...]}`, each item a record a pipeline can save and read back:
   it has a non-empty string `fact_id` (the test fact it asks about; several items may share one)
   and a `relation` equal to its group's key, `to_dict()` gives a JSON object with that `relation`,
   and the item's class has a `from_dict` class method that reads it back to an item with the same
   `fact_id` and `to_dict()`; every item of a dataset is of one class (`meta.json` names one).

A `Prepared` that breaks a rule is refused with one line (`ContractError`, a factprobe error the CLI
prints as `error: ...`) naming the probe and the rule, before anything is saved, loaded or scored.

Then the framework, not the probe, decides which test facts the run covers:

- `--relations`: items of other relations are left out;
- `--max-facts-per-relation`: at most that many facts per relation are kept, every item of a kept
  fact (`factprobe.datasets.cap.cap_items`: a seeded draw over the relation's facts in item order,
  under `Prepared.cap_draw`; with `cap_draw = SOURCE_DRAW` the draw is over the test facts, so the
  run covers the facts every other probe of that source covers, `cap_to_drawn_facts`). A probe may cap
  earlier itself with the same draw (the built-in multiple-choice and QA builds do); the framework's
  cap then removes nothing.

`apply_contract` does both; `Probe` applies it to whatever a subclass's `prepare` returns
(`factprobe.framework.base`), so every caller (the runner, the pipeline's data-build step, `regress`)
gets checked, capped items, and the runner applies it again to a dataset handed to it (idempotent).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..datasets.cap import cap_prepared_items
from ..datasets.prepared import Prepared
from ..errors import FactprobeError
from ..facts import FactSet

if TYPE_CHECKING:
    from .config import RunConfig

WHERE = "the data contract in factprobe/framework/base.py"


class ContractError(FactprobeError):
    """A probe's `prepare` broke the data contract (the message names the probe and the rule)."""


def apply_contract(probe: Any, cfg: RunConfig, prepared: Any) -> Prepared:
    """Check `prepared` against the contract (module docstring; ContractError on the first broken rule),
    then keep the items of `cfg.base.relations` (when given) and cap each relation to
    `cfg.base.max_facts_per_relation` facts drawn from `cfg.base.seed`. Returns `prepared` with its
    items replaced (the same object; nothing else is changed)."""
    name = getattr(probe, "name", type(probe).__name__)
    check_prepared(name, prepared)
    items = prepared.items
    wanted = cfg.base.relations
    if wanted:
        items = {rel: its for rel, its in items.items() if rel in set(wanted)}
    prepared.items, emptied = cap_prepared_items(items, prepared.facts["test"], cfg.base, prepared.cap_draw)
    if emptied:
        prepared.dropped = {**prepared.dropped, **emptied}
    return prepared


def check_prepared(name: str, prepared: Any) -> None:
    """Raise ContractError naming probe `name` and the rule when `prepared` breaks the contract."""

    def refuse(rule: str, found: str) -> None:
        raise ContractError(f"probe {name}: {rule}, but {found} ({WHERE})")

    if not isinstance(prepared, Prepared):
        refuse("prepare must return a factprobe.datasets.prepared.Prepared", f"it returned {_kind(prepared)}")
    if not isinstance(prepared.facts, dict) or not isinstance(prepared.facts.get("test"), FactSet):
        found = _kind(prepared.facts.get("test")) if isinstance(prepared.facts, dict) else _kind(prepared.facts)
        refuse("Prepared.facts['test'] must be the run's test facts (a FactSet)", f"it is {found}")
    if not isinstance(prepared.items, dict):
        refuse("Prepared.items must be {relation: list of items}", f"it is {_kind(prepared.items)}")
    classes: dict[type, str] = {}
    for rel, its in prepared.items.items():
        if not isinstance(its, list):
            refuse("Prepared.items must be {relation: list of items}", f"relation {rel!r} holds {_kind(its)}")
        for i, it in enumerate(its):
            where = f"item {i} of relation {rel!r}"
            missing = [a for a in ("fact_id", "relation", "to_dict") if not hasattr(it, a)]
            if not callable(getattr(type(it), "from_dict", None)):
                missing.append("from_dict")
            if missing:
                refuse(
                    "items must be records with fact_id, relation, to_dict() and a from_dict class method",
                    f"{where} is {_kind(it)} without {', '.join(missing)}",
                )
            if not isinstance(it.fact_id, str) or not it.fact_id:
                refuse("an item's fact_id must be a non-empty string", f"{where} has fact_id {_short(it.fact_id)}")
            if it.relation != rel:
                refuse("an item's relation must be the key of its group", f"{where} has relation {_short(it.relation)}")
            classes.setdefault(type(it), where)
        if its:
            _check_round_trip(refuse, its[0], rel)
    if len(classes) > 1:
        refuse(
            "every item of a dataset must be of one class (a saved dataset names one)",
            "it mixes " + ", ".join(f"{c.__qualname__} ({w})" for c, w in classes.items()),
        )


def _check_round_trip(refuse, item: Any, rel: str) -> None:
    """`from_dict(to_dict())` through JSON gives the item back (same fact_id and to_dict)."""
    rule = "to_dict() must give a JSON object with the item's relation that from_dict reads back to the same item"
    where = f"the first item of relation {rel!r}"
    try:
        d = item.to_dict()
        text = json.dumps(d, sort_keys=True)
    except Exception as e:  # noqa: BLE001 - any failure of a plug-in's to_dict breaks the rule
        refuse(rule, f"{where}: to_dict() failed ({type(e).__name__}: {_short(e)})")
    if not isinstance(d, dict) or d.get("relation") != rel:
        refuse(rule, f"{where}: to_dict() gave {_short(d)}")
    try:
        back = type(item).from_dict(json.loads(text))
        same = back.fact_id == item.fact_id and json.dumps(back.to_dict(), sort_keys=True) == text
    except Exception as e:  # noqa: BLE001 - as above, for from_dict
        refuse(rule, f"{where}: from_dict failed ({type(e).__name__}: {_short(e)})")
    if not same:
        refuse(rule, f"{where} reads back as {_short(back)}")


def _kind(value: Any) -> str:
    """'a tuple', 'None', ... for a message."""
    if value is None:
        return "None"
    n = type(value).__qualname__
    return f"{'an' if n[:1].lower() in 'aeiou' else 'a'} {n}"


def _short(value: Any, limit: int = 80) -> str:
    """repr of `value` on one line, at most `limit` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
