"""Validated run configuration of a probe: one base config plus one config dataclass per probe.

A run is `RunConfig(probe, base, params)`:
- `base` (`BaseConfig`) holds what every probe shares: model, data, relations, seed, device, ...
- `params` is the probe's own config dataclass (declared by the probe module, e.g.
  `ICLKEConfig`), subclassing `factprobe.config.ConfigBase` (the generic machinery: `option`,
  coercion, the argparse helpers).

`RunConfig.to_dict()` is one flat JSON-able dict (`probe` plus every base and probe field) and
`RunConfig.from_dict()` reads it back, coercing the strings that command lines, Kubeflow and MLflow
parameters hand over. The CLI, the components and tracking all go through this one pair.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol

from ..config import (
    CHOICES,
    DECIDES_RESULTS,
    HELP,
    PIPELINE,
    ConfigBase,
    add_config_arguments,
    field_type,
    namespace_to_dict,
    option,
    split_relations,
)
from ..errors import ConfigError
from ..sources import SOURCES

__all__ = [
    "BaseConfig",
    "RunConfig",
    "option_classes",
    "CHOICES",
    "DECIDES_RESULTS",
    "HELP",
    "PIPELINE",
    "ConfigBase",
    "add_config_arguments",
    "field_type",
    "namespace_to_dict",
    "option",
    "split_relations",
]


class ProbeLookup(Protocol):
    """What this module asks of the probe registry (`factprobe.framework.registry`, which installs itself
    with `use_probes` when it is imported): a probe by name, and every probe by name."""

    def get(self, name: str) -> Any: ...

    def all(self) -> dict[str, Any]: ...


_lookup: ProbeLookup | None = None


def use_probes(lookup: ProbeLookup) -> None:
    """Install the probe registry that `RunConfig.from_dict` and `option_classes` read. The registry sits
    above this module (it holds `Probe`s, whose methods take a `RunConfig`), so it hands itself down here
    instead of being imported: no import circle (tests/test_layers.py). `factprobe.framework` imports the
    registry in its `__init__`, so any import of this module has it."""
    global _lookup
    _lookup = lookup


def _probes() -> ProbeLookup:
    if _lookup is None:  # only when the package __init__ was bypassed
        raise ConfigError("no probe registry: import factprobe.framework.registry first")
    return _lookup


@dataclass
class BaseConfig(ConfigBase):
    """What every probe run shares. Two runs with equal configs give equal results."""

    model: str = option("smollm2-135m-instruct", "model: alias, local Hugging Face folder, PEFT adapter folder or hub id")
    base_model: str | None = option(None, "base model of a PEFT adapter folder (default: the adapter's base_model_name_or_path)")
    source: str = option("countryinfo", "fact source", choices=SOURCES)
    data: str | None = option(
        None, "test facts: lama folder, Nobel CSV, triples file or s3://bucket/prefix (default: the source's)"
    )
    train_data: str | None = option(
        None, "folder of P*.jsonl training facts for in-context examples (default: split the test facts)"
    )
    relations: list[str] | None = option(None, "comma-separated relation ids, e.g. P36,P19 (default: every usable relation)")
    max_facts_per_relation: int | None = option(None, "test facts per relation, a deterministic sample (default: all)")
    seed: int = option(0, "seed of distractors, example sampling, splits and sampling")
    device: str = option("auto", "auto | cpu | cuda[:i]", decides_results=False)
    dtype: str = option("auto", "auto | float32 | bfloat16 | float16", choices=("auto", "float32", "bfloat16", "float16"))
    token_budget: int | None = option(
        None, "most query tokens per packed forward (default: 1024 on CPU, 8192 on GPU)", decides_results=False
    )
    out: str | None = option(None, "output folder (default runs/<probe>-<model>-<source>)", decides_results=False, pipeline=False)
    threads: int | None = option(
        None,
        "CPU threads (default: the CPUs this process may use, cgroup quota and affinity, "
        "divided among the pipeline steps run at once)",
        decides_results=False,
    )
    device_map: str | None = option(
        None,
        "split the model across devices with accelerate: auto | balanced | sequential (default: the whole model on --device)",
        decides_results=False,
    )
    max_memory: str | None = option(
        None,
        "memory per device for --device-map, e.g. 0=20GiB,cpu=60GiB or a JSON object; "
        "layers that fit nowhere go to disk (default: accelerate's)",
        decides_results=False,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check(bool(self.model and self.model.strip()), "model", self.model, "must not be empty")
        self.relations = split_relations(self.relations)
        self.check(
            self.max_facts_per_relation is None or self.max_facts_per_relation >= 1,
            "max_facts_per_relation",
            self.max_facts_per_relation,
            "must be >= 1",
        )
        self.check(self.token_budget is None or self.token_budget >= 1, "token_budget", self.token_budget, "must be >= 1")
        self.check(
            not (self.source in ("triples", "s3") and not self.data), "data", self.data, f"source {self.source} needs --data"
        )
        self.check(self.threads is None or self.threads >= 1, "threads", self.threads, "must be >= 1")
        if self.device_map is not None or self.max_memory is not None:
            from ..models.placement import check_placement

            self.device_map, self.max_memory = check_placement(self.device_map, self.max_memory)


@dataclass
class RunConfig:
    """A probe name, the base config and the probe's own config (see the module docstring)."""

    probe: str
    base: BaseConfig
    params: ConfigBase
    #: fields of a flat dict that belong to no config but are accepted and ignored (old runs)
    IGNORED: ClassVar[tuple[str, ...]] = ("extra",)

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, **self.base.to_dict(), **self.params.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any], strict: bool = True) -> RunConfig:
        """Split a flat dict into base and probe fields by name; unknown names raise ConfigError."""
        d = dict(d)
        name = d.pop("probe", None)
        if not name:
            raise ConfigError("probe: missing; every run config names its probe")
        probe = _probes().get(str(name))
        base_names, own_names = set(BaseConfig.field_names()), set(probe.config_class.field_names())
        unknown = sorted(set(d) - base_names - own_names - set(cls.IGNORED))
        if strict and unknown:
            raise ConfigError(f"probe {name}: unknown option(s) {', '.join(unknown)}")
        base = BaseConfig.from_dict({k: v for k, v in d.items() if k in base_names})
        params = probe.config_class.from_dict({k: v for k, v in d.items() if k in own_names})
        return cls(probe.name, base, params)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def results_key(self) -> str:
        """Hash of the fields that decide results (device, token budget and `out` do not)."""
        keep = {"probe": self.probe}
        for cfg in (self.base, self.params):
            for f in fields(cfg):
                if f.metadata.get(DECIDES_RESULTS, True):
                    keep[f.name] = getattr(cfg, f.name)
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with some flat fields changed (validated again)."""
        return RunConfig.from_dict({**self.to_dict(), **changes})


def option_classes() -> list[type]:
    """BaseConfig then every probe's config class (each once): the source of CLI and pipeline options."""
    out: list[type] = [BaseConfig]
    for p in _probes().all().values():
        if p.config_class not in out:
            out.append(p.config_class)
    return out
