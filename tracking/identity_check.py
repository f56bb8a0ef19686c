"""Like with like: what two measurement identities (`factprobe.identity`) say about comparing their results.

`compare`, `regress`, `baseline promote`, the nightly comparison and the cross-model maps pair or
gate two results only when they measured the same thing. The identity (`metrics.json` /
`run_config.json` `identity`, or a run's MLflow tags) holds the data digest, the input locations
and the numerics; this module turns two of them into one-line reasons:

- `data_difference(a, b, names, settings)`: "" when the data digests are equal, else the digests and
  which inputs' locations differ (`data /abs/x (baseline) vs /abs/y (candidate)`), else the settings
  that differ (`settings_difference`: `--seed 0 (baseline) vs 1 (candidate)`), else that the inputs
  are at the same locations and their content changed.
- `settings_difference(config_a, config_b, names)`: the run settings (flat `RunConfig.to_dict()`)
  that decide the items (`factprobe.metrics.same_data.DATA_OPTIONS`, `relations`) and differ; when
  none does, any other that differs except the model and the numerics and runtime ones
  (`NOT_DATA_SETTINGS`).
- `numerics_difference(a, b)`: "" when alike, else the differences that a gate counts
  (`factprobe.identity.numerics_changes`: dtype, device type, transformers major version).
- `MISSING`: the sentence for a run whose result carries no identity (made before identities were
  recorded): a gate refuses it, a comparison warns in one line and goes on.

Pure functions over plain dicts, except `tracked_identity`, which reads an MLflow run (given its client).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from factprobe.identity import identity_of, numerics_changes, short

#: why a run without an identity cannot be checked (completed by the caller: "<run> " + MISSING)
MISSING = "records no measurement identity (it was made before factprobe recorded model, data and numerics)"


def _inputs(ident: Mapping[str, Any]) -> dict[str, str]:
    """{input name: location} of an identity's `inputs`."""
    out = {}
    for i in ident.get("inputs") or []:
        if isinstance(i, Mapping) and i.get("name"):
            out[str(i["name"])] = str(i.get("location"))
    return out


def input_differences(a: Mapping[str, Any], b: Mapping[str, Any], names: Sequence[str] = ("a", "b")) -> list[str]:
    """The inputs whose locations differ between identities `a` and `b`, as phrases
    `data /x (a) vs /y (b)` or `train_data /z (a) vs none (b)`; [] when every input is at the same place."""
    ia, ib = _inputs(a), _inputs(b)
    out = []
    for name in [*ia, *(n for n in ib if n not in ia)]:
        la, lb = ia.get(name), ib.get(name)
        if la != lb:
            out.append(f"{name} {la or 'none'} ({names[0]}) vs {lb or 'none'} ({names[1]})")
    return out


#: settings that say which model runs and how, not which items: never named as a data difference
NOT_DATA_SETTINGS = frozenset({"probe", "model", "base_model", "out", "device", "dtype", "threads", "token_budget"})


def settings_difference(
    config_a: Mapping[str, Any] | None, config_b: Mapping[str, Any] | None, names: Sequence[str] = ("a", "b")
) -> str:
    """ "" when the two flat run configurations agree on what decides the items (or either is None);
    else `--seed 0 (a) vs 1 (b); --relations not set (a) vs P36 (b)`: the differing data options
    (`DATA_OPTIONS`, `relations`), or when none differs, the other differing settings except
    `NOT_DATA_SETTINGS` (a probe option that builds other items)."""
    from factprobe.metrics.same_data import data_differences

    if not isinstance(config_a, Mapping) or not isinstance(config_b, Mapping):
        return ""
    diffs = data_differences(dict(config_a), dict(config_b))
    if not diffs:
        keys = [k for k in config_a if k in config_b and k not in NOT_DATA_SETTINGS]
        diffs = {k: (config_a[k], config_b[k]) for k in keys if config_a[k] != config_b[k]}

    def shown(v: Any) -> str:
        return "not set" if v is None else ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)

    return "; ".join(
        f"--{k.replace('_', '-')} {shown(va)} ({names[0]}) vs {shown(vb)} ({names[1]})" for k, (va, vb) in diffs.items()
    )


def data_difference(a: Mapping[str, Any], b: Mapping[str, Any], names: Sequence[str] = ("a", "b"), settings: str = "") -> str:
    """ "" when identities `a` and `b` have the same data digest; else one clause naming the two
    digests and the inputs that differ, e.g. `data digest sha256:1a2b (a) vs sha256:3c4d (b); inputs
    that differ: data /x (a) vs /y (b)`; else the `settings` that differ (`settings_difference`:
    `...; settings that differ: --seed 0 (a) vs 1 (b)`); else `...; the inputs are at the same
    locations (...), so their content changed in between`."""
    da, db = a.get("data_digest"), b.get("data_digest")
    if da == db:
        return ""
    head = f"data digest {short(str(da))} ({names[0]}) vs {short(str(db))} ({names[1]})"
    moved = input_differences(a, b, names)
    if moved:
        return f"{head}; inputs that differ: {'; '.join(moved)}" + (f"; settings that differ: {settings}" if settings else "")
    if settings:
        return f"{head}; settings that differ: {settings}"
    if _inputs(a):
        return (
            f"{head}; the inputs are at the same locations ({', '.join(f'{k} {v}' for k, v in _inputs(a).items())}), "
            f"so their content changed in between"
        )
    return f"{head} (no input file recorded: the source's own data or the options differ)"


def numerics_difference(a: Mapping[str, Any], b: Mapping[str, Any], names: Sequence[str] = ("a", "b")) -> str:
    """ "" when the numerics of identities `a` and `b` are alike for a gate (dtype, device type,
    transformers major version); else `dtype bfloat16 (a) vs float32 (b); device cuda (a) vs cpu (b)`."""
    changes = numerics_changes(a.get("numerics") or {}, b.get("numerics") or {})
    return "; ".join(c.replace(" vs ", f" ({names[0]}) vs ", 1) + f" ({names[1]})" for c in changes)


def identity_from_tracking(tags: Mapping[str, str], params: Mapping[str, str]) -> dict | None:
    """The identity of an MLflow probe run from its tags (`factprobe.data_digest`, `factprobe.numerics`
    as compact JSON, `factprobe.model_revision`, `factprobe.config_key`) and its params
    (`identity.input.<name>`: the input locations); None when the run carries no numerics tag (a run
    logged before identities were recorded)."""
    raw = tags.get("factprobe.numerics")
    digest = tags.get("factprobe.data_digest")
    if not raw or not digest:
        return None
    try:
        num = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(num, dict):
        return None
    inputs = [
        {"name": k.removeprefix("identity.input."), "location": v, "digest": digest}
        for k, v in sorted(params.items())
        if k.startswith("identity.input.")
    ]
    return {
        "model_revision": tags.get("factprobe.model_revision", ""),
        "data_digest": digest,
        "config_key": tags.get("factprobe.config_key", ""),
        "numerics": num,
        "inputs": inputs,
    }


def tracked_identity(client, run) -> dict | None:
    """The identity of MLflow probe run `run` (read with `client`): from its tags and params
    (`identity_from_tracking`), else from its results/metrics.json artifact; None for a run logged
    before identities were recorded."""
    import tempfile
    from pathlib import Path

    ident = identity_from_tracking(dict(run.data.tags), dict(run.data.params))
    if ident is not None:
        return ident
    with tempfile.TemporaryDirectory() as d:
        try:
            local = client.download_artifacts(run.info.run_id, "results/metrics.json", d)
            return identity_of(json.loads(Path(local).read_text(encoding="utf-8")))
        except Exception:  # noqa: BLE001 - no such artifact (an old run) or an unreadable one
            return None


__all__ = [
    "MISSING",
    "data_difference",
    "identity_from_tracking",
    "input_differences",
    "numerics_difference",
    "settings_difference",
    "short",
    "tracked_identity",
]
