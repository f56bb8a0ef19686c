"""Validated configuration of a multiple-choice probe run (IC-LKE, EIC-LKE, HGP, MMP)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from ..errors import ConfigError

PROBES = ("ic-lke", "eic-lke", "hgp", "mmp")
SOURCES = ("countryinfo", "lama", "lpaqa-train", "nobel", "triples", "s3")


@dataclass
class ProbeConfig:
    """Everything that decides a probe's results. Two runs with equal configs give equal results."""

    probe: str = "ic-lke"  # one of PROBES
    model: str = "smollm2-135m-instruct"  # alias, local HF folder or hub id
    source: str = "countryinfo"  # one of SOURCES
    data: str | None = None  # path / s3 URI of the test facts (None: the source's default)
    train_data: str | None = None  # folder of P*.jsonl training facts; None: split the test facts
    relations: list[str] | None = None  # relation ids to keep; None: all usable relations
    max_facts_per_relation: int | None = None  # test facts per relation (deterministic sample)
    examples: int = 50  # in-context examples (IC-LKE), or the leading block (EIC-LKE)
    choices: int = 100  # options per item: gold + choices-1 distractors
    seed: int = 0  # drives distractors, example sampling and splits
    separator: str = " "  # between subject and object, and between examples (wu2024: space)
    eic_interleave: int = 5  # EIC-LKE: training examples between two test slots (appendix C.2)
    eic_tests_per_sequence: int = 10  # EIC-LKE: test facts packed into one sequence
    templates_per_relation: int = 3  # HGP/MMP: prompts per relation (wu2024 section 4.1: three)
    prompts_root: str | None = None  # LPAQA prompts folder (default: <data root>/lpaqa/prompts)
    device: str = "auto"  # auto | cpu | cuda[:i]
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    token_budget: int | None = None  # most query tokens per packed forward (None: device default)
    on_too_long: str = "truncate"  # context longer than the window: truncate examples | refuse
    extra: dict = field(default_factory=dict)  # free-form, recorded but not used

    def __post_init__(self) -> None:
        if self.probe not in PROBES:
            raise ConfigError(f"unknown probe {self.probe!r}; choose one of {', '.join(PROBES)}")
        if self.source not in SOURCES:
            raise ConfigError(f"unknown source {self.source!r}; choose one of {', '.join(SOURCES)}")
        if self.choices < 2:
            raise ConfigError(f"--choices must be at least 2, got {self.choices}")
        if self.examples < 0:
            raise ConfigError(f"--examples must be >= 0, got {self.examples}")
        if self.max_facts_per_relation is not None and self.max_facts_per_relation < 1:
            raise ConfigError(f"--max-facts-per-relation must be >= 1, got {self.max_facts_per_relation}")
        if self.on_too_long not in ("truncate", "refuse"):
            raise ConfigError(f"on_too_long must be 'truncate' or 'refuse', got {self.on_too_long!r}")
        if self.eic_interleave < 0 or self.eic_tests_per_sequence < 1:
            raise ConfigError("eic_interleave must be >= 0 and eic_tests_per_sequence >= 1")
        if self.templates_per_relation < 1:
            raise ConfigError("templates_per_relation must be >= 1")
        if isinstance(self.relations, str):
            self.relations = [r.strip() for r in self.relations.split(",") if r.strip()]
        if self.relations is not None and not self.relations:
            self.relations = None
        if not self.separator:
            raise ConfigError("separator must not be empty")
        if self.source in ("triples", "s3") and not self.data:
            raise ConfigError(f"--source {self.source} needs --data")

    def to_dict(self) -> dict:
        return asdict(self)

    def results_key(self) -> str:
        """Hash of the fields that decide results (device and budget do not)."""
        d = self.to_dict()
        for k in ("device", "token_budget", "extra"):
            d.pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
