"""A prepared probing dataset: items per relation, the fact sets they came from, and what was dropped.

`Prepared` is what a probe's `prepare(cfg)` returns and what the pipeline's data-build step writes
once for every model. `save(folder)` writes, each file atomically:

- `items.jsonl`: one item per line (`item.to_dict()`), relations in order;
- `<name>.jsonl` per fact set (`test.jsonl`, `train.jsonl`, ...);
- `meta.json`: the dataset kind, the item class (`module:Class`, which has `from_dict`), the
  relations' metadata, `dropped` {relation: reason}, `info` (e.g. distractor pool sizes), the
  cap's draw name (`cap_draw`) and the test digest.

`load(folder)` reads it back; a missing or malformed file raises DataError naming it.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..facts import Fact, FactSet, Relation
from ..io import atomic_write_json, atomic_write_jsonl, read_jsonl
from .cap import DEFAULT_DRAW


@dataclass
class Prepared:
    """Items grouped by relation (in probing order), named fact sets, dropped relations and notes.

    `info` holds JSON-able facts about the build that belong in metrics.json (pool sizes, ...).
    `cap_draw` names the seeded draw that `--max-facts-per-relation` keeps facts with
    (`factprobe.datasets.cap`); a builder whose capped runs drew under another name before the
    framework owned the cap keeps that name, so they keep the same facts.
    """

    kind: str
    items: dict[str, list[Any]]
    facts: dict[str, FactSet]
    dropped: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    cap_draw: str = DEFAULT_DRAW

    @property
    def n_items(self) -> int:
        return sum(len(v) for v in self.items.values())

    @property
    def test(self) -> FactSet:
        return self.facts["test"]

    @property
    def train(self) -> FactSet:
        return self.facts.get("train") or FactSet([], dict(self.test.relations), "")

    def digest(self) -> str:
        return self.test.digest()

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        first = next((it for its in self.items.values() for it in its), None)
        item_class = f"{type(first).__module__}:{type(first).__qualname__}" if first is not None else ""
        atomic_write_jsonl(folder / "items.jsonl", [it.to_dict() for its in self.items.values() for it in its])
        rels: dict[str, dict] = {}
        for name, fs in self.facts.items():
            atomic_write_jsonl(folder / f"{name}.jsonl", [f.to_dict() for f in fs])
            rels.update({r.id: asdict(r) for r in fs.relations.values()})
        atomic_write_json(
            folder / "meta.json",
            {
                "kind": self.kind,
                "item_class": item_class,
                "fact_sets": {n: fs.source for n, fs in self.facts.items()},
                "dropped": self.dropped,
                "info": self.info,
                "cap_draw": self.cap_draw,
                "relations": rels,
                "digest": self.digest(),
                "n_items": self.n_items,
            },
        )

    @classmethod
    def load(cls, folder: str | Path) -> Prepared:
        folder = Path(folder)
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            raise DataError(f"{folder}: not a prepared dataset (no meta.json)")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            item_cls = _import(meta["item_class"]) if meta.get("item_class") else None
            rels = {k: Relation(**v) for k, v in meta["relations"].items()}
            sets = meta["fact_sets"]
        except (KeyError, ValueError, TypeError) as e:
            raise DataError(f"{meta_path}: malformed dataset metadata ({e})") from None
        items: dict[str, list[Any]] = {}
        if item_cls is not None:
            for _, rec in read_jsonl(folder / "items.jsonl", required=("relation",)):
                it = item_cls.from_dict(rec)
                items.setdefault(it.relation, []).append(it)
        facts = {}
        for name, source in sets.items():
            recs = [Fact(**rec) for _, rec in read_jsonl(folder / f"{name}.jsonl", required=("relation", "subject", "object"))]
            facts[name] = FactSet(recs, dict(rels), source)
        return cls(
            kind=meta["kind"],
            items=items,
            facts=facts,
            dropped=meta.get("dropped", {}),
            info=meta.get("info", {}),
            cap_draw=meta.get("cap_draw") or DEFAULT_DRAW,
        )


def _import(path: str) -> Any:
    module, _, name = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise DataError(f"prepared dataset names item class {path!r}, which cannot be imported ({e})") from None
    return obj
