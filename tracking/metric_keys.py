"""Metric names MLflow takes, for any relation id, item id or metric name (issue 41 item 8).

MLflow refuses a whole metrics batch when one name in it breaks its rules
(`mlflow.utils.validation._validate_metric_name`): only letters, digits and `_ - . / : space`; no
name that a path normalisation would change (`accuracy/../../etc`, `a//b`, `a/./b`, a trailing `/`);
none that is `.`, starts with `..` or `/`; at most 250 characters. One bad relation id then lost
every metric of the run. The rules here, in the order they apply:

- `safe_id(text)`: an id (a relation, a template, a group key) as ONE name segment: `%` becomes
  `pct`, every character MLflow refuses and `/` become `_` (`a/b` -> `a_b`, `rel:colon?*` ->
  `rel:colon__`); an empty id is `_`, an id that is `.` or starts with `..` gets a leading `_`
  (`../../etc` -> `_.._.._etc`); an id over 120 characters is cut to 111 plus `-` and 8 hex
  characters of its SHA-256.
- `safe_metric_key(key)`: a whole name: the same characters replaced (`/` kept as the separator),
  an empty segment, `.` or one starting with `..` prefixed with `_` (`accuracy/../../etc` ->
  `accuracy/_../_../etc`),
  and a name over 250 characters cut to 241 plus `-` and 8 hex characters of its SHA-256.
- `KeyMap`: what a run logged under which name. A name MLflow takes is logged as it is; a changed
  name that another original already took (two ids that sanitise alike, `a/b` and `a_b`) gets
  `-` and the first 8 hex characters of the SHA-256 of its original (more when those collide too),
  so no two originals share a logged name. `KeyMap.renamed` lists every change, for the run's
  `tables/metric_keys.json` (`factprobe_ops.tracking.run.TrackedRun`).

Pure: no MLflow import.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass, field

#: MLflow's own limit on a metric name (`MAX_ENTITY_KEY_LENGTH`)
MAX_KEY_LENGTH = 250
#: the longest id segment, so that `<metric>/<group>/<id>` stays within MAX_KEY_LENGTH
MAX_ID_LENGTH = 120
#: the artifact that maps each original name or id to the name it was logged under
KEY_MAP_ARTIFACT = "tables/metric_keys.json"

_BAD_CHARS = re.compile(r"[^\w.\- :/]")  # MLflow's allowed set (POSIX), `/` handled per segment


def valid_metric_key(key: str) -> bool:
    """True when MLflow takes `key` as a metric name as it is (the rules of the module docstring)."""
    if not key or len(key) > MAX_KEY_LENGTH or _BAD_CHARS.search(key):
        return False
    norm = posixpath.normpath(key)
    return norm == key and norm != "." and not norm.startswith(("..", "/"))


def _hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def _segment(part: str) -> str:
    """One name segment MLflow's path check leaves as it is: `_` for an empty one, `_` before one
    that starts with `..` (`..` itself, or a name that would start with it)."""
    if not part:
        return "_"
    return f"_{part}" if part.startswith("..") or part == "." else part


def _fit(key: str, original: str, limit: int = MAX_KEY_LENGTH) -> str:
    """`key` cut to `limit` characters, keeping it distinct by a hash of `original`."""
    if len(key) <= limit:
        return key
    head = key[: limit - 9].rstrip("/")
    return f"{head}-{_hash(original)}"


def safe_id(text: object) -> str:
    """An id as one metric-name segment MLflow takes (see the module docstring); a safe id is unchanged."""
    raw = str(text)
    part = _BAD_CHARS.sub("_", raw.replace("%", "pct")).replace("/", "_")
    return _fit(_segment(part), raw, MAX_ID_LENGTH)


def safe_metric_key(key: str) -> str:
    """A metric name MLflow takes, as close to `key` as the rules allow; a valid name is unchanged."""
    if valid_metric_key(key):
        return key
    cleaned = _BAD_CHARS.sub("_", key.replace("%", "pct"))
    return _fit("/".join(_segment(p) for p in cleaned.split("/")), key)


@dataclass
class KeyMap:
    """The names one run logged (see the module docstring). `logged` maps each logged name to its
    original; `renamed` maps each changed original to its logged name, in the order seen."""

    logged: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)

    def name(self, original: str, candidate: str | None = None) -> str:
        """The name to log `original` under: `candidate` (default `safe_metric_key(original)`) unless
        another original took it, else `candidate-<hash of original>`. The same original always gets
        the same name in this map."""
        if original in self.renamed:
            return self.renamed[original]
        if self.logged.get(original) == original:
            return original
        base = candidate if candidate is not None else safe_metric_key(original)
        name, n = base, 8
        while self.logged.get(name, original) != original:  # taken by another original
            name = _fit(f"{base}-{_hash(original, n)}", f"{original}#{n}")
            n += 4
        self.logged[name] = original
        if name != original:
            self.renamed[original] = name
        return name

    def names(self, originals: list[str]) -> dict[str, str]:
        """{original: logged name} for a batch: names MLflow takes as they are first (they keep them),
        then the rest."""
        ordered = sorted(originals, key=lambda k: not valid_metric_key(k))
        return {k: self.name(k) for k in ordered}


def safe_ids(ids: list[str]) -> dict[str, str]:
    """{id: its segment} for the ids of one table: `safe_id` of each, ids that are safe as they are
    keeping their name, and two ids that sanitise alike told apart (`KeyMap.name`)."""
    keys = KeyMap()
    ordered = sorted(ids, key=lambda i: safe_id(i) != i)
    return {i: keys.name(i, safe_id(i)) for i in ordered}


__all__ = ["KEY_MAP_ARTIFACT", "MAX_KEY_LENGTH", "KeyMap", "safe_id", "safe_ids", "safe_metric_key", "valid_metric_key"]
