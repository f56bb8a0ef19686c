"""LPAQA data: T-REx training facts (`lpaqa-train`) and the prompts of the HGP/MMP baselines.

Training facts: a folder of `P*.jsonl` files with `sub_label, obj_label, sub_uri, obj_uri`
(`lpaqa/trex_train`), disjoint from the LAMA test *pairs*. Note that some *subjects* occur in
both (e.g. P530, P190): in-context examples must still exclude test subjects
(`factprobe.datasets.examples.sample_examples` does).

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

Which templates the HGP / MMP baselines use (Wu et al. 2024, section 4.1 and appendix G):
- `sample_templates(kind, root, relation, k, seed)`: `k` templates drawn at random (seeded with
  `stable_rng(seed, "templates", kind, relation)`) from the relation's usable templates: HGP from
  `manual_paraphrase` (filled up from `paraphrase` when it has fewer than `k`), MMP from `mine`.
  Usable means causal (`[X]` before `[Y]`), unique after normalisation, and not backwards. The
  draw depends on the set of usable templates, not on file order or weights.
- `paper_templates(kind, relation)`: the templates printed in the paper's Table 5 for its 12
  relations (`factprobe/datasets/data/wu2024_table5_templates.tsv`), less the three backwards ones
  (Native language HGP 1, Official language MMP 2-3), which `paper_left_out` lists with the reason
  (a `--templates paper` run records them in metrics.json as `<probe>_paper_left_out`).

Backwards templates (`is_backwards`, `backwards_templates`): a template that states the relation
with subject and object swapped, e.g. `[X] is the capital of [Y]` for P36 (capital: [X] is the
country), is never used. The rule compares a template with known-correct reference patterns of the
relation: the LAMA manual template (`lama/relations.jsonl`), the ParaRel patterns
(`pararel/patterns/P*.jsonl`), the coherency templates (`coherency/relations_autoregressive.jsonl`,
forward and inverse) and `EXTRA_REFERENCE_PATTERNS`. All are compared in `canonical_template` form
(lower case; `'s` split off; commas kept, other punctuation dropped; articles a/an/the dropped;
was/are/were/be/been read as is). A template is backwards when its canonical form is not a reference,
and either
1. swapping `[X]` and `[Y]` makes it equal to a reference (`[X] is the capital of [Y]` ->
   `[Y] is the capital of [X]`, a ParaRel pattern of P36), or
2. it says "[A] is (the) N of/in [B]" (or "[A], N of [B]", "N of [A] is [B]", "[A]'s N is [B]",
   ...) with N's head noun owned by the other slot than in every reference using that noun:
   `[X] is the mother tongue of [Y]` (owner [Y]) against `The mother tongue of [X] is [Y]` (owner [X]).
Symmetric relations (P47, P190, P530) are safe: their references hold both directions, so rule 1
and 2 never fire. Bare appositions without a comma (mined `[X] capital of [Y]`, "the French
capital of Paris") are kept: that reading is forward. On the 41 LAMA relations the rule drops
these 13 HGP templates (all from `manual_paraphrase`) and no MMP template:
P36 `[X] is the capital of [Y]`, `[X] is the capital city of [Y]`, `[X] is the Capital of [Y]`,
`[X] is capital of [Y]`; P37 `[X] is the official language of [Y]`; P39 `[X] is the position of [Y]`,
`[X] is the status of [Y]`;
P103 `[X] is the native language of [Y]`, `[X] is a native language of [Y]`,
`[X] is the mother language of [Y]`, `[X] is the mother tongue of [Y]`;
P364 `[X] is the original language of [Y]`, `[X] is the source language of [Y]`.
In the paper's Table 5 it flags Native language HGP 1 and Official language MMP 2 and 3.
"""

from __future__ import annotations

import csv
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from ..facts import FactSet, Relation
from ..io import read_jsonl, read_text
from ..paths import data_root
from ..seeding import stable_rng
from ._common import check_relations, fact_files, read_fact_files, relations_for

log = logging.getLogger(__name__)

PROMPT_KINDS = ("paraphrase", "manual_paraphrase", "mine")


def load_lpaqa_train(path: str | Path, relations: list[str] | None = None, meta: dict[str, Relation] | None = None) -> FactSet:
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


def load_prompts(prompts_root: str | Path, relation: str, kind: str, *, causal: bool = True) -> list[tuple[str, float | None]]:
    """Prompts of one relation and kind as `(normalised template, weight)` pairs.

    `paraphrase` / `mine` are ordered by descending weight (ties keep file order);
    `manual_paraphrase` keeps file order with weight None. Duplicates after normalisation are
    kept here (`sample_templates` drops them). With `causal=True` templates whose
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


TEMPLATE_KINDS = ("hgp", "mmp")
# Prompt files of each baseline, in fill-up order (Jiang et al. 2020's human-written paraphrases
# of the LAMA template; their mined prompts). Table 5 of Wu et al. 2024 draws from exactly these.
KIND_FILES = {"hgp": ("manual_paraphrase", "paraphrase"), "mmp": ("mine",)}
PAPER_TABLE = Path(__file__).resolve().parent.parent / "datasets" / "data" / "wu2024_table5_templates.tsv"
# Known-correct paraphrases added where the shared references lack a noun the LPAQA prompts use.
EXTRA_REFERENCE_PATTERNS: dict[str, tuple[str, ...]] = {
    "P39": ("[X]'s status is [Y].",),  # "[X] is the status of [Y]" is as backwards as "... the position of [Y]"
}

_ARTICLES = frozenset({"a", "an", "the"})
_COPULAS = frozenset({"is", "was", "are", "were", "be", "been"})
_SLOT = r"(\[X\]|\[Y\])"
_NOT_NOUN = r"(?!(?:is|has|have|had|holds|hold|who|whose|which|that|and|or|to|in|by|for|with|from|of)\b)"
_NOUN = rf"((?:{_NOT_NOUN}[a-z]+ ){{0,2}}?{_NOT_NOUN}[a-z]+)"  # 1-3 words; the head noun is the last
# (regex over a canonical template, group of the owner slot, group of the noun phrase)
_NOUN_FORMS = tuple(
    (re.compile(rx), owner, noun)
    for rx, owner, noun in (
        (rf"^{_NOUN} of {_SLOT} is {_SLOT}$", 2, 1),  # the capital of [X] is [Y]
        (rf"^{_SLOT} is {_NOUN}(?: [a-z]+(?:ed|en))? (?:of|in) {_SLOT}$", 3, 2),  # [Y] is the capital (city) of [X]
        (rf"^{_SLOT} 's {_NOUN} is {_SLOT}$", 1, 2),  # [X]'s capital is [Y]
        (rf"^{_SLOT} is {_SLOT} 's {_NOUN}$", 2, 3),  # [Y] is [X]'s capital
        (rf"^{_SLOT} 's {_NOUN} {_SLOT}$", 1, 2),  # [X]'s capital, [Y]
        (rf"^{_SLOT} , {_NOUN} of {_SLOT}$", 3, 2),  # [Y], the capital of [X]
    )
)


def canonical_template(template: str) -> str:
    """The form templates are compared in (rules in the module docstring): lower case, slots kept
    as `[X]`/`[Y]`, `'s` split off, commas kept, other punctuation dropped, no articles, copulas
    read as `is`."""
    text = template.replace("[X]", " xslot ").replace("[Y]", " yslot ").lower()
    text = re.sub(r"[\"'\u2019]s\b", " 's", text)
    text = re.sub(r"[^\w', ]+", " ", text.replace(",", " , "))
    words = ["is" if w in _COPULAS else w for w in text.split() if w not in _ARTICLES]
    return " ".join(words).replace("xslot", "[X]").replace("yslot", "[Y]")


def _swap_slots(template: str) -> str:
    return template.replace("[X]", "\0").replace("[Y]", "[X]").replace("\0", "[Y]")


def _noun_roles(canonical: str) -> set[tuple[str, str]]:
    """{(head noun, owner slot)} stated by a canonical template, e.g. "[y] is capital of [X]" ->
    {("capital", "[X]")}: the capital belongs to [X]."""
    roles = set()
    for rx, owner, noun in _NOUN_FORMS:
        m = rx.match(canonical)
        if m:
            roles.add((m.group(noun).split()[-1], m.group(owner)))
    return roles


def is_backwards(template: str, references: list[str]) -> bool:
    """True when `template` states the relation backwards against the known-correct `references`
    (rules 1 and 2 of the module docstring); False when `template` is itself a reference."""
    refs = {canonical_template(r) for r in references}
    canon = canonical_template(template)
    if canon in refs:
        return False
    if _swap_slots(canon) in refs:
        return True
    known_roles = set().union(*(_noun_roles(r) for r in refs)) if refs else set()
    other = {"[X]": "[Y]", "[Y]": "[X]"}
    return any((head, other[owner]) in known_roles and (head, owner) not in known_roles for head, owner in _noun_roles(canon))


@lru_cache(maxsize=8)
def _jsonl_records(path: str) -> tuple[dict, ...]:
    p = Path(path)
    if not p.is_file():
        return ()
    return tuple(rec for _, rec in read_jsonl(p))


def reference_patterns(relation: str, root: str | Path | None = None) -> list[str]:
    """Known-correct templates of `relation` under the data root `root` (default: `data_root()`):
    the LAMA manual template, the ParaRel patterns, the coherency forward and inverse templates and
    `EXTRA_REFERENCE_PATTERNS`. Missing files contribute nothing."""
    root = Path(root) if root is not None else data_root()
    out = [
        r["template"]
        for r in _jsonl_records(str(root / "lama" / "relations.jsonl"))
        if r.get("relation") == relation and r.get("template")
    ]
    out += [r["pattern"] for r in _jsonl_records(str(root / "pararel" / "patterns" / f"{relation}.jsonl")) if r.get("pattern")]
    for r in _jsonl_records(str(root / "coherency" / "relations_autoregressive.jsonl")):
        if r.get("relation") == relation:
            out += [r[k] for k in ("template_obj", "template_sub") if r.get(k)]
    return out + list(EXTRA_REFERENCE_PATTERNS.get(relation, ()))


def _reference_root(prompts_root: str | Path) -> Path:
    """The data root holding `lama/`, `pararel/`, `coherency/` next to `lpaqa/prompts`, else `data_root()`."""
    prompts = _prompts_dir(prompts_root, "mine").parent
    for root in (prompts.parent.parent, prompts.parent):
        if (root / "lama" / "relations.jsonl").is_file():
            return root
    return data_root()


def _check_kind(kind: str) -> None:
    if kind not in TEMPLATE_KINDS:
        raise ConfigError(f"unknown template kind {kind!r}; known: {', '.join(TEMPLATE_KINDS)}")


def _candidates(kind: str, prompts_root: str | Path, relation: str) -> list[list[str]]:
    """Per prompt file of `kind` (in `KIND_FILES` order, existing files only), its unique causal
    templates in file order. Raises DataError when no file of `kind` exists for `relation`."""
    files = [(f, prompt_file(prompts_root, relation, f)) for f in KIND_FILES[kind]]
    if not any(path.is_file() for _, path in files):
        paths = [str(path) for _, path in files]
        where = f"neither {' nor '.join(paths)} exists" if len(paths) > 1 else f"{paths[0]} does not exist"
        raise DataError(f"no {kind.upper()} prompts for {relation}: {where}")
    return [list(dict.fromkeys(t for t, _ in load_prompts(prompts_root, relation, f))) for f, path in files if path.is_file()]


def backwards_templates(
    kind: str, prompts_root: str | Path, relation: str, reference_root: str | Path | None = None
) -> list[str]:
    """The normalised `kind` ("hgp" | "mmp") templates of `relation` that state it backwards
    (`is_backwards`), in file order; these are never used. `reference_root` is the data root of
    the reference patterns (default: the one holding `prompts_root`, else `data_root()`)."""
    _check_kind(kind)
    refs = reference_patterns(relation, reference_root if reference_root is not None else _reference_root(prompts_root))
    if not refs:
        log.warning("%s: no reference patterns found; backwards templates cannot be detected", relation)
        return []
    found = [t for group in _candidates(kind, prompts_root, relation) for t in group if is_backwards(t, refs)]
    return list(dict.fromkeys(found))


def sample_templates(
    kind: str,
    prompts_root: str | Path,
    relation: str,
    k: int = 3,
    seed: int = 0,
    reference_root: str | Path | None = None,
) -> list[str]:
    """`k` usable `kind` ("hgp" | "mmp") templates of `relation` drawn with `seed` (rules in the
    module docstring), normalised, in draw order. Deterministic in (kind, relation, seed, the
    usable templates). Fewer than `k` when fewer exist (the caller warns). Raises ConfigError for
    `k < 1` or an unknown kind; DataError when the relation has no prompt file of that kind or no
    usable template."""
    _check_kind(kind)
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k}")
    dropped = set(backwards_templates(kind, prompts_root, relation, reference_root))
    rng = stable_rng(seed, "templates", kind, relation)
    out: list[str] = []
    for group in _candidates(kind, prompts_root, relation):
        usable = sorted(set(group) - dropped - set(out))
        out += rng.sample(usable, min(k - len(out), len(usable)))
        if len(out) >= k:
            break
    if not out:
        raise DataError(f"no usable {kind.upper()} template for {relation} under {prompts_root}")
    return out


@lru_cache(maxsize=1)
def _paper_table() -> dict[tuple[str, str], list[tuple[str, bool]]]:
    """(kind, relation) -> [(template, backwards)] from `PAPER_TABLE`, in the paper's order."""
    table: dict[tuple[str, str], list[tuple[str, bool]]] = {}
    with PAPER_TABLE.open(encoding="utf-8") as fh:
        rows = csv.DictReader((line for line in fh if not line.startswith("#")), delimiter="\t")
        for row in rows:
            table.setdefault((row["kind"], row["relation"]), []).append((row["template"], row["backwards"] == "yes"))
    return table


#: why `paper_templates` leaves a Table 5 template out (its `backwards` column, `is_backwards`)
PAPER_LEFT_OUT_WHY = (
    "backwards: with [X] the subject it states the relation with subject and object swapped (by the rule of "
    "is_backwards against the relation's LAMA, ParaRel and coherency patterns), so scoring it would test the "
    "inverse fact; wu2024 prints it in Table 5"
)


def _paper_rows() -> list[dict[str, str]]:
    """Every data row of `PAPER_TABLE` as printed (relation, relation_name, kind, index, paper_text,
    template, backwards), in the paper's order."""
    with PAPER_TABLE.open(encoding="utf-8") as fh:
        return list(csv.DictReader((line for line in fh if not line.startswith("#")), delimiter="\t"))


def paper_left_out(kind: str, relation: str) -> list[dict[str, Any]]:
    """The `kind` templates of `relation` in Wu et al. 2024, Table 5, that `paper_templates` leaves
    out, each as {relation, relation_name, kind, index (as printed), paper_text, template, why}; []
    when it keeps them all. Only the backwards ones are left out: Native language HGP 1 and Official
    language MMP 2-3."""
    _check_kind(kind)
    return [
        {
            "relation": row["relation"],
            "relation_name": row["relation_name"],
            "kind": row["kind"],
            "index": int(row["index"]),
            "paper_text": row["paper_text"],
            "template": row["template"],
            "why": PAPER_LEFT_OUT_WHY,
        }
        for row in _paper_rows()
        if row["kind"] == kind and row["relation"] == relation and row["backwards"] == "yes"
    ]


def paper_relations() -> list[str]:
    """The 12 relations of Wu et al. 2024, Table 5, in the paper's order."""
    return list(dict.fromkeys(rel for _, rel in _paper_table()))


def paper_templates(kind: str, relation: str, keep_backwards: bool = False) -> list[str]:
    """The `kind` ("hgp" | "mmp") templates of `relation` in Wu et al. 2024, appendix G, Table 5,
    with `[X]`/`[Y]` slots, in the paper's order. Backwards ones (Native language HGP 1, Official
    language MMP 2-3) are left out unless `keep_backwards` (`paper_left_out` lists them with the
    reason). Raises ConfigError for a relation the table lacks, naming the 12 it has."""
    _check_kind(kind)
    rows = _paper_table().get((kind, relation))
    if rows is None:
        raise ConfigError(f"Wu et al. 2024 Table 5 has no templates for {relation}; it covers {', '.join(paper_relations())}")
    return [t for t, backwards in rows if keep_backwards or not backwards]


def hgp_templates(root: str | Path, relation: str, k: int = 3, seed: int = 0) -> list[str]:
    """`sample_templates("hgp", root, relation, k, seed)`: human-written templates."""
    return sample_templates("hgp", root, relation, k, seed)


def mmp_templates(root: str | Path, relation: str, k: int = 3, seed: int = 0) -> list[str]:
    """`sample_templates("mmp", root, relation, k, seed)`: machine-mined templates."""
    return sample_templates("mmp", root, relation, k, seed)
