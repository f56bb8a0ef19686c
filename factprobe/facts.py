"""Typed records shared by every part of factprobe: relations, facts and multiple-choice items.

A `Fact` keeps the entity ids of its subject and object where the source has them (Wikidata
`Q...` ids for LAMA/T-REx, Freebase ids for Google-RE, laureate ids for Nobel). Ids, never labels,
decide which objects are *correct* for a subject-relation pair, so N-M relations keep all of their
gold objects.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field

CARDINALITIES = ("1-1", "N-1", "N-M", "1-N")


@dataclass(frozen=True)
class Relation:
    """One relation. `id` is the Wikidata property id where one exists (`P36`), else a slug.

    `template` is the LAMA-style manual template with `[X]` and `[Y]` slots, or None.
    `cardinality` is one of 1-1, N-1, N-M (1-N accepted for user data).
    """

    id: str
    label: str = ""
    template: str | None = None
    cardinality: str = "N-1"
    description: str = ""

    def __post_init__(self) -> None:
        if not self.id or not isinstance(self.id, str):
            raise ValueError(f"relation id must be a non-empty string, got {self.id!r}")
        if self.cardinality not in CARDINALITIES:
            raise ValueError(f"relation {self.id}: cardinality must be one of {CARDINALITIES}, got {self.cardinality!r}")


@dataclass(frozen=True)
class Fact:
    """A (subject, relation, object) triple with surface labels and optional entity ids."""

    relation: str
    subject: str
    object: str
    subject_id: str | None = None
    object_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("relation", "subject", "object"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"fact field {name!r} must be a non-empty string, got {value!r}")

    @property
    def subject_key(self) -> str:
        """Identity of the subject: its id when known, else its label."""
        return self.subject_id or self.subject

    @property
    def object_key(self) -> str:
        """Identity of the object: its id when known, else its label."""
        return self.object_id or self.object

    @property
    def fact_id(self) -> str:
        """Stable id of this fact, used to join results across runs: `relation|subject|object` keys."""
        return f"{self.relation}|{self.subject_key}|{self.object_key}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Fact:
        return cls(d["relation"], d["subject"], d["object"], d.get("subject_id"), d.get("object_id"))


@dataclass
class FactSet:
    """Facts plus the relations they use. `source` says where they came from (for lineage)."""

    facts: list[Fact]
    relations: dict[str, Relation] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        for f in self.facts:
            if f.relation not in self.relations:
                self.relations[f.relation] = Relation(id=f.relation, label=f.relation)

    def __len__(self) -> int:
        return len(self.facts)

    def __iter__(self) -> Iterator[Fact]:
        return iter(self.facts)

    def by_relation(self) -> dict[str, list[Fact]]:
        """Facts grouped by relation id, in first-seen order."""
        out: dict[str, list[Fact]] = defaultdict(list)
        for f in self.facts:
            out[f.relation].append(f)
        return dict(out)

    def select(self, relations: Iterable[str] | None) -> FactSet:
        """Keep only `relations` (None keeps all). Unknown ids raise ConfigError naming them."""
        from .errors import ConfigError

        if relations is None:
            return self
        wanted = list(dict.fromkeys(relations))
        unknown = [r for r in wanted if r not in self.relations]
        if unknown:
            known = ", ".join(sorted(self.relations)) or "(none)"
            raise ConfigError(f"unknown relation(s) {', '.join(unknown)} in {self.source or 'the data'}; known: {known}")
        keep = set(wanted)
        return FactSet(
            facts=[f for f in self.facts if f.relation in keep],
            relations={k: v for k, v in self.relations.items() if k in keep},
            source=self.source,
        )

    def correct_objects(self) -> dict[tuple[str, str], dict[str, str]]:
        """(relation, subject_key) -> {object_key: object_label} for every correct object."""
        out: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        for f in self.facts:
            out[(f.relation, f.subject_key)].setdefault(f.object_key, f.object)
        return dict(out)

    def digest(self) -> str:
        """sha256 (first 16 hex) over the sorted facts: equal data gives an equal digest."""
        h = hashlib.sha256()
        for line in sorted(json.dumps(f.to_dict(), sort_keys=True) for f in self.facts):
            h.update(line.encode())
        return h.hexdigest()[:16]


@dataclass(frozen=True)
class MCItem:
    """One multiple-choice test item.

    `options` holds the gold object and the distractors in presentation order; `gold_index`
    points at the gold. `correct_objects` lists every correct object label of the
    subject-relation pair (all of them are excluded from the distractors).
    """

    relation: str
    subject: str
    gold: str
    options: tuple[str, ...]
    gold_index: int
    correct_objects: tuple[str, ...]
    subject_id: str | None = None
    object_id: str | None = None

    def __post_init__(self) -> None:
        if not self.options:
            raise ValueError(f"item {self.relation}/{self.subject}: no options")
        if any(not isinstance(o, str) or not o.strip() for o in self.options):
            raise ValueError(f"item {self.relation}/{self.subject}: empty option in {list(self.options)!r}")
        if not (0 <= self.gold_index < len(self.options)) or self.options[self.gold_index] != self.gold:
            raise ValueError(f"item {self.relation}/{self.subject}: gold {self.gold!r} not at gold_index")

    @property
    def fact_id(self) -> str:
        return f"{self.relation}|{self.subject_id or self.subject}|{self.object_id or self.gold}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["options"] = list(self.options)
        d["correct_objects"] = list(self.correct_objects)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> MCItem:
        return cls(
            relation=d["relation"],
            subject=d["subject"],
            gold=d["gold"],
            options=tuple(d["options"]),
            gold_index=int(d["gold_index"]),
            correct_objects=tuple(d["correct_objects"]),
            subject_id=d.get("subject_id"),
            object_id=d.get("object_id"),
        )
