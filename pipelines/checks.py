"""Checks of a pipeline run's parameter values that the config classes accept but a later step would
refuse, made before anything runs or is sent (`factprobe pipeline run`, `submit`, `schedule`:
`run_local`, `remote.submit`, `remote.schedule`), each one line (ConfigError):

- a `device` no step can use (`device=tpu`), given as a parameter or inside `options`
  (`check_device`; whether the step's machine has CUDA is its own business: runs are often submitted
  from a laptop without one);
- a probe's missing inputs (`Probe.check_inputs` on the config its steps will build): mc-items
  without `data`, or with `examples` (the probe pipeline's default is 50, ic-lke's) but no `train_data`;
- a sweep's models (`probe`'s `models`, `nightly_sweep`'s `models_yaml` when it is inline YAML or a
  file here; a path only the cluster's volume holds is checked by the sweep's first step): an unknown
  key, a negative GPU count, `endpoint` with `device_map`, ... (`check_sweep_values`), and `shards`
  below 1, above `MAX_SHARDS` or above the facts of a probe's data, `relations` set or not
  (components/steps/shards.py `check_shards`).

`factprobe_ops.pipelines.catalogue.validate_params` checks the values the config classes check; these come after it.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from factprobe.errors import ConfigError

from .params import OPTIONS, config_values

#: the device types a step can run on (factprobe.lm.device.resolve_device)
DEVICE_TYPES = ("cpu", "cuda", "mps")


def check_device(value: Any, where: str = "device") -> None:
    """ConfigError (one line naming `where` and the value) unless `value` is "auto", "cpu", "mps",
    "cuda" or "cuda:N" (N >= 0): the names `factprobe.lm.device.resolve_device` accepts."""
    text = str(value).strip().lower()
    kind, sep, index = text.partition(":")
    if text == "auto" or (kind in DEVICE_TYPES and (not sep or (kind == "cuda" and index.isdigit()))):
        return
    raise ConfigError(f"{where}={value!r}: unknown device; use auto, cpu, cuda or cuda:N")


def check_run_values(name: str, params: dict[str, Any]) -> None:
    """Refuse a run of pipeline `name` with parameters `params` (those given; the others take their
    defaults) that a later step would refuse for a reason the config classes cannot see (module
    docstring). ConfigError, one line naming the pipeline, the probe or the parameter."""
    from factprobe.framework.registry import get_probe
    from factprobe_ops.components.steps._common import parse_options, run_config

    from .catalogue import get_pipeline, pipeline_parameters, pipeline_probes, runs_studies

    pipe = get_pipeline(name)
    values = {k: d for k, (_, d) in pipeline_parameters(pipe).items() if d is not inspect.Parameter.empty}
    values.update(params)
    if "device" in values:
        check_device(values["device"])
    config = {**config_values(values, getattr(pipe, "config_param_names", [])), OPTIONS: values.get(OPTIONS, "")}
    check_sweep_values(name, values, config)
    options = parse_options(values.get(OPTIONS))
    if "device" in options:
        check_device(options["device"])  # `--param device=...` travels in options
    if runs_studies(name):  # the study's own check (catalogue.validate_params) builds its steps' configs
        return
    for probe in dict.fromkeys(map(str, pipeline_probes(name, values))):
        try:
            check = getattr(get_probe(probe), "check_inputs", None)  # a plug-in probe of an older contract has none
            if check is not None:
                check(run_config(config, probe=probe, model="-"))
        except ConfigError as e:
            raise ConfigError(f"pipeline {name}, probe {probe}: {as_params(str(e))}") from None


def as_params(message: str) -> str:
    """A probe's message in a pipeline's terms: `--train-data FILE` -> `--param train_data=FILE`."""
    return re.sub(r"--([a-z][a-z0-9-]*) ([A-Z]+)\b", lambda m: f"--param {m[1].replace('-', '_')}={m[2]}", message)


def check_sweep_values(name: str, values: dict[str, Any], config: dict | None = None) -> None:
    """The models and `shards` of a sweep run (module docstring); nothing for a pipeline without them.
    `config`: the run config its steps build (the facts that bound `shards`; without it only the cap).
    ConfigError, one line naming the pipeline and the model file, model and key (or the value)."""
    from pathlib import Path

    from factprobe_ops.components.steps.plan import model_entries, run_read_models
    from factprobe_ops.components.steps.shards import check_shards

    from .catalogue import pipeline_probes

    try:
        if isinstance(values.get("models"), list) and "shards" in values:
            model_entries(values["models"], "models parameter")
        text = values.get("models_yaml")
        if isinstance(text, str):
            line = text.strip()
            elsewhere = (
                line and "\n" not in line and not Path(line).expanduser().exists() and Path(line).suffix in (".yaml", ".yml")
            )
            if not elsewhere:
                run_read_models(text)
        if "shards" in values:
            check_shards(values["shards"], config, pipeline_probes(name, values) if config is not None else ())
    except ConfigError as e:
        raise ConfigError(f"pipeline {name}: {e}") from None
