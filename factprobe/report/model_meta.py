"""Model metadata for cross-model maps: family, size and base model of each model a run probed.

Wu et al. (2024) group models by family and sort them by size (Figure 5), and compare a family's
smaller and larger models (Table 1) and fine-tuned models against their base (Table 10). Those
three facts about a model come from, in this order:

1. a user's metadata file (`--model-meta FILE`, `read_model_meta`): YAML or CSV, one record per
   model with `model` (required: the model as the runs name it, or its short label), and optional
   `family`, `size` (a parameter count: `135000000`, `135M`, `1.3B`, `7e9`) and `base` (the model
   it was fine-tuned from, named as another run's model). An empty field falls back to 2.;
2. the model's own folder, found locally only (nothing is downloaded): an alias's prepared cache
   folder, a local folder, or a hub id already in the local Hugging Face cache (`config_meta`):
   - family: `model_type` of its `config.json` (`gemma3_text` -> `gemma3`: the text-only config of a
     family is the family), else its first `architectures` entry;
   - size: the parameter count, summed over the tensor shapes in its `*.safetensors` headers
     (exact; no weights are read), None without safetensors files;
   - base: a PEFT adapter folder's `base_model_name_or_path` (family and size are its base's: a
     LoRA adapter adds a negligible share of parameters and is merged into the same shapes), or a
     full fine-tuning output `<out>/model` whose `<out>/finetune_config.json` names the base;
3. otherwise unknown (None): such a model sorts last and forms no size pair.

`resolve_model_meta` applies this to the models of a set of runs; metadata naming a model that is
in none of the runs, and bases that form a cycle (A's base is B, B's base is A), are one ConfigError
naming them. A CSV file is read strictly: an unterminated quote is an error naming its line. `unique_labels` gives the short names figures
and tables show. Pure: no mlflow, no tracking; reads only local files.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError, DataError
from ..io import csv_rows, malformed_csv

#: the fields of a metadata record (`model` required)
META_FIELDS = ("model", "family", "size", "base")
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_UNIT = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
FINETUNE_CONFIG = "finetune_config.json"  # written by factprobe.finetune next to its model/ folder


@dataclass(frozen=True)
class ModelMeta:
    """What the cross-model maps know about one model.

    `model`: the model as the runs name it; `family`, `size` (parameters), `base` (the model it was
    fine-tuned from, as named in its adapter/fine-tuning config or the metadata file): None when
    unknown; `source`: where they came from (`meta file <path>`, `config <folder>`, `unknown`)."""

    model: str
    family: str | None = None
    size: float | None = None
    base: str | None = None
    source: str = "unknown"

    def to_dict(self) -> dict:
        return {"model": self.model, "family": self.family, "size": self.size, "base": self.base, "source": self.source}


def parse_size(value: object, where: str = "size") -> float | None:
    """A parameter count from a number or text (`135M`, `1.3B`, `270m`, `7e9`); None for empty.
    ConfigError naming `where` for anything else (negative, zero, text that is not a count)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {value!r} is not a parameter count (e.g. 135M, 1.3B, 7000000000)")
    if isinstance(value, (int, float)):
        size = float(value)
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise ConfigError(f"{where}: {value!r} is not a parameter count (e.g. 135M, 1.3B, 7000000000)")
        size = float(m.group(1)) * _UNIT[m.group(2).lower()]
    if not math.isfinite(size) or size <= 0:
        raise ConfigError(f"{where}: {value!r} is not a positive parameter count")
    return size


def _text(value: object) -> str | None:
    if value is None:
        return None
    s = str(value).strip()
    return s or None


def _records(path: Path) -> list[tuple[str, dict]]:
    """(where, record) of a YAML or CSV metadata file."""
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--model-meta {path}: cannot read it ({e.__class__.__name__}: {e})") from None
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
        try:
            cols = [c.strip() for c in (reader.fieldnames or [])]
            if "model" not in cols:
                raise ConfigError(
                    f"--model-meta {path}: the CSV header has no 'model' column (has: {', '.join(cols) or 'none'}); "
                    f"columns: {', '.join(META_FIELDS)}"
                )
            return [(f"{path}:{i}", {(k or "").strip(): v for k, v in row.items()}) for i, row in csv_rows(reader, path)]
        except csv.Error as e:  # the header line
            raise ConfigError(f"--model-meta {malformed_csv(path, 1, e)}") from None
        except DataError as e:  # a record (csv_rows names its line)
            raise ConfigError(f"--model-meta {e}") from None
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"--model-meta {path}: not valid YAML ({str(e).splitlines()[0]})") from None
        if isinstance(data, Mapping):  # {model: {family, size, base}}
            data = [{"model": k, **(v if isinstance(v, Mapping) else {"_bad": v})} for k, v in data.items()]
        if not isinstance(data, list):
            raise ConfigError(
                f"--model-meta {path}: expected a list of records (model, family, size, base) "
                f"or a mapping model -> {{family, size, base}}"
            )
        return [(f"{path} record {i}", r) for i, r in enumerate(data, start=1)]
    raise ConfigError(f"--model-meta {path}: expected a .yaml, .yml or .csv file")


def read_model_meta(path: str | Path) -> dict[str, ModelMeta]:
    """{model: ModelMeta} of a metadata file (see the module docstring). ConfigError, one line naming
    the record, for a record that is not a mapping, lacks `model`, has an unknown field, a size that
    is not a parameter count, or repeats a model."""
    path = Path(path)
    out: dict[str, ModelMeta] = {}
    for where, rec in _records(path):
        if not isinstance(rec, Mapping) or "_bad" in rec:
            raise ConfigError(f"--model-meta {where}: expected a mapping with {', '.join(META_FIELDS)}")
        extra = sorted(str(k) for k in rec if k not in META_FIELDS and rec[k] not in (None, ""))
        if extra:
            raise ConfigError(f"--model-meta {where}: unknown field(s) {', '.join(extra)}; fields: {', '.join(META_FIELDS)}")
        model = _text(rec.get("model"))
        if model is None:
            raise ConfigError(f"--model-meta {where}: no 'model'")
        if model in out:
            raise ConfigError(f"--model-meta {where}: model {model!r} is given twice")
        out[model] = ModelMeta(
            model=model,
            family=_text(rec.get("family")),
            size=parse_size(rec.get("size"), f"--model-meta {where}: size of {model!r}"),
            base=_text(rec.get("base")),
            source=f"meta file {path}",
        )
    return out


# ------------------------------------------------------------------ from the model's own folder
def _local_folder(name: str) -> Path | None:
    """The model's folder if it is here already (alias cache, local path, local HF cache); no download."""
    from ..models.aliases import aliases, model_cache_dir

    if name in aliases():
        folder = model_cache_dir(name)
        return folder if (folder / "config.json").is_file() else None
    p = Path(name).expanduser()
    if p.is_dir():
        return p
    if p.exists() or name.startswith(("/", ".", "~")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - not a valid hub id, no cache: unknown
        return None
    return Path(found).parent if isinstance(found, str) else None


def _family(config: Mapping) -> str | None:
    kind = config.get("model_type")
    if isinstance(kind, str) and kind.strip():
        return re.sub(r"_text$", "", kind.strip())
    arch = config.get("architectures")
    if isinstance(arch, list) and arch and isinstance(arch[0], str):
        return arch[0]
    return None


def safetensors_params(folder: Path) -> int | None:
    """The parameter count of the `*.safetensors` files in `folder` (from their headers: the tensors'
    shapes; nothing is loaded); None when there are none or one is unreadable."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    try:
        for f in files:
            with safe_open(str(f), framework="numpy") as st:
                for key in st.keys():
                    total += math.prod(st.get_slice(key).get_shape())
    except Exception:  # noqa: BLE001 - a torn or foreign file: size unknown, not an error
        return None
    return total


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def config_meta(name: str, _depth: int = 0) -> ModelMeta:
    """Family, size and base of model `name` from its local folder (see the module docstring);
    fields that cannot be found are None (`source` "unknown" when nothing was found)."""
    folder = _local_folder(name)
    if folder is None or _depth > 3:
        return ModelMeta(model=name)
    adapter = _read_json(folder / "adapter_config.json")
    if adapter is not None:
        base = _text(adapter.get("base_model_name_or_path"))
        of_base = config_meta(base, _depth + 1) if base else ModelMeta(model=name)
        return ModelMeta(
            model=name, family=of_base.family, size=of_base.size, base=base, source=f"adapter {folder} (base {base})"
        )
    config = _read_json(folder / "config.json")
    if config is None:
        return ModelMeta(model=name)
    tuned = _read_json(folder.parent / FINETUNE_CONFIG)
    base = _text(((tuned or {}).get("config") or {}).get("model")) if folder.name == "model" else None
    size = safetensors_params(folder)
    return ModelMeta(model=name, family=_family(config), size=float(size) if size else None, base=base, source=f"config {folder}")


# ------------------------------------------------------------------ labels and resolution
def short_name(model: str) -> str:
    """A model as a short name: a path's folder name, an alias or hub id unchanged."""
    p = Path(model).expanduser()
    if "/" in model and (model.startswith(("/", ".", "~")) or p.exists()):
        return p.name or model
    return model


def unique_labels(models: Sequence[str]) -> dict[str, str]:
    """{model: label}: the short name, lengthened with parent folders where two models would get the
    same one (`run-a/adapter`, `run-b/adapter`). Models are distinct strings."""
    labels = {m: short_name(m) for m in models}
    depth = 1
    while len(set(labels.values())) < len(labels) and depth < 8:
        depth += 1
        counts: dict[str, int] = {}
        for v in labels.values():
            counts[v] = counts.get(v, 0) + 1
        for m, v in list(labels.items()):
            if counts[v] > 1 and "/" in m:
                parts = Path(m).expanduser().parts
                labels[m] = "/".join(parts[-depth:])
    return labels


def _same_model(a: str, b: str) -> bool:
    if a == b:
        return True
    fa, fb = _local_folder(a), _local_folder(b)
    try:
        return fa is not None and fb is not None and fa.resolve() == fb.resolve()
    except OSError:
        return False


def _match(name: str, models: Sequence[str], labels: Mapping[str, str]) -> str | None:
    """The run model that `name` names: exactly, by its label, or by the same local folder."""
    if name in models:
        return name
    by_label = [m for m in models if labels.get(m) == name or short_name(m) == name]
    if len(by_label) == 1:
        return by_label[0]
    found = [m for m in models if _same_model(name, m)]
    return found[0] if len(found) == 1 else None


def resolve_model_meta(models: Sequence[str], meta_file: str | Path | None = None) -> dict[str, ModelMeta]:
    """{model: ModelMeta} for the models of a set of runs (as their runs name them): the metadata
    file's record where it has one (matched by the model's name or its label), its empty fields and
    the models it does not name from `config_meta`. A record's `base` must name another of the
    models; the base a model's folder names is kept as `base` when it is one of them (as named in
    the runs), else as found. ConfigError (one line) when the file names models that are in none of
    the runs, or a base that is not one of them."""
    labels = unique_labels(models)
    given = read_model_meta(meta_file) if meta_file else {}
    matched: dict[str, ModelMeta] = {}
    unknown = []
    for name, rec in given.items():
        m = _match(name, models, labels)
        if m is None:
            unknown.append(name)
        else:
            matched[m] = rec
    if unknown:
        raise ConfigError(
            f"--model-meta {meta_file} names model(s) that are in none of the runs: "
            f"{', '.join(unknown)}; the runs' models are {', '.join(labels[m] for m in models)}"
        )
    out: dict[str, ModelMeta] = {}
    for m in models:
        found = config_meta(m)
        rec = matched.get(m)
        if rec is None:
            meta = found
        else:
            meta = replace(
                rec,
                model=m,
                family=rec.family or found.family,
                size=rec.size if rec.size is not None else found.size,
                base=rec.base or found.base,
            )
        if meta.base:
            base = _match(meta.base, models, labels)
            if base is None and rec is not None and rec.base:
                raise ConfigError(
                    f"--model-meta {meta_file}: the base {rec.base!r} of {rec.model!r} is in none of "
                    f"the runs; the runs' models are {', '.join(labels[x] for x in models)}"
                )
            if base == m:
                raise ConfigError(f"model {labels[m]!r} is named as its own base")
            meta = replace(meta, base=base or meta.base)
        out[m] = meta
    check_base_cycles(out, labels)
    return out


def check_base_cycles(metas: Mapping[str, ModelMeta], labels: Mapping[str, str] | None = None) -> None:
    """ConfigError naming the models of the first cycle of `base` links among `metas` (`a -> b -> a`:
    a's base is b and b's base is a), which no fine-tuning history can have."""
    labels = labels or {}
    done: set[str] = set()
    for start in metas:
        path: list[str] = []
        m: str | None = start
        while m in metas and m not in done and m not in path:
            path.append(m)
            m = metas[m].base
        if m in path:
            cycle = path[path.index(m) :] + [m]
            raise ConfigError(
                f"model bases form a cycle: {' -> '.join(labels.get(x, x) for x in cycle)} (each arrow: "
                "'is fine-tuned from'); fix the base of one of them (--model-meta or the model's folder)"
            )
        done.update(path)


def base_pairs(metas: Mapping[str, ModelMeta]) -> dict[str, str]:
    """{fine-tuned model: base model} for the models whose base is itself one of `metas`' models."""
    return {m: meta.base for m, meta in metas.items() if meta.base and meta.base in metas and meta.base != m}


__all__ = [
    "META_FIELDS",
    "ModelMeta",
    "base_pairs",
    "check_base_cycles",
    "config_meta",
    "parse_size",
    "read_model_meta",
    "resolve_model_meta",
    "safetensors_params",
    "short_name",
    "unique_labels",
]
