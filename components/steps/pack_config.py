"""The `pack-config` step of a cluster run (pipelines/params.py `packed`): the one run-config dict
the steps read, from the pipeline's dict constant and the parameters that reach the step as inputs of their own."""

from typing import Any

#: list parameters whose empty value means "not set" (the field is optional; None = its default)
OPTIONAL_LISTS = ("relations", "shots", "n")
#: list parameters whose config field holds comma-separated text (pipelines/params.py TEXT_LISTS)
TEXT_LISTS = ("template_sources",)


def pack(config: dict, present: list, given: dict[str, Any]) -> dict:
    """`config` plus, for each name of `present`, its value in `given`: a list, or a whole number (None when the
    optional parameter was left empty). An empty list of an optional list field (`OPTIONAL_LISTS`) is None
    ("not set": every usable relation, the default shots); a `TEXT_LISTS` list is comma-joined; a name that is not in `given` raises ValueError
    (the component and the pipeline disagree, a bug)."""
    out = dict(config)
    for name in present:
        if name not in given:
            raise ValueError(f"pack-config: no input for {name!r}; the component's inputs are {sorted(given)}")
        value = given[name]
        if name in OPTIONAL_LISTS and isinstance(value, list) and not value:
            value = None
        if name in TEXT_LISTS and isinstance(value, list):
            value = ",".join(str(v).strip() for v in value)
        out[name] = value
    return out
