"""Pipeline parameters: each pipeline's own, generated from the config dataclasses (the one place
that turns dataclass fields into Kubeflow parameters).

The rule for which options are "a pipeline's own" (issue 19 item 2; the Kubeflow UI shows at most
`MAX_PARAMS` parameters per pipeline):

1. its own steps' parameters (models, settings, the gate's baseline, ...), declared by the pipeline;
2. the essentials of `BaseConfig` that every probe run needs to be chosen: `BASE_ESSENTIALS`
   (source, data, train data, relations, facts per relation, seed);
3. every field of the config class of each probe it runs (`config_params(probes)`), less the fields
   its steps set themselves (`exclude`). A pipeline whose probe list is a parameter (`probe`,
   `nightly_sweep`, `regression`) counts the probes of that parameter's default (`ic-lke`);
4. `tracking_uri`, `trigger`, `work_root` and `options` (`common_params`).

Every other config field keeps its default, or is set through `options`: ONE optional JSON
object (`{"eic_interleave": 2}`), validated against the config classes of the probes the run runs
(`options.check_options`): up front by `factprobe pipeline run/submit/schedule` and again in the
steps. `factprobe pipeline run NAME --param X=Y` still takes any config field: a field that is not
a parameter of NAME goes into `options` (factprobe_ops/pipelines/catalogue.py).

Kubeflow parameters cannot be None, so an optional field (`int | None`, `str | None`) or a list
field is a `str` parameter where "" means "not set". Inside the pipeline the config-carrying
parameters are packed into ONE dict (`config_dict`) that travels to every step beside the
`options` text; the steps read both with `factprobe_ops.components.steps._common.run_config`, which expands
`options` and coerces the strings Kubeflow substitutes ("5.0" for 5).

`make_pipeline` builds a `@dsl.pipeline` function with an explicit signature and an `Args:`
docstring from the pipeline's parameters.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

from kfp import dsl

from factprobe.config import HELP, PIPELINE, field_type
from factprobe.probes.config import BaseConfig
from factprobe.probes.registry import get_probe, probe_names

#: the most parameters a compiled pipeline may show in the Kubeflow UI
MAX_PARAMS = 25
#: BaseConfig fields every pipeline has as parameters (rule 2 of the module docstring)
BASE_ESSENTIALS = ("source", "data", "train_data", "relations", "max_facts_per_relation", "seed")
#: the probes whose options a pipeline with a probe-list parameter shows (its default)
DEFAULT_PROBES = ["ic-lke"]
#: defaults that differ in pipelines from the command line (a pipeline probes a sample by default)
PIPELINE_DEFAULTS = {"max_facts_per_relation": "20"}
#: fields that pipelines set per step rather than as a parameter
PER_STEP = ("model",)
#: the name of the one JSON parameter that carries every other option
OPTIONS = "options"


@dataclass(frozen=True)
class Param:
    """One pipeline parameter: name, Python type (str/int/float/bool/list), default, description."""

    name: str
    type: type
    default: Any
    help: str


def field_param(cls: type, name: str, prefix: str = "") -> Param:
    """The pipeline parameter of config field `cls.name`: optional and list fields become `str`
    ("" = not set), the field's help text its description (after `prefix`, else capitalised)."""
    f = next(f for f in fields(cls) if f.name == name)
    typ, optional = field_type(cls, name)
    default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    if optional or typ is list:
        typ, default = (
            str,
            "" if default is None else (",".join(map(str, default)) if isinstance(default, list) else str(default)),
        )
    default = PIPELINE_DEFAULTS.get(name, default)
    help_text = f.metadata.get(HELP, "")
    if typ is str and (optional or name in PIPELINE_DEFAULTS):
        help_text += " (empty: not set)"
    if not prefix and help_text:
        help_text = help_text[0].upper() + help_text[1:]
    return Param(name, typ, default, prefix + help_text)


def dataclass_params(cls: type, names: Sequence[str] | None = None, exclude: Sequence[str] = (), prefix: str = "") -> list[Param]:
    """Parameters for the fields of config dataclass `cls` (all of them, or `names` in that
    order), skipping `exclude`, `PER_STEP` and fields declared `pipeline=False`."""
    by_name = {f.name: f for f in fields(cls)}
    wanted = list(names) if names is not None else list(by_name)
    return [
        field_param(cls, n, prefix)
        for n in wanted
        if n not in exclude and n not in PER_STEP and by_name[n].metadata.get(PIPELINE, True)
    ]


def config_params(probes: Sequence[str], exclude: Sequence[str] = ()) -> list[Param]:
    """The config-carrying parameters of a pipeline that runs `probes`: `BASE_ESSENTIALS`, then
    each probe's config fields (each name once), less `exclude` (rules 2 and 3)."""
    out = {p.name: p for p in dataclass_params(BaseConfig, BASE_ESSENTIALS, exclude)}
    for probe in probes:
        for p in dataclass_params(get_probe(probe).config_class, exclude=exclude):
            out.setdefault(p.name, p)
    return list(out.values())


def common_params(trigger: str) -> list[Param]:
    """The parameters every pipeline has (rule 4)."""
    return [
        Param(
            "tracking_uri",
            str,
            "http://mlflow.factprobe.svc.cluster.local:5000",
            "MLflow tracking URI; credentials come from the mlflow-credentials secret. Use 'none' to disable tracking.",
        ),
        Param("trigger", str, trigger, "What launched this run: local, ui, nightly or ci (an MLflow tag)."),
        Param(
            "work_root",
            str,
            "",
            "Folder for resumable per-probe work (a mounted volume on the cluster); empty for the default cache.",
        ),
        Param(
            OPTIONS,
            str,
            "",
            'Further options as one JSON object, e.g. {"eic_interleave": 2}: any config field of '
            "the probes this run runs that is not a parameter here (checked before anything runs); empty: none.",
        ),
    ]


def probes_param(default: list[str] | None = None) -> Param:
    return Param(
        "probes",
        list,
        default or list(DEFAULT_PROBES),
        f"Probes to run for every model: {', '.join(probe_names())} "
        "(options of a probe other than the default go into `options`).",
    )


def config_dict(values: dict[str, Any], params: Sequence[Param]) -> dict[str, Any]:
    """The one config object of a pipeline run: each config-carrying parameter of `params` by
    name. `options` is not in it: it travels as its own step input (a JSON text inside a dict
    constant would be substituted into the dict's JSON unescaped), and each component puts it
    back under `OPTIONS` for the step (`factprobe_ops.components.steps._common.expand_options`)."""
    return {p.name: values[p.name] for p in params}


def make_pipeline(
    name: str,
    display_name: str,
    description: str,
    summary: str,
    own: list[Param],
    trigger: str,
    body: Callable[[dict[str, Any]], None],
    config: Sequence[Param] = (),
):
    """A Kubeflow pipeline whose parameters are `own` + `config` + `common_params(trigger)`.

    `body(values)` receives {parameter name: pipeline channel} and adds the steps. Raises
    ValueError when a name repeats or the pipeline would show more than `MAX_PARAMS` parameters."""
    params = list(own) + list(config) + common_params(trigger)
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise ValueError(f"pipeline {name}: parameter names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    if len(params) > MAX_PARAMS:
        raise ValueError(f"pipeline {name} has {len(params)} parameters, more than {MAX_PARAMS}: move some into `options`")

    def pipeline_func(*args: Any) -> None:
        body(dict(zip(names, args)))

    pipeline_func.__name__ = pipeline_func.__qualname__ = name
    pipeline_func.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.type) for p in params]
    )
    pipeline_func.__annotations__ = {p.name: p.type for p in params}
    pipeline_func.__doc__ = summary + "\n\nArgs:\n" + "".join(f"    {p.name}: {p.help}\n" for p in params)
    pipe = dsl.pipeline(name=display_name, description=description)(pipeline_func)
    pipe.config_param_names = [p.name for p in config]  # what config_dict packs (the catalogue reads it)
    return pipe
