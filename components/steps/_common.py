"""Helpers shared by the step adapters (not components themselves)."""

import json
import os
from typing import Any

#: set by a local run (pipelines/local_steps.py): the file where start-run records the parent run,
#: so that a run stopped by Ctrl-C or SIGTERM can mark it KILLED
RUN_RECORD_ENV = "FACTPROBE_RUN_RECORD"


def optional(value: str) -> str | None:
    """Pipeline parameters cannot be None: '' means unset."""
    return value.strip() or None


#: the key of a pipeline's config dict that holds the `options` JSON text (pipelines/params.py)
OPTIONS = "options"
#: config fields a step sets itself: never an option
NOT_OPTIONS = ("model", "probe")


def parse_options(text: Any) -> dict:
    """The `options` parameter as a dict: '' or None -> {}; a JSON object (text or dict) -> itself.
    Anything else raises ConfigError naming `options`."""
    from factprobe.errors import ConfigError

    if isinstance(text, dict):
        return dict(text)
    if text is None or not str(text).strip():
        return {}
    try:
        value = json.loads(str(text))
    except json.JSONDecodeError as e:
        raise ConfigError(
            f'options: not JSON ({e.msg} at column {e.colno}); give an object such as {{"eic_interleave": 2}}'
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f'options: expected a JSON object such as {{"eic_interleave": 2}}, got {text!r}')
    return value


def expand_options(config: dict) -> dict:
    """The pipeline's config dict with its `options` JSON merged in (keys of `config` first). An
    option that repeats a key the dict already has (a pipeline parameter or a per-step setting)
    raises ConfigError naming it: set the parameter instead."""
    from factprobe.errors import ConfigError

    rest = {k: v for k, v in config.items() if k != OPTIONS}
    options = parse_options(config.get(OPTIONS))
    taken = sorted(set(options) & (set(rest) | set(NOT_OPTIONS)))
    if taken:
        raise ConfigError(
            f"options: {', '.join(taken)} {'is' if len(taken) == 1 else 'are'} set by a parameter of this "
            "pipeline or by its steps; set the parameter instead of the option"
        )
    return {**rest, **options}


def check_options(config: dict, probes: list, extra: tuple = ()) -> None:
    """Refuse an `options` key that is no config field of `BaseConfig`, of the probes `probes`
    or of the classes `extra` (ConfigError naming the key, and the probes it belongs to when it is
    another probe's option). Values are checked where the configs are built (`run_config`)."""
    from dataclasses import fields as dc_fields

    from factprobe.config import PIPELINE
    from factprobe.errors import ConfigError
    from factprobe.framework.config import BaseConfig
    from factprobe.framework.registry import get_probe, load_probes

    options = parse_options(config.get(OPTIONS))
    expand_options(config)  # repeats of parameters
    classes = [BaseConfig, *(get_probe(str(p)).config_class for p in probes), *extra]
    known = {f.name for cls in classes for f in dc_fields(cls) if f.metadata.get(PIPELINE, True)} - set(NOT_OPTIONS)
    for key in options:
        if key in known:
            continue
        owners = [name for name, spec in load_probes().items() if key in spec.config_class.field_names()]
        if owners:
            raise ConfigError(
                f"options: {key!r} is an option of probe {', '.join(owners)}, which this run does not run "
                f"(probes: {', '.join(map(str, probes))})"
            )
        raise ConfigError(
            f"options: unknown option {key!r}; known for probes {', '.join(map(str, probes))}: {', '.join(sorted(known))}"
        )


def run_config(config: dict, **fields):
    """The `RunConfig` of one step from the pipeline's config dict (its `options` expanded, plus
    per-step fields such as probe and model). The dict may hold other probes' options; those are
    ignored."""
    from factprobe.framework.config import BaseConfig, RunConfig
    from factprobe.framework.registry import get_probe

    merged = {**expand_options(config), **fields}
    own = set(BaseConfig.field_names()) | set(get_probe(merged["probe"]).config_class.field_names()) | {"probe"}
    return RunConfig.from_dict({k: v for k, v in merged.items() if k in own})


def record_parent_run(run_id: str, kfp_run_id: str, pipeline: str) -> None:
    """Append the parent run to the file named by RUN_RECORD_ENV (nothing when it is unset: a
    cluster run), one JSON object a line."""
    import json

    path = os.environ.get(RUN_RECORD_ENV)
    if path and run_id:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"run_id": run_id, "kfp_run_id": kfp_run_id, "pipeline": pipeline}) + "\n")
