"""LPAQA data: T-REx training facts (`lpaqa-train`) and the prompts of the HGP/MMP baselines.

Training facts: a folder of `P*.jsonl` files with `sub_label, obj_label, sub_uri, obj_uri`
(`lpaqa/trex_train`), disjoint from the LAMA test *pairs*. Note that some *subjects* occur in
both (e.g. P530, P190): in-context examples must still exclude test subjects
(`factprobe.build.examples.sample_examples` does).

Prompts live under a prompts root (`lpaqa/prompts`; the `lpaqa` folder above it is accepted too):
- `paraphrase/P*.jsonl`, `mine/P*.jsonl`: one `{"template": ..., "weight": ...}` per line;
- `manual_paraphrase/P*.txt`: one template per line (no weight).

Template normalisation (`normalize_template`), applied to every prompt:
1. whitespace runs collapse to one space and the ends are stripped;
2. when `[X]` comes before `[Y]`, everything after `[Y]` is cut: prompts for causal LMs end at
   the object slot, so `[X] city [Y] .`, `[X] city [Y].` and `[X]  city [Y]` all become
   `[X] city [Y]`;
3. when `[Y]` comes before `[X]` (710 of 1166 mined prompts, e.g. `[Y] is the capital of [X] .`)
   the template is not a causal prefix; it is kept whole, with a space before the final
   punctuation removed (`[Y] is the capital of [X].`). `load_prompts(..., causal=True)`, the
   default, skips such templates.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

from ..errors import ConfigError, DataError
from ..facts import FactSet, Relation
from ..io import read_jsonl, read_text
from ._common import check_relations, fact_files, read_fact_files, relations_for

log = logging.getLogger(__name__)

PROMPT_KINDS = ("paraphrase", "manual_paraphrase", "mine")


def load_lpaqa_train(
    path: str | Path, relations: list[str] | None = None, meta: dict[str, Relation] | None = None
) -> FactSet:
    """Load training facts from a folder of `P*.jsonl` files (same fields as LAMA).

    `relations` restricts the relations read (unknown ids raise ConfigError). `meta` supplies
    relation metadata (e.g. from `lama.load_relations_meta`); relations without it get a
    default record. The FactSet's `source` is `lpaqa-train:<path>`. An empty fact file is a
    DataError naming it when its relation is asked for, else skipped with a warning.
    """
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: LPAQA training folder not found")
    files = fact_files(path)
    if not files:
        raise DataError(f"{path}: no P*.jsonl training fact files")
    source = f"lpaqa-train:{path}"
    wanted = check_relations(relations, files, source)
    facts = read_fact_files(files, wanted)
    return FactSet(facts=facts, relations=relations_for(facts, meta), source=source)


def normalize_template(template: str) -> str:
    """Normalise a prompt template (rules in the module docstring). Raises ValueError when the
    template lacks `[X]` or `[Y]`."""
    text = " ".join(template.split())
    x, y = text.find("[X]"), text.find("[Y]")
    if x < 0 or y < 0:
        raise ValueError(f"template {template!r} lacks [X] or [Y]")
    if x < y:
        return text[: y + len("[Y]")]
    return re.sub(r"\s+([.!?])$", r"\1", text)


def is_causal_prefix(template: str) -> bool:
    """True when `[X]` comes before `[Y]`, so the normalised template ends at the object slot."""
    return 0 <= template.find("[X]") < template.find("[Y]")


def _prompts_dir(prompts_root: str | Path, kind: str) -> Path:
    if kind not in PROMPT_KINDS:
        raise ConfigError(f"unknown prompt kind {kind!r}; known: {', '.join(PROMPT_KINDS)}")
    root = Path(prompts_root)
    if not (root / kind).is_dir() and (root / "prompts" / kind).is_dir():
        root = root / "prompts"
    return root / kind


def prompt_file(prompts_root: str | Path, relation: str, kind: str) -> Path:
    """Path of the prompt file of `relation` and `kind` (it may not exist)."""
    suffix = ".txt" if kind == "manual_paraphrase" else ".jsonl"
    return _prompts_dir(prompts_root, kind) / f"{relation}{suffix}"


def load_prompts(
    prompts_root: str | Path, relation: str, kind: str, *, causal: bool = True
) -> list[tuple[str, float | None]]:
    """Prompts of one relation and kind as `(normalised template, weight)` pairs.

    `paraphrase` / `mine` are ordered by descending weight (ties keep file order);
    `manual_paraphrase` keeps file order with weight None. Duplicates after normalisation are
    kept here (`hgp_templates` / `mmp_templates` drop them). With `causal=True` templates whose
    `[Y]` precedes `[X]` are skipped (logged), since they cannot be a prefix for a causal LM.
    Raises DataError naming `file:line` for a template without `[X]` or `[Y]`, a missing or
    non-numeric weight, or a malformed line; DataError when the file does not exist or is not
    UTF-8 text.
    """
    path = prompt_file(prompts_root, relation, kind)
    raw: list[tuple[int, str, float | None]] = []
    if kind == "manual_paraphrase":
        lines = read_text(path).splitlines()
        raw = [(n, line, None) for n, line in enumerate(lines, start=1) if line.strip()]
    else:
        for lineno, rec in read_jsonl(path, required=("template", "weight")):
            weight = rec["weight"]
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise DataError(f"{path}:{lineno}: weight must be a number, got {weight!r}")
            if not isinstance(rec["template"], str):
                raise DataError(f"{path}:{lineno}: template must be text, got {rec['template']!r}")
            raw.append((lineno, rec["template"], float(weight)))
    out: list[tuple[str, float | None]] = []
    skipped = 0
    for lineno, template, weight in raw:
        try:
            norm = normalize_template(template)
        except ValueError:
            raise DataError(f"{path}:{lineno}: template {template.strip()!r} lacks [X] or [Y]") from None
        if causal and not is_causal_prefix(norm):
            skipped += 1
            continue
        out.append((norm, weight))
    if skipped:
        log.info("%s: skipped %d template(s) with [Y] before [X] (not a causal prefix)", path, skipped)
    if kind != "manual_paraphrase":
        out.sort(key=lambda tw: -tw[1])  # stable: ties keep file order
    return out


def _top_unique(templates: list[str], k: int, have: list[str] | None = None) -> list[str]:
    out = list(have or [])
    for t in templates:
        if len(out) >= k:
            break
        if t not in out:
            out.append(t)
    return out


def hgp_templates(root: str | Path, relation: str, k: int = 3) -> list[str]:
    """Up to `k` human-written (HGP) causal templates: `manual_paraphrase` in file order, filled
    up from `paraphrase` by descending weight; de-duplicated after normalisation.

    Returns fewer than `k` when fewer exist (the caller warns). Raises DataError when the
    relation has neither file, or no usable template.
    """
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    manual_file = prompt_file(root, relation, "manual_paraphrase")
    para_file = prompt_file(root, relation, "paraphrase")
    if not manual_file.is_file() and not para_file.is_file():
        raise DataError(f"no HGP prompts for {relation}: neither {manual_file} nor {para_file} exists")
    out: list[str] = []
    if manual_file.is_file():
        out = _top_unique([t for t, _ in load_prompts(root, relation, "manual_paraphrase")], k)
    if len(out) < k and para_file.is_file():
        out = _top_unique([t for t, _ in load_prompts(root, relation, "paraphrase")], k, out)
    if not out:
        raise DataError(f"no usable HGP template for {relation} in {manual_file.parent.parent}")
    return out


def mmp_templates(root: str | Path, relation: str, k: int = 3) -> list[str]:
    """Up to `k` machine-mined (MMP) causal templates from `mine`, by descending weight,
    de-duplicated after normalisation. Raises DataError when the file is missing or has no
    usable template."""
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    out = _top_unique([t for t, _ in load_prompts(root, relation, "mine")], k)
    if not out:
        raise DataError(f"no usable MMP template for {relation} in {prompt_file(root, relation, 'mine')}")
    return out
