"""Step: the model x probe matrix the probe loop fans out over."""

from kfp import dsl

from .config import CPU_IMAGE


def run_plan(models: list, probes: list) -> list:
    """[{"model": m, "probe": p}, ...] for every pair; rejects empty or unknown entries."""
    from factprobe.errors import ConfigError
    from factprobe.probes.config import PROBES

    if not models:
        raise ConfigError("no models to probe: the models list is empty")
    bad = [p for p in probes if p not in PROBES]
    if bad or not probes:
        raise ConfigError(f"unknown probe(s) {bad or probes}; choose from {', '.join(PROBES)}")
    return [{"model": str(m), "probe": str(p)} for m in models for p in probes]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def plan_matrix(models: list, probes: list) -> list:
    """Expand models x probes into the list of (model, probe) pairs probed in parallel."""
    from components.plan import run_plan

    return run_plan(models, probes)


def run_read_models(models_yaml: str) -> list:
    """Models from a YAML file (path) or inline YAML: a list, or a mapping with a `models:` list.
    Entries are strings or mappings with a `name` (alias, folder or hub id)."""
    from pathlib import Path

    import yaml

    from factprobe.errors import ConfigError

    text = models_yaml
    where = "inline YAML"
    if "\n" not in models_yaml and Path(models_yaml).expanduser().exists():
        where = str(Path(models_yaml).expanduser())
        text = Path(where).read_text()
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


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def read_models(models_yaml: str) -> list:
    """Read the list of models for a sweep from a YAML file path or inline YAML text."""
    from components.plan import run_read_models

    return run_read_models(models_yaml)
