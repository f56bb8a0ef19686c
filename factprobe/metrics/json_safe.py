"""Strict JSON for metrics: every NaN / inf becomes `null`, with a reason next to it.

Metrics are NaN where they are undefined (no items, a model that knows no fact, fewer than two
relations for a correlation) and `json.dumps` would write the non-standard `NaN`, which strict
readers (JavaScript, `jq`, many JSON libraries) reject. `json_safe(x)` returns a copy of `x`
where:

- every float that is NaN or +-inf (Python or numpy) is replaced by `None`;
- in a dict, next to each key `k` whose value is such a float, or a list/tuple holding one, a key
  `k_reason` explains it (an existing `k_reason` is kept). The reason is "undefined: no items"
  when the same dict has a count `n` (or `n_items`, `n_joined`, `n_templates`, `n_relations`)
  equal to 0, "undefined: infinite" for inf, else `default_reason`;
- numpy scalars become Python scalars, numpy arrays and tuples become lists, so the result
  serialises with `json.dumps(..., allow_nan=False)`.

Usage::

    json.dumps(json_safe(summarize(results)), allow_nan=False)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

DEFAULT_REASON = "undefined: not a finite number"
NO_ITEMS_REASON = "undefined: no items"
INFINITE_REASON = "undefined: infinite"
COUNT_KEYS = ("n", "n_items", "n_joined", "n_templates", "n_relations")


def _scalar(value: Any) -> Any:
    """numpy scalars as Python scalars; everything else unchanged."""
    if isinstance(value, np.generic):
        return value.item()
    return value


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _first_non_finite(value: Any) -> float | None:
    """The first NaN / inf float in `value` (a scalar, or nested inside lists), else None."""
    value = _scalar(value)
    if _non_finite(value):
        return value
    if isinstance(value, (list, tuple, np.ndarray)):
        for v in value:
            found = _first_non_finite(v)
            if found is not None:
                return found
    return None


def _reason(container: dict, bad: float, default_reason: str) -> str:
    if any(container.get(k) == 0 and not isinstance(container.get(k), bool) for k in COUNT_KEYS):
        return NO_ITEMS_REASON
    if math.isinf(bad):
        return INFINITE_REASON
    return default_reason


def json_safe(obj: Any, default_reason: str = DEFAULT_REASON) -> Any:
    """A copy of `obj` that `json.dumps(..., allow_nan=False)` accepts (rules in the module
    docstring). Dicts, lists, tuples and numpy arrays are walked recursively; other objects are
    returned as they are (numpy scalars as Python scalars)."""
    obj = _scalar(obj)
    if isinstance(obj, dict):
        out: dict = {}
        for key, value in obj.items():
            key = _scalar(key)
            out[key] = json_safe(value, default_reason)
            bad = _first_non_finite(value) if not isinstance(value, dict) else None
            reason_key = f"{key}_reason"
            if bad is not None and reason_key not in obj:
                out[reason_key] = _reason(obj, bad, default_reason)
        return out
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [json_safe(v, default_reason) for v in obj]
    if _non_finite(obj):
        return None
    return obj


__all__ = ["DEFAULT_REASON", "INFINITE_REASON", "NO_ITEMS_REASON", "json_safe"]
