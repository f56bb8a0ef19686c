"""The measurement identity of a study run (`factprobe.identity`, for a study's configuration dict).

A study prepares its own data from the inputs its configuration names and may load several models
(`base.model`, or a `models` list of the findings study), so its identity is:

- `model_revisions`: {model name: content revision} of every model it names (no weights loaded);
- `inputs`: every input location the configuration names, made absolute, with the digest of its
  content (`factprobe.identity.path_digest`: file bytes, hashed once per machine);
- `numerics`: what this machine resolves the base config's device and dtype to;
- `config_key`: the study's own key (`tracking.study_run.study_key` is passed in as `config_key`).

`StudyIdentity.key()` names a pipeline work folder, so a folder is reused only for the same weights,
data, config and numerics.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from ..identity import input_locations, path_digest
from ..lm.numerics import resolved_numerics


@dataclass
class StudyIdentity:
    model_revisions: dict[str, str]
    config_key: str
    numerics: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def key(self) -> str:
        """sha256 (16 hex) over every part: the name of the study's pipeline work folder."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


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


def study_identity(config: Mapping[str, Any], config_key: str) -> StudyIdentity:
    """The identity of a study configuration (`factprobe.studies.cli.study_config`'s dict) on this
    machine. Local inputs are hashed (once per file); `s3://` inputs are recorded by location."""
    from ..lm.loading import model_revision

    base = dict(config.get("base") or {})
    params = dict(config.get("params") or {})
    revisions = {m: model_revision(m, base.get("base_model") if m == base.get("model") else None)
                 for m in models_of(config)}
    num = resolved_numerics(base.get("device") or "auto", base.get("dtype") or "auto") if revisions else {}
    inputs = []
    for where in (base, params):
        for inp in input_locations(where):
            loc = inp["location"]
            inputs.append({**inp, "digest": "" if loc.startswith("s3://") else path_digest(loc)})
    return StudyIdentity(revisions, config_key, num, inputs)
