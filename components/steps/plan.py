"""Step: the model x probe matrix the probe loop fans out over."""


def run_plan(models: list, probes: list, context: str = "", config: dict | None = None) -> list:
    """[{"model": m, "probe": p, "context": context}, ...] for every pair; rejects empty or unknown
    entries and, with `config`, validates its `options` against the probes and the run config of
    every pair before any model loads.
    The run context (the start step's JSON) rides along in each cell (see pipelines/probe.py for why)."""
    from factprobe.errors import ConfigError
    from factprobe.framework.registry import probe_names

    from ._common import check_options, run_config

    if not models:
        raise ConfigError("no models to probe: the models list is empty")
    known = probe_names()
    bad = [p for p in probes if p not in known]
    if bad or not probes:
        raise ConfigError(f"unknown probe(s) {bad or probes}; choose from {', '.join(known)}")
    if config is not None:
        check_options(config, list(probes))
        for m in models:
            for p in probes:
                run_config(config, probe=str(p), model=str(m))
    return [{"model": str(m), "probe": str(p), "context": context} for m in models for p in probes]


def run_read_models(models_yaml: str) -> list:
    """Models from a YAML file (path) or inline YAML: a list, or a mapping with a `models:` list.
    Entries are strings or mappings with a `name` (alias, folder or hub id) and the model's own
    settings (`MODEL_KEYS`: gpus, memory, cpu, dtype, device_map, endpoint), checked by `model_entry`:
    an unknown key is refused, not dropped. A plain name comes back as a string, a model with
    settings as its checked mapping."""
    from pathlib import Path

    import yaml

    from factprobe.errors import ConfigError

    text = models_yaml
    where = "inline YAML"
    one_line = models_yaml.strip()
    if one_line and "\n" not in one_line:
        path = Path(one_line).expanduser()
        if path.is_file():
            where, text = str(path), path.read_text()
        elif path.is_dir():
            raise ConfigError(f"models YAML path {path} is a folder; give a YAML file or inline YAML")
        elif path.suffix in (".yaml", ".yml"):
            raise ConfigError(f"models YAML file {path} not found")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"models YAML ({where}) does not parse at{at}: {getattr(e, 'problem', e)}") from None
    models = doc.get("models") if isinstance(doc, dict) else doc
    if not isinstance(models, list) or not models:
        raise ConfigError(f"models YAML ({where}) must be a non-empty list or have a non-empty `models:` list")
    # a plain name stays a string (the parent run's `models` tag); a model with settings stays a mapping
    entries = [model_entry(m, f"models YAML ({where})", i) for i, m in enumerate(models)]
    return [e if len(e) > 1 else e["name"] for e in entries]


#: the keys a model entry of a models file may hold (issue 30 item 3); any other key is refused
MODEL_KEYS = ("name", "gpus", "memory", "cpu", "dtype", "device_map", "endpoint")
#: a pod's resources when a model names none (the `gpu_step` defaults; `gpus` comes from FACTPROBE_GPU_COUNT)
DEFAULT_RESOURCES = {"gpus": 1, "cpu": "4", "memory": "32G"}
_CPU = r"([0-9]*[.])?[0-9]+m?"  # Kubernetes CPU quantities as kfp checks them: 4, 0.5, 500m
_MEMORY = r"[0-9]+(E|Ei|P|Pi|T|Ti|G|Gi|M|Mi|K|Ki)?"  # 32G, 80Gi, 512Mi


def model_entry(raw, where: str, index: int) -> dict:
    """One model of a models file as {"name": ..., and each key of `MODEL_KEYS` it sets}: a string is
    {"name": it}; a mapping is checked key by key. ConfigError (one line naming `where`, the model and
    the key) for an unknown key, a GPU count that is not a whole number >= 0, a CPU or memory amount
    Kubernetes would refuse, an endpoint that is not an http(s) URL, or `endpoint` with `device_map`
    (a served model is placed by its server)."""
    import re

    from factprobe.errors import ConfigError

    entry = {"name": raw} if isinstance(raw, str) else raw
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: entry {index + 1} is {raw!r}; give a model name or a mapping with a `name`")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{where}: entry {index + 1} has no model name: {raw!r}")
    name = name.strip()
    said = f"{where}: model {name!r}:"
    unknown = [str(k) for k in entry if k not in MODEL_KEYS]
    if unknown:
        raise ConfigError(f"{said} unknown key {unknown[0]!r}; a model takes {', '.join(MODEL_KEYS)}")
    out: dict = {"name": name}
    for key in MODEL_KEYS[1:]:
        value = entry.get(key)
        if value is None:
            continue
        if key == "gpus":
            if isinstance(value, float) and value.is_integer():
                value = int(value)  # a whole number that travelled through JSON as 2.0
            whole = isinstance(value, int) or isinstance(value, str) and value.strip().lstrip("-").isdigit()
            if isinstance(value, bool) or not whole:
                raise ConfigError(f"{said} gpus={value!r} is not a whole number; give 0 or more")
            if int(value) < 0:
                raise ConfigError(f"{said} gpus={value} is negative; give 0 or more")
            value = int(value)
        else:
            value = str(value).strip()
            if key == "cpu" and (not re.fullmatch(_CPU, value) or not float(value.rstrip("m"))):
                raise ConfigError(f"{said} cpu={value!r} is not a CPU amount such as 4, 0.5 or 500m")
            if key == "memory" and not re.fullmatch(_MEMORY, value):
                raise ConfigError(f"{said} memory={value!r} is not a memory amount such as 32G or 80Gi")
            if key == "endpoint" and not re.match(r"^https?://[^/\s]+", value):
                raise ConfigError(f"{said} endpoint={value!r} is not an http(s) URL such as http://vllm.factprobe.svc:8000/v1")
        out[key] = value
    if "endpoint" in out and "device_map" in out:
        raise ConfigError(
            f"{said} endpoint and device_map together: a served model is placed by its server; "
            "drop device_map (or endpoint to load the weights in the pod)"
        )
    return out


def model_entries(models: list, where: str) -> list[dict]:
    """Every entry of a models list checked (`model_entry`); ConfigError for an empty list."""
    from factprobe.errors import ConfigError

    if not isinstance(models, list) or not models:
        raise ConfigError(f"{where}: no models to probe; give a non-empty list")
    return [model_entry(m, where, i) for i, m in enumerate(models)]


def model_spec(entry: dict) -> str:
    """The model a step loads: the entry's name, or `openai:NAME@ENDPOINT` for a served model."""
    return f"openai:{entry['name']}@{entry['endpoint']}" if entry.get("endpoint") else entry["name"]


def model_overrides(entry: dict) -> dict:
    """The run-config fields an entry sets for its model's steps (dtype, device_map)."""
    return {k: entry[k] for k in ("dtype", "device_map") if k in entry}


def run_plan_units(
    models: list,
    probes: list,
    context: str = "",
    config: dict | None = None,
    shards: int = 1,
    one_load: bool = False,
    defaults: dict | None = None,
) -> list:
    """The units of work of a sweep (`probe`, `nightly_sweep`), each one pod: a model (a name or a models-file
    mapping, `model_entry`), the probes it runs (one with `one_load=False`; all of them, loaded once,
    with `one_load=True`), its fact shard (`shard` of `shards`) and its pod's resources (`gpus`, `cpu`,
    `memory`: the model's own, else `defaults`, else `DEFAULT_RESOURCES`), as text for Kubernetes.
    Refuses what `run_plan` refuses, bad model entries and a `shards` value out of its bounds
    (components/steps/shards.py: below 1, above `MAX_SHARDS`, above the facts of a
    probe's data, or more than `MAX_UNITS` units in all), before a unit is planned or a model loads.
    Units are ordered by model, then probe, then shard."""
    from .shards import check_shards, check_units, parse_shards

    n = parse_shards(shards)  # first: a huge value is refused before anything else is read
    entries = model_entries(list(models or []), "models parameter")
    check_units(len(entries), 1 if one_load else len(list(probes or [])), n)
    base = {**DEFAULT_RESOURCES, **(defaults or {})}
    base["gpus"] = int(float(base["gpus"]))  # the pipeline's constant may arrive as 1.0 (JSON)
    run_plan([model_spec(e) for e in entries], probes, context, None)  # the probe names
    if config is not None:
        from ._common import check_options, run_config

        check_options(config, list(probes))
        for e in entries:
            for p in probes:
                run_config({**config, **model_overrides(e)}, probe=str(p), model=model_spec(e))
        check_shards(n, config, probes)
    units = []
    for e in entries:
        groups = [[str(p) for p in probes]] if one_load else [[str(p)] for p in probes]
        for group in groups:
            for shard in range(n):
                units.append(
                    {
                        "model": model_spec(e),
                        "probes": group,
                        "shard": shard,
                        "shards": n,
                        "overrides": model_overrides(e),
                        "context": context,
                        **{k: str(e.get(k, base[k])) for k in ("gpus", "cpu", "memory")},
                    }
                )
    return units


def unit_resources(unit: dict) -> tuple[str, str, str]:
    """(gpus, cpu, memory) of a unit (`run_plan_units`): what its pod requests."""
    return str(unit["gpus"]), str(unit["cpu"]), str(unit["memory"])


def write_unit_resources(unit: dict, gpus_path: str, cpu_path: str, memory_path: str) -> None:
    """Write `unit_resources(unit)` to the three output files of the `unit_resources` component."""
    for path, value in zip((gpus_path, cpu_path, memory_path), unit_resources(unit)):
        with open(path, "w", encoding="utf-8") as f:
            f.write(value)


def unit_placement(unit: dict, placement: dict) -> tuple[dict, list]:
    """(node selector, tolerations) of a unit's pod: those of the GPU pool (`placement`, {"node_selector": {...},
    "tolerations": [...]}, the pipeline's cluster settings) for a unit that requests GPUs; none for a unit with
    `gpus` 0 (a served model: an HTTP client that must not occupy, or make the autoscaler add, a GPU node)."""
    if int(float(unit["gpus"])) > 0:
        return dict(placement.get("node_selector") or {}), list(placement.get("tolerations") or [])
    return {}, []


def write_unit_placement(unit: dict, placement: dict, node_selector_path: str, tolerations_path: str) -> None:
    """Write `unit_placement(unit, placement)` as JSON to the two output files of the `unit_resources` component."""
    import json

    for path, value in zip((node_selector_path, tolerations_path), unit_placement(unit, placement)):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(value, f)
