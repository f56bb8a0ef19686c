"""`--config FILE` for `probe`, `study` and `finetune`: options from a YAML or JSON file.

A config file holds the command's options by field name (the flag without its dashes; `-` and `_`
are both accepted), e.g. for `factprobe probe ic-lke --config ic.yaml`::

    model: smollm2-135m-instruct
    source: lama
    relations: [P36, P19]
    max_facts_per_relation: 10

Options given on the command line override the file's. A run's own record is a config file too, so
any run can be repeated from its folder: a probe's `run_config.json` and a fine-tune's
`finetune_config.json` (their options are under `config`; what the run recorded besides, its
identity and results key, is not an option and is left out) and a study's `study_config.json`
(`study`, `base`, `params`). The probe or study a file names must be the command's.

Refused in one line (`ConfigError`): a file that cannot be read, a YAML or JSON file that does not
parse (naming its line), a file that is not a mapping, an option the command does not have (naming
the options and the file), a file of another probe or study, and YAML anchors (`&name`) and aliases
(`*name`, also in a merge key `<<: *name`) anywhere in a file (naming its line): a few hundred bytes
of nested aliases expand to billions of values (an "alias bomb" in `relations:` hung the command until
it was killed), and a file of options has no need for them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import ConfigError, FactprobeError

CONFIG_HELP = "YAML or JSON file of options (e.g. a run's own {record}, to repeat it); the options given here override the file's"
#: the key under which a run's own record (run_config.json, finetune_config.json) holds its options
RECORD_KEY = "config"


def add_config_option(parser: argparse.ArgumentParser, record: str = "run_config.json") -> None:
    """`--config FILE` on `parser` (default None); `record` names the file a run of the command writes."""
    parser.add_argument("--config", metavar="FILE", default=None, help=CONFIG_HELP.format(record=record))


ANCHORS_REFUSED = (
    "YAML anchors (&name) and aliases (*name) are not accepted in a config file (nested aliases can expand "
    "without bound); write the values out"
)


def _no_alias_loader(path: Path) -> type:
    """A `yaml.SafeLoader` that raises ConfigError (naming `path` and the line) at the first anchor or alias."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise ConfigError(f"{path}:{event.start_mark.line + 1}: {ANCHORS_REFUSED}")
            return super().compose_node(parent, index)

    return Loader


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping of a YAML or JSON file (JSON for a `.json` name). ConfigError (one line naming the file,
    and the line for a parse error) for a missing or unreadable file, bad syntax, or a top level that is
    not a mapping, or a YAML anchor or alias (`ANCHORS_REFUSED`)."""
    import yaml

    from .io import read_text

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {p}: no such file")
    try:
        text = read_text(p)
    except FactprobeError as e:
        raise ConfigError(f"--config {p}: {e}") from None
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
    else:
        try:
            data = yaml.load(text, Loader=_no_alias_loader(p))  # a SafeLoader subclass
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
            what = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"{where}: not valid YAML ({what}); fix that line (one `option: value` per line)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a config file holds `option: value` pairs (a mapping), not a {type(data).__name__}")
    return data


def _flat(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """The options of a config file's mapping: a run's own record (run_config.json, finetune_config.json:
    `config`; study_config.json: `base` and `params`) flattened, other files as they are."""
    if isinstance(data.get(RECORD_KEY), dict):
        return dict(data[RECORD_KEY])
    if kind == "study" and isinstance(data.get("params"), dict):
        flat = {**(data.get("base") or {}), **data["params"]}
        if "study" in data:
            flat["study"] = data["study"]
        return flat
    return dict(data)


def options_from_file(path: str | Path, kind: str, name: str | None, known: Iterable[str]) -> dict[str, Any]:
    """The options of config file `path` for command `kind` ("probe", "study", "finetune") of `name` (the
    probe or study; None for finetune), keyed by field name. `known` holds the option names the command
    accepts. ConfigError (one line) for an unknown option, or a file of another probe or study."""
    options = {str(k).replace("-", "_"): v for k, v in _flat(read_config_file(path), kind).items()}
    own = options.pop(kind, None) if kind in ("probe", "study") else None
    if own is not None and name is not None and str(own) != name:
        raise ConfigError(
            f"{path}: a config of {kind} {own}, not {name}; run `factprobe {kind} {own} --config {path}`, "
            f"or drop `{kind}: {own}` from the file"
        )
    known = set(known)
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        what = f"{kind} {name}" if name else kind
        raise ConfigError(f"{path}: unknown option(s) {', '.join(unknown)} for {what}; known: {', '.join(sorted(known))}")
    return options


def with_config_file(
    args: argparse.Namespace, kind: str, name: str | None, known: Iterable[str], given: dict[str, Any]
) -> dict[str, Any]:
    """`given` (the options set on the command line) over the options of `args.config` (none without one)."""
    path = getattr(args, "config", None)
    if not path:
        return dict(given)
    return {**options_from_file(path, kind, name, known), **given}
