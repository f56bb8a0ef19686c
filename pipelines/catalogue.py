"""The pipeline catalogue: which pipelines there are, their parameters, and the checks on
`--param K=V` values before anything runs or is sent (`pipeline run|submit`, `schedule`).

- `get_pipeline(name)` builds a pipeline on request; `pipeline_parameters` lists its parameters.
- `parse_params` turns `k=v` strings into typed arguments (`coerce`, the one coercion of
  parameter text). A config field that is not a parameter of the pipeline goes into its `options`
  JSON parameter (pipelines/params.py), so any config field is still accepted.
- `validate_params` builds the configs the steps will build, so a bad value fails up front with
  the step's own one-line ConfigError.
- A pipeline module with `option_names(values)` (the generic `study` pipeline) takes the options of the
  study it is given instead of probe options: `--param K=V` puts that study's options into `options`,
  and its `check_studies` alone validates a run (it runs no probe).
"""

from __future__ import annotations

import importlib
import inspect
import json
import typing
from typing import Any

from factprobe.errors import ConfigError

from .params import OPTIONS, PER_STEP, config_values

PIPELINES = (
    "probe",
    "nightly_sweep",
    "regression",
    "counterfactual_icl",
    "coherency",
    "finetune_known_unknown",
    "belief",
    "design_space",
    "findings",
    "study",
)


def pipeline_key(name: str) -> str:
    """`nightly-sweep` -> `nightly_sweep` (the module name)."""
    return name.replace("-", "_")


def get_pipeline(name: str, local: bool = False):
    """The pipeline function for `name`; unknown names raise ConfigError listing the known ones.

    Pipelines are built on request from the probe registry and the cluster settings
    (`factprobe_ops.pipelines.platform.building`): `local=True` builds them for the local runner (no retries on
    preemption), `False` for a cluster. Nothing is read from the environment at import."""
    from .platform import building

    key = pipeline_key(name)
    if key not in PIPELINES:
        raise ConfigError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)}")
    with building(local=local):
        return importlib.import_module(f"factprobe_ops.pipelines.{key}").build()


def pipeline_parameters(pipe) -> dict[str, tuple[type, Any]]:
    """{name: (python type, default)} of a pipeline's parameters."""
    sig = inspect.signature(pipe.pipeline_func)
    return {n: (p.annotation, p.default) for n, p in sig.parameters.items()}


def parameter_descriptions(pipe) -> dict[str, str]:
    """{name: description} from the `Args:` section of the pipeline function's docstring (what
    the compiled spec and the Kubeflow UI show)."""
    doc = pipe.pipeline_func.__doc__ or ""
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    out: dict[str, str] = {}
    for line in args.splitlines():
        name, sep, text = line.strip().partition(": ")
        if sep and line.startswith("    ") and not line.startswith("     "):
            out[name] = text.strip()
    return out


def coerce(name: str, text: str, typ: Any) -> Any:
    """A parameter's text as its Kubeflow type (str, bool, int, float, list or dict; `Optional[int]`: an
    int, or None for empty text); lists also as comma-separated text. ConfigError naming the parameter
    and the type otherwise."""
    inner = [a for a in typing.get_args(typ) if a is not type(None)]
    if inner:  # Optional[X]: an optional parameter without a default
        typ = inner[0]
        if not text.strip():
            return None
    if typ is str:
        return text
    if typ is bool:
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
    elif typ is int:
        try:
            return int(text)
        except ValueError:
            pass
    elif typ is float:
        try:
            return float(text)
        except ValueError:
            pass
    elif typ in (list, dict):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            looks_json = text.lstrip().startswith(("[", "{"))
            value = [s.strip() for s in text.split(",") if s.strip()] if typ is list and not looks_json else None
        if isinstance(value, typ):
            return value
    raise ConfigError(f"parameter {name}={text!r}: expected {typ.__name__}")


def option_fields(name: str) -> set[str]:
    """The config fields pipeline `name` takes in `options`: every field of the base config and of
    every registered probe (the fine-tuning pipeline: and of FinetuneConfig), less the per-step
    and local-only ones. Which of them a run may set is decided by its probes (`validate_params`)."""
    from dataclasses import fields

    from factprobe.config import PIPELINE
    from factprobe.framework.config import option_classes

    classes = list(option_classes())
    if pipeline_key(name) == "finetune_known_unknown":
        from factprobe.finetune import FinetuneConfig

        from .finetune_known_unknown import FT_PER_STEP

        return (
            ({f.name for c in classes for f in fields(c) if f.metadata.get(PIPELINE, True)} | set(FinetuneConfig.field_names()))
            - set(FT_PER_STEP)
            - set(PER_STEP)
        )
    return {f.name for c in classes for f in fields(c) if f.metadata.get(PIPELINE, True)} - set(PER_STEP)


def parse_params(pipe, pairs: list[str], name: str) -> dict[str, Any]:
    """`k=v` strings -> typed arguments; unknown names, wrong types and values the steps would
    refuse (`validate_params`) raise ConfigError. A config field that is not a parameter of the
    pipeline goes into its `options` JSON (as text; the steps coerce it like any parameter)."""
    spec = pipeline_parameters(pipe)
    out: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--param needs key=value, got {pair!r}")
        k, v = pair.split("=", 1)
        k = k.strip().replace("-", "_")
        if k in spec:
            out[k] = coerce(k, v, spec[k][0])
        else:
            extra[k] = v
    if extra:
        study_options = _study_option_names(name, out)
        for k in extra:
            if k not in (study_options if study_options is not None else option_fields(name)):
                raise ConfigError(
                    f"pipeline {name} has no parameter {k!r}; parameters: {', '.join(spec)} (and any "
                    f"{'option of the study' if study_options is not None else 'probe option'}, "
                    "which goes into `options`)"
                )
    if extra:
        from factprobe_ops.components.steps._common import parse_options

        given = parse_options(out.get(OPTIONS))
        both = sorted(set(given) & set(extra))
        if both:
            raise ConfigError(f"{', '.join(both)} given both as --param and inside options; give it once")
        out[OPTIONS] = json.dumps({**given, **extra})
    validate_params(pipe, name, out)
    return out


def _study_option_names(name: str, values: dict[str, Any]) -> set[str] | None:
    """For a pipeline whose options are those of a study it is given (the generic `study` pipeline: its module's
    `option_names(values)`), the names `--param K=V` puts into `options`; None for the other pipelines."""
    module = importlib.import_module(f"factprobe_ops.pipelines.{pipeline_key(name)}")
    return module.option_names(values) if hasattr(module, "option_names") else None


def runs_studies(name: str) -> bool:
    """Whether pipeline `name` runs studies (its module has `check_studies`): a study builds its steps' probe
    configs from its own options, so the pipeline's values are checked as the study's, not as a probe's."""
    return hasattr(importlib.import_module(f"factprobe_ops.pipelines.{pipeline_key(name)}"), "check_studies")


def pipeline_probes(name: str, values: dict[str, Any]) -> list[str]:
    """The probes a run of pipeline `name` with parameter `values` runs: its `probes` parameter, the
    regression pipeline's `probe_name`, else the module's fixed `PROBES` / `PROBE`."""
    if "probes" in values:
        return list(values["probes"]) if isinstance(values["probes"], list) else [values["probes"]]
    if "probe_name" in values:
        return [values["probe_name"]]
    module = importlib.import_module(f"factprobe_ops.pipelines.{pipeline_key(name)}")
    probes = getattr(module, "PROBES", None)
    return list(probes) if probes is not None else [module.PROBE]


def _check_parameter_types(pipe, values: dict[str, Any], probes: list[str]) -> None:
    """Each config parameter of a probe this run does not run (a `probe` pipeline with
    `probes=["hgp"]` still shows ic-lke's options) is checked against its own config class, so
    `examples=1.5` is refused even when no step would build that config."""
    from factprobe.framework.config import BaseConfig, option_classes
    from factprobe.framework.registry import get_probe

    covered = {BaseConfig, *(get_probe(str(p)).config_class for p in probes)}
    for name in getattr(pipe, "config_param_names", []):
        owners = [c for c in option_classes() if name in c.field_names()]
        if owners and not covered.intersection(owners):
            owners[0].from_dict(config_values(values, [name]))


def validate_params(pipe, name: str, params: dict[str, Any]) -> None:
    """Refuse invalid parameter values before anything runs or is sent: build the configs the steps
    will build from them (the plan step's probe and `options` checks, `RunConfig` per probe as the
    probe steps do, `FinetuneConfig` per training set as the fine-tuning step does), so the
    one-line ConfigError is the step's own (`lora_r=-1: must be >= 0 ...`). Unknown probes name
    the parameter."""
    from factprobe.framework.registry import probe_names
    from factprobe_ops.components.steps._common import check_options, run_config

    values = {k: d for k, (_, d) in pipeline_parameters(pipe).items() if d is not inspect.Parameter.empty}
    values.update(params)
    key = pipeline_key(name)
    module = importlib.import_module(f"factprobe_ops.pipelines.{key}")
    if hasattr(module, "option_names"):  # a pipeline of a given study (`study`): its options are the study's own
        module.check_studies(
            values, {**config_values(values, getattr(pipe, "config_param_names", [])), OPTIONS: values.get(OPTIONS, "")}
        )
        return
    probes = pipeline_probes(name, values)
    known = probe_names()
    bad = [p for p in probes if p not in known]
    if bad or not probes:
        which = "probe_name" if "probe_name" in values else "probes"
        raise ConfigError(
            f"parameter {which}: unknown probe(s) {', '.join(map(repr, bad)) or '(none given)'}; choose from {', '.join(known)}"
        )
    if key == "regression":  # the gate step's own checks, before the candidate is probed
        from factprobe_ops.tracking.baseline import check_gate_settings, gate_needs, gateable_probes

        if values.get("probe_name") not in gateable_probes():
            raise ConfigError(f"parameter probe_name: {values.get('probe_name')!r} runs cannot be gated; {gate_needs()}")
        check_gate_settings(values.get("max_drop"), values.get("alpha"), names=("parameter max_drop", "parameter alpha"))
    if "models" in values and isinstance(values["models"], list) and not values["models"]:
        raise ConfigError("parameter models: the models list is empty")
    config = {**config_values(values, getattr(pipe, "config_param_names", [])), OPTIONS: values.get(OPTIONS, "")}
    extra: tuple = ()
    if key == "finetune_known_unknown":
        from factprobe.finetune import FinetuneConfig

        extra = (FinetuneConfig,)
    check_options(config, probes, extra)
    _check_parameter_types(pipe, values, probes)
    if not hasattr(module, "check_studies"):  # a study builds its steps' probe configs itself (from its own options)
        for probe in probes:
            run_config(config, probe=str(probe), model="-")
    if hasattr(module, "check_studies"):  # pipelines that run studies: each study's config, as its step builds it
        module.check_studies(values, config)
    if key == "finetune_known_unknown":
        from factprobe.finetune import NEEDS_TABLE
        from factprobe_ops.components.steps.finetune import finetune_config

        from .finetune_known_unknown import finetune_dict

        ft = finetune_dict(values)
        ft = config_values(ft, list(ft))  # as the steps read it (an empty relations list: every relation)
        for setting in values.get("settings") or []:  # as factprobe_ops.components.steps.finetune.run_sets_step
            finetune_config(ft, values.get("model") or "-", setting, "-" if setting in NEEDS_TABLE else None, "-")


def type_name(typ: Any) -> str:
    """`int`, `list`, ...; `int?` for `Optional[int]` (an optional parameter without a default)."""
    inner = [a for a in typing.get_args(typ) if a is not type(None)]
    return f"{inner[0].__name__}?" if inner else getattr(typ, "__name__", str(typ))


def format_params(name: str) -> str:
    """The parameters of pipeline `name` as a table: name, type, default (what `--param K=V`
    takes) and description: exactly the compiled pipeline's parameters."""
    pipe = get_pipeline(name)
    docs = parameter_descriptions(pipe)
    rows = [
        (
            k,
            type_name(t),
            "(required)" if d is inspect.Parameter.empty else "(empty)" if d is None else json.dumps(d),
            docs.get(k, ""),
        )
        for k, (t, d) in pipeline_parameters(pipe).items()
    ]
    w0 = max(len("PARAMETER"), *(len(r[0]) for r in rows))
    w1 = max(len("TYPE"), *(len(r[1]) for r in rows))
    w2 = max(len("DEFAULT"), *(len(r[2]) for r in rows))
    lines = [f"{'PARAMETER':<{w0}}  {'TYPE':<{w1}}  {'DEFAULT':<{w2}}  DESCRIPTION"]
    lines += [f"{a:<{w0}}  {b:<{w1}}  {c:<{w2}}  {d}" for a, b, c, d in rows]
    lines.append(
        "Any other config field: --param K=V puts it into `options` (a JSON object), checked against the probes run "
        "(the `study` pipeline: against the study's options)."
    )
    return "\n".join(lines)
