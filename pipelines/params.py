"""Pipeline parameters generated from the probe registry and the config dataclasses.

Every field of `BaseConfig` and of each registered probe's config class (once per name) becomes
a pipeline parameter, with the field's help text as its description in the Kubeflow UI. Adding a
probe module adds its options to every pipeline; nothing here names a probe.

Kubeflow parameters cannot be None, so an optional field (`int | None`, `str | None`) or a list
field is a `str` parameter where "" means "not set". Inside the pipeline the config-carrying
parameters are packed into ONE dict (`config_dict`) that travels to every step; the steps read it
with `RunConfig.from_dict`, which also coerces the strings Kubeflow substitutes ("5.0" for 5).

`make_pipeline` builds a `@dsl.pipeline` function with an explicit signature and an `Args:`
docstring from these parameters plus the pipeline's own ones.
"""
from __future__ import annotations

import inspect
from dataclasses import MISSING, dataclass, fields
from typing import Any, Callable

from kfp import dsl

from factprobe.probes.config import HELP, PIPELINE, field_type
from factprobe.probes.registry import option_classes, probe_names

#: defaults that differ in pipelines from the command line (a pipeline probes a sample by default)
PIPELINE_DEFAULTS = {"max_facts_per_relation": "20"}
#: fields that pipelines set per step rather than as a parameter
PER_STEP = ("model",)


@dataclass(frozen=True)
class Param:
    """One pipeline parameter: name, Python type (str/int/float/bool/list), default, description."""

    name: str
    type: type
    default: Any
    help: str


def config_params() -> list[Param]:
    """The config-carrying parameters, in declaration order (base fields first)."""
    out: dict[str, Param] = {}
    for cls in option_classes():
        for f in fields(cls):
            if f.name in out or f.name in PER_STEP or not f.metadata.get(PIPELINE, True):
                continue
            typ, optional = field_type(cls, f.name)
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            if optional or typ is list:
                typ, default = str, "" if default is None else (",".join(default) if isinstance(default, list) else str(default))
            default = PIPELINE_DEFAULTS.get(f.name, default)
            help_text = f.metadata.get(HELP, "")
            if typ is str and (optional or f.name in PIPELINE_DEFAULTS):
                help_text += " (empty: not set)"
            out[f.name] = Param(f.name, typ, default, help_text[0].upper() + help_text[1:] if help_text else "")
    return list(out.values())


def common_params(trigger: str) -> list[Param]:
    return [
        Param("tracking_uri", str, "http://mlflow.factprobe.svc.cluster.local:5000",
              "MLflow tracking URI; credentials come from the mlflow-credentials secret. Use 'none' to disable tracking."),
        Param("trigger", str, trigger, "What launched this run: local, ui, nightly or ci (an MLflow tag)."),
        Param("work_root", str, "", "Folder for resumable per-probe work (a mounted volume on the cluster); empty for the default cache."),
    ]


def probes_param(default: list[str] | None = None) -> Param:
    return Param("probes", list, default or ["ic-lke"], f"Probes to run for every model: {', '.join(probe_names())}.")


def config_dict(values: dict[str, Any]) -> dict[str, Any]:
    """The one config object of a pipeline run: every config-carrying parameter by name."""
    return {p.name: values[p.name] for p in config_params()}


def make_pipeline(name: str, display_name: str, description: str, summary: str, own: list[Param], trigger: str,
                  body: Callable[[dict[str, Any]], None]):
    """A Kubeflow pipeline whose parameters are `own` + the config parameters + tracking/trigger/work_root.

    `body(values)` receives {parameter name: pipeline channel} and adds the steps."""
    params = own + config_params() + common_params(trigger)
    names = [p.name for p in params]

    def pipeline_func(*args: Any) -> None:
        body(dict(zip(names, args)))

    pipeline_func.__name__ = pipeline_func.__qualname__ = name
    pipeline_func.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.type)
         for p in params])
    pipeline_func.__annotations__ = {p.name: p.type for p in params}
    pipeline_func.__doc__ = summary + "\n\nArgs:\n" + "".join(f"    {p.name}: {p.help}\n" for p in params)
    return dsl.pipeline(name=display_name, description=description)(pipeline_func)
