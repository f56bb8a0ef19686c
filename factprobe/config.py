"""The config machinery every command shares: `option` fields, `ConfigBase`, coercion and the command-line helpers.

Every config dataclass (a probe's, a study's, `finetune`'s, the probes' `BaseConfig`) subclasses `ConfigBase`
and declares each field with `option(default, help, ...)`, so its help text lives in `field(metadata=...)`; the
argparse options (`add_config_arguments`) and the Kubeflow pipeline parameters and their descriptions are
generated from it. Validation follows PEFT's style: in `__post_init__`, raising `ConfigError` (a `ValueError`)
that names the field and the value. `from_dict` coerces the strings that command lines, Kubeflow (ints in dicts
come back as "5.0") and MLflow parameters hand over.

This module is the framework; the instances live with what they configure (`factprobe.framework.config`:
`BaseConfig`, `RunConfig`; `factprobe.finetune.config`; each study's module). It imports nothing of factprobe
but `errors`, so every layer may use it.
"""

from __future__ import annotations

import argparse
import json
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

from .errors import ConfigError

#: metadata keys of `option` fields
HELP, CHOICES, DECIDES_RESULTS, PIPELINE = "help", "choices", "decides_results", "pipeline"


def option(default: Any, help: str, *, choices: tuple | None = None, decides_results: bool = True, pipeline: bool = True) -> Any:
    """A config field with its help text.

    `choices` restricts the value (checked by `ConfigBase`); `decides_results=False` leaves the
    field out of the results key (device, token budget, output folder); `pipeline=False` keeps it
    out of the Kubeflow pipeline parameters (local-only settings such as `out`).
    """
    meta = {HELP: help, CHOICES: choices, DECIDES_RESULTS: decides_results, PIPELINE: pipeline}
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def field_type(cls: type, name: str) -> tuple[type, bool]:
    """(base type, optional?) of a config field: `int | None` -> (int, True)."""
    hint = typing.get_type_hints(cls)[name]
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return (typing.get_origin(inner[0]) or inner[0]), type(None) in args
    return (typing.get_origin(hint) or hint), False


def _coerce(cls: type, name: str, value: Any) -> Any:
    """Turn a string/float handed over by a CLI, Kubeflow or MLflow into the field's type; ConfigError
    (one line naming the option) for a value that is not one. An integer field takes only an exact whole
    number within `INT_RANGE` (`_as_int`: `inf`, `1e999` and 10**40 are refused, not an OverflowError)."""
    typ, optional = field_type(cls, name)
    if value is None:
        return None
    if isinstance(value, str) and optional and value.strip() in ("", "None", "none", "null"):
        return None
    try:
        if typ is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low in ("true", "1", "yes"):
                    return True
                if low in ("false", "0", "no", ""):
                    return False
                raise ValueError
            return bool(value)
        if typ is int:
            return _as_int(name, value)
        if typ is float:
            return float(value)
        if typ is list:
            if isinstance(value, str):
                text = value.strip()
                return json.loads(text) if text.startswith("[") else value  # "P36,P19" is split by the config
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return [value]  # one number for a list field (`shots=4`), as "4" is on the command line
            return list(value)
        if typ is str:
            return value if isinstance(value, str) else str(value)
    except ConfigError:
        raise
    except (ValueError, TypeError, OverflowError, json.JSONDecodeError):
        raise ConfigError(f"{name}: expected {typ.__name__}, got {_shown(value)}") from None
    return value


def _shown(value: Any, limit: int = 60) -> str:
    """`repr(value)`, its middle cut out when longer than `limit` (a 400-digit number stays one short line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]} ({len(text)} characters)"


#: the integers an option may hold: what numpy and torch hold in an int64
INT_RANGE = range(-(2**63), 2**63)


def _as_int(name: str, value: Any) -> int:
    """`value` (an int, an integral float such as Kubeflow's 5.0, or text: "5", "5.0", "1e3") as an exact int,
    never through a float (which would turn "1e999" into inf and a 20-digit number into another one).
    ConfigError naming the option for an infinity or NaN (`inf`, `nan`) and for a number outside
    `INT_RANGE` (`1e999`, 10**40); ValueError or TypeError (which `_coerce` turns into its one line) for
    text that is no number, a fraction, a bool or another type."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError
    if isinstance(value, str):
        try:
            number = Decimal(value.strip() or "x")
        except InvalidOperation:
            raise ValueError from None
    else:
        number = Decimal(value)
    if not number.is_finite():
        raise ConfigError(f"{name}: expected a whole number, got {_shown(value)} (not finite)")
    if not INT_RANGE.start <= number < INT_RANGE.stop:  # before int(): `1e999999999` would build a huge int
        raise ConfigError(f"{name}: {_shown(value)} is out of range; an integer option lies in [-2**63, 2**63)")
    if number != number.to_integral_value():
        raise ValueError
    return int(number)


@dataclass
class ConfigBase:
    """Base of every config dataclass: choices checked, `to_dict`/`from_dict`, `check` helper.

    Rules every config shares (checked here, before a subclass's own checks): a value must be one
    of the field's `choices`; every float is finite (no nan or inf); a `seed` field lies in
    `SEED_RANGE`, 0 <= seed < 2**32 (what numpy, torch and transformers all accept)."""

    #: the one seed rule of every command: range(0, 2**32)
    SEED_RANGE: ClassVar[range] = range(2**32)

    def __post_init__(self) -> None:
        for f in fields(self):
            choices = f.metadata.get(CHOICES)
            value = getattr(self, f.name)
            if choices and value not in choices:
                raise ConfigError(f"{f.name}: unknown value {value!r}; choose one of {', '.join(map(str, choices))}")
            if isinstance(value, float):
                self.check(math.isfinite(value), f.name, value, "must be a finite number")
        if "seed" in self.field_names():
            seed = self.seed  # type: ignore[attr-defined]
            self.check(
                isinstance(seed, int) and not isinstance(seed, bool) and seed in self.SEED_RANGE,
                "seed",
                seed,
                "must be in [0, 2**32)",
            )

    @staticmethod
    def check(ok: bool, name: str, value: Any, why: str) -> None:
        """Raise `ConfigError("<name>=<value!r>: <why>")` unless `ok`."""
        if not ok:
            raise ConfigError(f"{name}={value!r}: {why}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, d: dict[str, Any], strict: bool = True):
        """Build from a dict, coercing strings; unknown keys raise ConfigError when `strict`."""
        names = set(cls.field_names())
        unknown = sorted(set(d) - names)
        if strict and unknown:
            raise ConfigError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**{k: _coerce(cls, k, v) for k, v in d.items() if k in names})


def split_relations(value: list[str] | str | None) -> list[str] | None:
    """`"P36,P19"` or a list -> ['P36', 'P19']; None/"" -> None (all relations).

    A value made only of separators (`" , "`) is an error, not "all relations"."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            return None
        parts = [r.strip() for r in value.split(",")]
    else:
        parts = [str(r).strip() for r in value]
    if any(not p for p in parts) or not parts:
        raise ConfigError(f"relations={value!r}: empty relation id; give ids like P36,P19 or leave it empty for all")
    return list(dict.fromkeys(parts))


# ------------------------------------------------------------------ argparse from field metadata
def add_config_arguments(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One `--field-name` option per field of `cls`, with its help, type, default and choices.

    Defaults are `argparse.SUPPRESS`, so only options the user gave reach `namespace_to_dict`
    and the dataclass defaults stay the single source of defaults."""
    for f in fields(cls):
        if f.name in skip:
            continue
        typ, _ = field_type(cls, f.name)
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        flag = "--" + f.name.replace("_", "-")
        own = f.metadata.get(HELP, "")
        # a help text that already states its default ("(default: all)") is not given a second one
        help_text = (own if "default" in own else f"{own} (default: {default!r})").replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": help_text}
        if typ is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["metavar"] = f.name.upper()
            if f.metadata.get(CHOICES):
                kwargs["choices"] = list(f.metadata[CHOICES])
                kwargs.pop("metavar")
        parser.add_argument(flag, **kwargs)


def namespace_to_dict(ns: argparse.Namespace, classes: tuple[type, ...]) -> dict[str, Any]:
    """The config fields of `classes` that the user set on the command line."""
    names = {n for c in classes for n in c.field_names()}
    return {k: v for k, v in vars(ns).items() if k in names}
