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
a parameter of NAME goes into `options` (pipelines/catalogue.py).

Parameter types (issue 38 item 3): in the pipelines compiled for a cluster a whole-number field is a
NUMBER_INTEGER parameter (an optional one without a default, `Optional[int] = None`, is left empty for
"not set") and a list field a LIST (default: the field's, `[]` for "not set"); an optional text field is a
STRING where "" means "not set". Every default is the one its description states. kfp's local runner
cannot take an optional parameter without a value, nor a list inside the config dict, so the pipelines
built for it (`pipeline run`, `platform.local_build()`) keep those two kinds as text ("" = not set, lists
comma-separated) and convert the typed values `--param` gives them (`LocalPipeline`).

Inside the pipeline the config-carrying parameters are packed into ONE dict (`config_dict`) that
travels to every step beside the `options` text; the steps read both with
`factprobe_ops.components.steps._common.run_config`, which expands `options` and coerces the strings
Kubeflow substitutes ("5.0" for 5). A list, or an optional parameter that may be empty, cannot sit in a
dict constant (Kubeflow substitutes a placeholder there as text, and has nothing to substitute for an
empty optional one), so in a cluster build those reach a small `pack-config` step as inputs of their own
and the steps take its output dict (`packed`).

`make_pipeline` builds a `@dsl.pipeline` function with an explicit signature and an `Args:`
docstring from the pipeline's parameters.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, Optional

from kfp import dsl

from factprobe.config import HELP, PIPELINE, field_type
from factprobe.framework.config import BaseConfig
from factprobe.framework.registry import get_probe, probe_names
from factprobe_ops.components.pack_config import pack_config
from factprobe_ops.components.steps.pack_config import TEXT_LISTS, pack

from .platform import cpu_step, local_build

#: the most parameters a compiled pipeline may show in the Kubeflow UI
MAX_PARAMS = 25
#: BaseConfig fields every pipeline has as parameters (rule 2 of the module docstring)
BASE_ESSENTIALS = ("source", "data", "train_data", "relations", "max_facts_per_relation", "seed")
#: the probes whose options a pipeline with a probe-list parameter shows (its default)
DEFAULT_PROBES = ["ic-lke"]
#: defaults that differ in the probe pipelines from the command line (a pipeline probes a sample by
#: default), with the description that says so: {field of BaseConfig or a probe config: (default, description)}
PIPELINE_DEFAULTS = {
    "max_facts_per_relation": (
        20,
        "Test facts per relation, a deterministic sample (pipelines: 20 by default, the command line: all; "
        "a number above a relation's size takes all of them)",
    ),
}
#: descriptions of pipeline parameters whose field help speaks of an empty value that a number parameter cannot hold
PIPELINE_HELP = {
    "qa_train_per_relation": "Train-split facts per relation in the exemplar pool (counterfactual ICL sorts these into "
    "known and unknown; a number above a relation's train split takes all of them)",
}
#: the parameters a cluster build hands to the `pack-config` step as inputs of their own (`packed`): lists,
#: and whole numbers that may be left empty (components/pack_config.py has one input for each)
PACKED_LISTS = ("relations", "template_sources", "shots", "n")
PACKED_OPTIONAL_INTS = ("max_templates", "max_candidates", "grad_accum", "train_size", "choices")
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
    """The pipeline parameter of config field `cls.name` (module docstring): its type and default, the
    field's help text its description (after `prefix`, else capitalised). Cluster builds: an int stays an
    int (default None when the field's is: an optional parameter), a list a list; local builds: an optional
    int or a list becomes `str` ("" = not set, lists comma-separated). An optional str is `str`, "" = not set."""
    f = next(f for f in fields(cls) if f.name == name)
    typ, optional = field_type(cls, name)
    default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    help_text = f.metadata.get(HELP, "")
    if name in PIPELINE_DEFAULTS and issubclass(cls, BaseConfig):
        default, help_text = PIPELINE_DEFAULTS[name]
    help_text = PIPELINE_HELP.get(name, help_text)
    if name in TEXT_LISTS and not local_build():  # a list in the Kubeflow form, comma-joined for the config
        typ, default = list, [s.strip() for s in str(default or "").split(",") if s.strip()]
    as_text = typ is str or (local_build() and (typ is list or (optional and default is None)))
    if as_text:
        text = "" if default is None else (",".join(map(str, default)) if isinstance(default, list) else str(default))
        typ, default = str, text
        if optional:
            help_text += " (empty: not set)"
    elif typ is list:
        default = list(default or [])
        if optional:
            help_text += " (a list; empty: not set)"
    elif optional and default is None:
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


def config_dict(values: dict[str, Any], params: Sequence[Param]) -> Any:
    """The one config object of a pipeline run: each config-carrying parameter of `params` by
    name, as the steps take it (`packed`). `options` is not in it: it travels as its own step input
    (a JSON text inside a dict constant would be substituted into the dict's JSON unescaped), and each
    component puts it back under `OPTIONS` for the step (`factprobe_ops.components.steps._common.expand_options`)."""
    return packed({p.name: values[p.name] for p in params})


def config_values(values: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """{name: value} of the config-carrying parameters `names` (those in `values`) as the steps of a run
    read them: what the `pack-config` step makes of them (an empty optional list is None, a `TEXT_LISTS`
    list comma-joined; components/steps/pack_config.py)."""
    given = {n: values[n] for n in names if n in values}
    return pack(given, [n for n in given if isinstance(given[n], list)], given)


def packed(config: dict[str, Any]) -> Any:
    """`config` ({name: pipeline channel or constant}) as the steps take it. Local builds: the dict itself.
    Cluster builds: the entries named in `PACKED_LISTS` / `PACKED_OPTIONAL_INTS` (a list, or a whole number
    that may be left empty, cannot sit in a dict constant: module docstring) go to a `pack-config` step as
    inputs of their own, the rest as its dict constant, and the steps take the dict it returns (one pod,
    a fraction of a CPU, before the run's first step). A dict without such entries is returned as it is."""
    routed = {k: v for k, v in config.items() if k in PACKED_LISTS + PACKED_OPTIONAL_INTS}
    if local_build() or not routed:
        return config
    rest = {k: v for k, v in config.items() if k not in routed}
    task = cpu_step(pack_config(config=rest, present=sorted(routed), **routed), cpu="0.5", memory="512M", s3=False)
    return task.output


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

    # an int parameter without a default is optional: kfp compiles Optional[int] = None as an optional NUMBER_INTEGER
    annotations = {p.name: Optional[p.type] if p.default is None else p.type for p in params}  # noqa: UP045 (kfp reads typing.Optional)
    pipeline_func.__name__ = pipeline_func.__qualname__ = name
    pipeline_func.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=annotations[p.name])
            for p in params
        ]
    )
    pipeline_func.__annotations__ = annotations
    pipeline_func.__doc__ = summary + "\n\nArgs:\n" + "".join(f"    {p.name}: {p.help}\n" for p in params)
    pipe = dsl.pipeline(name=display_name, description=description)(pipeline_func)
    pipe.config_param_names = [p.name for p in config]  # what config_dict packs (the catalogue reads it)
    if local_build():
        pipe.text_params = {p.name for p in params if p.type is str}
        pipe.__class__ = _local_class(type(pipe))
    return pipe


def as_text(value: Any) -> str:
    """A typed parameter value as the text parameter of a local build takes it: None -> "", a list comma-separated."""
    if value is None:
        return ""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


@functools.cache
def _local_class(base: type) -> type:
    """`base` (kfp's pipeline class) whose call hands a typed value for a text parameter on as text (`as_text`):
    a pipeline built for kfp's local runner takes the values `catalogue.parse_params` types from the cluster
    build's parameters (`--param max_templates=5`, `relations=["P36"]`). Still a `base`: kfp compiles it."""

    class LocalPipeline(base):  # type: ignore[misc, valid-type]
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            text = getattr(self, "text_params", set())
            kwargs = {k: as_text(v) if k in text and not isinstance(v, str) else v for k, v in kwargs.items()}
            return super().__call__(*args, **kwargs)

    return LocalPipeline
