"""Step: the model x probe matrix the probe loop fans out over."""


def run_plan(models: list, probes: list, context: str = "", config: dict | None = None) -> list:
    """[{"model": m, "probe": p, "context": context}, ...] for every pair; rejects empty or unknown
    entries and, with `config`, validates its `options` against the probes and the run config of
    every pair before any model loads.
    The run context (the start step's JSON) rides along in each cell (see factprobe_ops/pipelines/probe.py for why)."""
    from factprobe.errors import ConfigError
    from factprobe.probes.registry import probe_names

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
    Entries are strings or mappings with a `name` (alias, folder or hub id)."""
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
    out = []
    for i, m in enumerate(models):
        name = m.get("name") if isinstance(m, dict) else m
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"models YAML ({where}): entry {i + 1} has no model name: {m!r}")
        out.append(name.strip())
    return out
