"""The measurement identity of a study run (`factprobe.identity`, for a study's configuration dict).

A study prepares its own data from the inputs its configuration names and may load several models
(`base.model`, or a `models` list of the findings study), so its identity is:

- `model_revisions`: {model name: content revision} of every model it names (no weights loaded);
- `inputs`: every input location the configuration names, made absolute, with the digest of its
  content (`factprobe.identity.path_digest`: file bytes, hashed once per machine);
- `numerics`: what this machine resolves the base config's device and dtype to;
- `config_key`: the study's own key (`config_key`: the fields that decide results).

`StudyIdentity.key()` names a pipeline work folder, so a folder is reused only for the same weights,
data, config and numerics.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..identity import input_locations, path_digest, short


@dataclass
class StudyIdentity:
    model_revisions: dict[str, str]
    config_key: str
    numerics: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StudyIdentity:
        return cls(
            dict(d.get("model_revisions") or {}),
            str(d.get("config_key") or ""),
            dict(d.get("numerics") or {}),
            list(d.get("inputs") or []),
        )

    def changes_from(self, old: StudyIdentity) -> list[str]:
        """What differs from `old`, as phrases for a one-line refusal (weights, inputs, config, numerics)."""
        out = []
        for m in sorted(set(old.model_revisions) | set(self.model_revisions)):
            a, b = old.model_revisions.get(m), self.model_revisions.get(m)
            if a != b:
                out.append(f"weights of {m} (revision {short(str(a))} then, {short(str(b))} now)")
        was = {i.get("location"): i.get("digest") for i in old.inputs}
        for inp in self.inputs:
            loc = inp.get("location")
            if loc in was and was[loc] != inp.get("digest"):
                out.append(f"data in {loc} (digest {short(str(was[loc]))} then, {short(str(inp.get('digest')))} now)")
        if old.config_key != self.config_key:
            out.append(f"config (key {old.config_key} then, {self.config_key} now)")
        num = [
            f"{k} {old.numerics.get(k)} then, {self.numerics.get(k)} now"
            for k in sorted(set(old.numerics) | set(self.numerics))
            if k != "attn_implementation" and old.numerics.get(k) != self.numerics.get(k)
        ]
        if num:
            out.append(f"numerics ({'; '.join(num)})")
        return out

    def line(self) -> str:
        """One line for the screen: the models' revisions, the inputs' digests and the numerics."""
        models = ", ".join(f"{m} {short(r)}" for m, r in self.model_revisions.items()) or "no model"
        data = ", ".join(short(str(i.get("digest"))) for i in self.inputs if i.get("digest")) or "built-in"
        n = self.numerics
        where = f"{n.get('dtype')} on {n.get('device')} ({n.get('device_name')})" if n else "no numerics"
        return f"identity: {models}; data {data}; config {self.config_key}; {where}"

    def tags(self) -> dict[str, str]:
        """MLflow tags (without the `factprobe.` prefix): model_revision (one model) or model_revisions (JSON),
        numerics (JSON), dtype, device, config_key, identity_key."""
        out = {
            "config_key": self.config_key,
            "identity_key": self.key(),
            "numerics": json.dumps(self.numerics, sort_keys=True, separators=(",", ":")),
        }
        if len(self.model_revisions) == 1:
            out["model_revision"] = next(iter(self.model_revisions.values()))
        elif self.model_revisions:
            out["model_revisions"] = json.dumps(self.model_revisions, sort_keys=True)
        if self.numerics:
            out.update(dtype=str(self.numerics.get("dtype")), device=str(self.numerics.get("device")))
        return out

    def key(self) -> str:
        """sha256 (16 hex) over every part: the name of the study's pipeline work folder."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_key(config: Mapping[str, Any]) -> str:
    """Hash (16 hex) of a study configuration (`factprobe.studies.cli.study_config`) over the fields
    that decide results: the base config's device, token budget and output folder do not."""
    from dataclasses import fields

    from ..config import DECIDES_RESULTS
    from ..framework.config import BaseConfig

    skip = {f.name for f in fields(BaseConfig) if not f.metadata.get(DECIDES_RESULTS, True)}
    keep = {**config, "base": {k: v for k, v in (config.get("base") or {}).items() if k not in skip}}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


def models_of(config: Mapping[str, Any]) -> list[str]:
    """Every model a study configuration names: `base.model` and a `models` list in its params."""
    base = config.get("base") or {}
    params = config.get("params") or {}
    names = [base.get("model")] if base.get("model") else []
    listed = params.get("models")
    if isinstance(listed, str):
        listed = [m.strip() for m in listed.split(",")]
    names += [str(m) for m in (listed or []) if m]
    return list(dict.fromkeys(names))


def study_identity(config: Mapping[str, Any], key: str | None = None) -> StudyIdentity:
    """The identity of a study configuration (`factprobe.studies.cli.study_config`'s dict) on this
    machine. Local inputs are hashed (once per file); `s3://` inputs are recorded by location."""
    from ..lm.numerics import resolved_numerics  # imports torch: only when an identity is computed, not for --help
    from ..models.loading import model_revision

    base = dict(config.get("base") or {})
    params = dict(config.get("params") or {})
    revisions = {m: model_revision(m, base.get("base_model") if m == base.get("model") else None) for m in models_of(config)}
    num = (
        resolved_numerics(base.get("device") or "auto", base.get("dtype") or "auto", base.get("device_map")) if revisions else {}
    )
    inputs = []
    for where in (base, params):
        for inp in input_locations(where):
            loc = inp["location"]
            inputs.append({**inp, "digest": "" if loc.startswith("s3://") else path_digest(loc)})
    return StudyIdentity(revisions, key or config_key(config), num, inputs)
