"""The templates of the multi-prompt dataset (BELIEF / BELIEF-ICL, zhao2024): where they are read from,
how they are normalised and de-duplicated, and how a template becomes a prompt. `factprobe.datasets.multiprompt`
pairs them with the facts.

`templates` table (`TEMPLATE_COLUMNS`) and `dropped` table (`DROPPED_COLUMNS`): the data contract in
`factprobe.datasets.multiprompt`.

Template sources (`TEMPLATE_SOURCES`, in de-duplication priority order)
----------------------------------------------------------------------
- `lama`: the LAMA manual template (`lama/relations.jsonl`);
- `pararel`: ParaRel patterns (`pararel/patterns/P*.jsonl`, `factprobe.sources.pararel`);
- `lpaqa-manual`: LPAQA manual paraphrases (`lpaqa/prompts/manual_paraphrase/P*.txt`);
- `lpaqa-paraphrase`: LPAQA paraphrases (`lpaqa/prompts/paraphrase/P*.jsonl`; weights ignored);
- `belief-qa`: hand-written question templates (`data/belief_qa_templates.tsv`,
  `load_belief_qa_templates`), written so that the object is the unique answer.
A source asked for (`template_sources`, the probes' `--template-sources`) whose file or folder
(`SOURCE_PATHS`, under the data root) is missing, or is a folder without any template file (an
empty `pararel/patterns/`), is a DataError naming the path and how to leave the source out; it is
never skipped silently (`check_template_sources`). The LAMA source counts as present without
`lama/relations.jsonl` only when every relation's facts carry their own template (e.g.
`countryinfo`); a `lama/relations.jsonl` without a line for a probed relation (whose facts carry no
template) is a DataError too (a line with an empty template says the relation has none). A relation
without a file in a present folder source (ParaRel covers 39 of the 41 LAMA relations) simply gets
no template from it. `source_counts` gives the number of templates
each source contributed, which the probes write to metrics.json as `template_sources`.

Which data root (`templates_root_for`, used by `prepare_multiprompt`): templates and the
LAMA relation file come from the data root the facts come from, never silently from elsewhere:
1. `--templates-root` when given (a note names it when it differs from the facts' root);
2. else, when `--data` is a local path, the nearest folder at or above it that looks like a data
   root (holds `lama/relations.jsonl`, `pararel/patterns` or `lpaqa/prompts`, `ROOT_MARKERS`);
3. else (no `--data`, built-in facts), `factprobe.paths.data_root()`; when `--data` was given but
   no data root holds it (an S3 prefix, a lone file), this fallback comes with a note that says the
   templates come from another place than the facts.
The note is logged as a warning and kept in `info["templates_note"]` (metrics.json).

LPAQA templates that state the relation backwards (`factprobe.sources.lpaqa.is_backwards`, e.g.
P36 `[X] is the capital of [Y]`) are dropped (`drop_backwards=True`).

Normalisation rule (`normalize_template`), applied to every template before de-duplication:
1. whitespace runs collapse to one space, the ends are stripped;
2. whitespace before `, ; : . ? !` is removed (`[Y] .` -> `[Y].`, `[X] , who` -> `[X], who`);
3. a template that does not end in `.`, `?` or `!` gets a final `.` (`[X] was born in [Y]` ->
   `[X] was born in [Y].`; questions such as `Who developed [X]? [Y]` -> `... [X]? [Y].`, the
   MyriadLAMA form).
So `[X] was born in [Y] .`, `[X] was born in [Y].` and `[X]  was born in [Y]` are one template.
Two templates are duplicates when their normalised forms are equal ignoring case; the one from
the higher-priority source (then the earlier line) is kept.

`[Y]` not last: such templates (`[Y] is the capital of [X].`) are kept (masked LMs, and MP
prompts that show `[MASK]` inline, use them) and flagged `y_last=False`; `MultiPromptSet.for_causal()`
drops them (recorded in `dropped`) for settings that continue the text before `[Y]`.

Rendering: `render_mlm(template, subject, mask_token)` (the `[MASK]` prompt) and
`render_causal(template, subject)` (the text before `[Y]`, trailing whitespace removed).

Bad input raises DataError naming `file:line` and the template: a template without `[X]` or
`[Y]`, or with one of them twice; malformed lines; a missing QA templates file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import ConfigError, DataError
from ..facts import FactSet
from ..io import open_text, read_jsonl, read_text, utf8_text
from ..sources.pararel import check_template_slots, load_pararel_patterns
from .prepared import Prepared

TEMPLATE_SOURCES = ("lama", "pararel", "lpaqa-manual", "lpaqa-paraphrase", "belief-qa")
STYLES = ("cloze", "question")
TEMPLATE_COLUMNS = ("relation", "template_id", "template", "source", "provenance", "style", "y_last")
DROPPED_COLUMNS = ("relation", "template", "source", "provenance", "reason")
DEFAULT_QA_TEMPLATES = Path(__file__).resolve().parent / "data" / "belief_qa_templates.tsv"
QA_HEADER = ("relation", "template")

_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,;:.?!])")
_Y_LAST = re.compile(r"\[Y\][.?!]*$")


# ------------------------------------------------------------------ text rules
def normalize_template(template: str) -> str:
    """The normalised form of a template (rules 1-3 in the module docstring)."""
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", " ".join(template.split()))
    if text and not text.endswith((".", "?", "!")):
        text += "."
    return text


def is_y_last(template: str) -> bool:
    """True when only end punctuation follows `[Y]` in the normalised `template`."""
    return bool(_Y_LAST.search(normalize_template(template)))


def template_style(template: str, source: str) -> str:
    """ "question" for the hand-written QA templates and any template whose text before `[Y]`
    ends with `?`; else "cloze"."""
    before = template.split("[Y]", 1)[0].rstrip()
    return "question" if source == "belief-qa" or before.endswith("?") else "cloze"


def _split(template: str) -> tuple[str, str]:
    if template.count("[Y]") != 1 or template.count("[X]") != 1:
        raise DataError(f"template {template!r} needs exactly one [X] and one [Y]")
    return tuple(template.split("[Y]", 1))  # type: ignore[return-value]


def render_mlm(template: str, subject: str, mask_token: str) -> str:
    """The masked-LM prompt: `[X]` -> `subject`, `[Y]` -> `mask_token` (e.g. "[MASK]", "<mask>").
    A subject that itself contains `[Y]` is left alone (slots are split first)."""
    before, after = _split(template)
    return f"{before.replace('[X]', subject)}{mask_token}{after.replace('[X]', subject)}"


def render_causal(template: str, subject: str) -> str:
    """The causal-LM prompt: the text before `[Y]` with `[X]` filled, trailing whitespace removed
    (the answer, with its leading space, is what the model generates). Raises DataError naming the
    template when `[Y]` is not last (`is_y_last`)."""
    if not is_y_last(template):
        raise DataError(
            f"template {template!r}: [Y] is not last, so it has no causal prompt; use MultiPromptSet.for_causal() or render_mlm"
        )
    before, _ = _split(template)
    return before.replace("[X]", subject).rstrip()


# ------------------------------------------------------------------ readers
@dataclass(frozen=True)
class RawTemplate:
    """A template as read: relation, text, source name, file and 1-based line."""

    relation: str
    text: str
    source: str
    file: str
    line: int


def load_belief_qa_templates(path: str | Path | None = None) -> list[RawTemplate]:
    """Question templates from a TSV (default `DEFAULT_QA_TEMPLATES`).

    Format: UTF-8; blank lines and lines starting with `#` are ignored; the first other line is
    the header `relation<TAB>template`; then one template per line. Raises DataError naming
    `file:line` for a missing file, a bad header, a wrong column count, an empty relation, a
    template without exactly one `[X]` and one `[Y]`."""
    path = Path(path) if path is not None else DEFAULT_QA_TEMPLATES
    if not path.is_file():
        raise DataError(f"{path}: question templates file not found")
    out: list[RawTemplate] = []
    header = False
    with open_text(path, encoding="utf-8-sig", newline="") as fh, utf8_text(path):
        for lineno, raw in enumerate(fh, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{path}:{lineno}"
            cols = [c.strip() for c in line.split("\t")]
            if not header:
                if tuple(cols) != QA_HEADER:
                    raise DataError(f"{where}: header must be 'relation<TAB>template', got {line!r}")
                header = True
                continue
            if len(cols) != 2:
                raise DataError(f"{where}: expected 2 tab-separated columns (relation, template), got {len(cols)}: {line!r}")
            rid, text = cols
            if not rid or any(ch.isspace() for ch in rid):
                raise DataError(f"{where}: malformed relation id {rid!r}")
            check_template_slots(text, where)
            out.append(RawTemplate(rid, text, "belief-qa", str(path), lineno))
    if not header:
        raise DataError(f"{path}: no header line 'relation<TAB>template'")
    return out


SOURCE_PATHS: dict[str, tuple[str, ...]] = {
    "lama": ("lama", "relations.jsonl"),
    "pararel": ("pararel", "patterns"),
    "lpaqa-manual": ("lpaqa", "prompts", "manual_paraphrase"),
    "lpaqa-paraphrase": ("lpaqa", "prompts", "paraphrase"),
}
ROOT_MARKERS = (("lama", "relations.jsonl"), ("pararel", "patterns"), ("lpaqa", "prompts"))


#: the template files of a folder source (a folder that holds none of them is as good as missing)
SOURCE_FILES = {"pararel": "P*.jsonl", "lpaqa-manual": "P*.txt", "lpaqa-paraphrase": "P*.jsonl"}


def _leave_out(src: str, template_sources: Sequence[str]) -> str:
    """How to leave `src` out of `template_sources` on purpose (the end of a missing-source error)."""
    rest = [s for s in template_sources if s != src]
    return f"leave it out on purpose with --template-sources {','.join(rest)}" if rest else "choose other --template-sources"


def check_template_sources(
    root: Path, template_sources: Sequence[str], relations: Sequence[str] = (), test: FactSet | None = None
) -> None:
    """Raise DataError naming the path of the first asked source (`SOURCE_PATHS`) missing under
    `root`, or present as a folder without any template file (`SOURCE_FILES`: an empty
    `pararel/patterns/`), and the `--template-sources` value that leaves it out (module docstring).
    `belief-qa` is checked when its file is read; a LAMA relation file without a relation's line
    when it is read (`_lama_templates`)."""
    for src in template_sources:
        parts = SOURCE_PATHS.get(src)
        if parts is None:
            continue
        path = root.joinpath(*parts)
        if path.exists():
            pattern = SOURCE_FILES.get(src)
            if pattern is None or not path.is_dir() or any(p.is_file() for p in path.glob(pattern)):
                continue
            raise DataError(
                f"template source {src!r}: {path} holds no {pattern} template files; put the source's "
                f"files there, or {_leave_out(src, template_sources)}"
            )
        if (
            src == "lama"
            and test is not None
            and relations
            and all((rel := test.relations.get(r)) is not None and rel.template for r in relations)
        ):
            continue  # every relation's facts carry their own template
        raise DataError(
            f"template source {src!r}: {path} not found under the data root {root}; "
            f"point --templates-root (or FACTPROBE_DATA) at a data root that has it, or "
            f"{_leave_out(src, template_sources)}"
        )


def source_counts(
    templates: Mapping[str, Sequence[Mapping[str, Any]]] | pd.DataFrame, template_sources: Sequence[str] | None = None
) -> dict[str, int]:
    """{source: number of templates from it} over template records ({relation: records}) or a
    templates table; sources in `template_sources` order (sources that gave none are left out)."""
    if isinstance(templates, pd.DataFrame):
        srcs = templates["source"].tolist()
    else:
        srcs = [t["source"] for ts in templates.values() for t in ts]
    counts: dict[str, int] = {}
    for s in srcs:
        counts[s] = counts.get(s, 0) + 1
    order = list(template_sources or TEMPLATE_SOURCES)
    return {s: counts[s] for s in sorted(counts, key=lambda s: order.index(s) if s in order else len(order))}


def template_source_metrics(
    prepared: Prepared, chosen: Mapping[str, Sequence[Mapping[str, Any]]], asked: Sequence[str]
) -> dict[str, Any]:
    """The metrics.json keys a BELIEF probe writes about its templates: `template_sources`
    ({source: templates used from it}, sources that gave none left out), `template_sources_asked`,
    `template_sources_unused` (asked sources that gave no template, with the reason),
    `templates_root` and `templates_note` (module docstring)."""
    counts = source_counts(chosen, asked)
    unused = {
        s: "no template of the probed relations (no file for them, or all duplicates of higher-priority "
        "sources, or not sampled by --max-templates)"
        for s in asked
        if s not in counts
    }
    return {
        "template_sources": counts,
        "template_sources_asked": list(asked),
        "template_sources_unused": unused,
        "templates_root": prepared.info.get("templates_root"),
        "templates_note": prepared.info.get("templates_note"),
    }


def data_root_of(path: str | Path) -> Path | None:
    """The nearest folder at or above `path` that holds one of `ROOT_MARKERS`, or None."""
    p = Path(path).expanduser()
    if not p.exists():
        return None
    p = Path(os.path.abspath(p))  # symlinks are not followed: a root may link to another root's folders
    for folder in (p, *p.parents) if p.is_dir() else p.parents:
        if any(folder.joinpath(*m).exists() for m in ROOT_MARKERS):
            return folder
    return None


def templates_root_for(data: str | None, templates_root: str | Path | None = None) -> tuple[Path, str | None]:
    """(the data root templates are read from, a note or None) for facts read from `data`
    (`--data`) and an explicit `templates_root` (`--templates-root`); rule in the module docstring."""
    from ..paths import data_root

    facts_root = data_root_of(data) if data and not str(data).startswith("s3://") else None
    if templates_root:
        root = Path(os.path.abspath(Path(templates_root).expanduser()))
        if not root.is_dir():
            raise DataError(f"{root}: --templates-root folder not found")
        if data and facts_root != root:
            return root, (
                f"templates from --templates-root {root}; the facts (--data {data}) come from "
                f"{facts_root or 'outside any data root'}"
            )
        return root, None
    if facts_root is not None:
        return facts_root, None
    root = data_root()
    if data:
        return root, (
            f"templates from the default data root {root} (FACTPROBE_DATA): --data {data} is not "
            "inside a data root (no lama/relations.jsonl, pararel/patterns or lpaqa/prompts at or above "
            "it); pass --templates-root to choose"
        )
    return root, None


def _lama_templates(
    root: Path, relations: Sequence[str], test: FactSet, template_sources: Sequence[str] = TEMPLATE_SOURCES
) -> list[RawTemplate]:
    """The LAMA template of each of `relations`: its line of `lama/relations.jsonl` (a line with an
    empty template: none), else the facts' relation metadata. DataError naming the file and the
    relations when the file has no line for a relation whose facts carry no template either."""
    path = root / "lama" / "relations.jsonl"
    out: list[RawTemplate] = []
    seen: set[str] = set()
    listed: set[str] = set()
    if path.is_file():
        for lineno, rec in read_jsonl(path, required=("relation",)):
            rid = str(rec["relation"]).strip()
            listed.add(rid)
            text = rec.get("template")
            if rid in relations and isinstance(text, str) and text.strip():
                check_template_slots(text.strip(), f"{path}:{lineno}")
                out.append(RawTemplate(rid, text.strip(), "lama", str(path), lineno))
                seen.add(rid)
    unlisted = []
    for rid in relations:  # templates carried by the facts' relation metadata (e.g. countryinfo)
        rel = test.relations.get(rid)
        if rid not in seen and rel is not None and rel.template:
            check_template_slots(rel.template, f"relation metadata of {rid} ({test.source})")
            out.append(RawTemplate(rid, rel.template, "lama", f"relation metadata ({test.source})", 0))
        elif rid not in listed:
            unlisted.append(rid)
    if unlisted and path.is_file():
        raise DataError(
            f"template source 'lama': {path} has no line for relation(s) {', '.join(unlisted)}; add a line "
            f'{{"relation": "{unlisted[0]}", "template": "..."}} (an empty template says it has none), '
            f"or {_leave_out('lama', template_sources)}"
        )
    return out


def _lpaqa_templates(root: Path, relations: Sequence[str], kind: str) -> list[RawTemplate]:
    folder = root / "lpaqa" / "prompts" / ("manual_paraphrase" if kind == "lpaqa-manual" else "paraphrase")
    out: list[RawTemplate] = []
    for rid in relations:
        if kind == "lpaqa-manual":
            path = folder / f"{rid}.txt"
            if not path.is_file():
                continue
            rows = [(n, line.strip()) for n, line in enumerate(read_text(path).splitlines(), start=1) if line.strip()]
        else:
            path = folder / f"{rid}.jsonl"
            if not path.is_file():
                continue
            rows = []
            for n, rec in read_jsonl(path, required=("template",)):
                if not isinstance(rec["template"], str):
                    raise DataError(f"{path}:{n}: template must be text, got {rec['template']!r}")
                rows.append((n, rec["template"].strip()))
        for n, text in rows:
            check_template_slots(text, f"{path}:{n}")
            out.append(RawTemplate(rid, text, kind, str(path), n))
    return out


def _pararel_templates(root: Path, relations: Sequence[str]) -> list[RawTemplate]:
    folder = root / "pararel" / "patterns"
    if not folder.is_dir():
        return []
    have = [r for r in relations if (folder / f"{r}.jsonl").is_file()]
    if not have:
        return []
    pats = load_pararel_patterns(folder, have)
    return [RawTemplate(r, p.pattern, "pararel", p.file, p.line) for r in have for p in pats.get(r, [])]


def _provenance(file: str, line: int, root: Path) -> str:
    from ..paths import REPO_ROOT

    p = Path(file)
    for base in (root, REPO_ROOT):
        try:
            p = p.resolve().relative_to(base.resolve())
            break
        except (ValueError, OSError):
            continue
    return f"{p}:{line}" if line else str(file)


def gather_templates(
    root: Path,
    relations: Sequence[str],
    test: FactSet | None = None,
    template_sources: Sequence[str] = TEMPLATE_SOURCES,
    qa_templates: str | Path | None = None,
) -> list[RawTemplate]:
    """Raw templates of `relations` from `template_sources` under the data root `root`, in
    priority order (the order of `TEMPLATE_SOURCES`) per relation, file order within a source.
    A missing source raises DataError (`check_template_sources`)."""
    unknown = [s for s in template_sources if s not in TEMPLATE_SOURCES]
    if unknown:
        raise ConfigError(f"unknown template source(s) {', '.join(unknown)}; known: {', '.join(TEMPLATE_SOURCES)}")
    check_template_sources(root, template_sources, relations, test)
    wanted = set(relations)
    by_source: dict[str, list[RawTemplate]] = {}
    for src in TEMPLATE_SOURCES:
        if src not in template_sources:
            continue
        if src == "lama":
            by_source[src] = _lama_templates(root, relations, test or FactSet([]), template_sources)
        elif src == "pararel":
            by_source[src] = _pararel_templates(root, relations)
        elif src.startswith("lpaqa"):
            by_source[src] = _lpaqa_templates(root, relations, src)
        else:
            by_source[src] = [t for t in load_belief_qa_templates(qa_templates) if t.relation in wanted]
    return [t for rel in relations for src in by_source for t in by_source[src] if t.relation == rel]


def collect_templates(
    raw: Sequence[RawTemplate],
    root: Path,
    drop_backwards: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(templates, dropped) tables from raw templates: normalise, drop backwards LPAQA templates,
    de-duplicate (module docstring). `raw` must already be in priority order per relation."""
    from ..sources.lpaqa import is_backwards, reference_patterns

    kept: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    first: dict[tuple[str, str], str] = {}
    refs: dict[str, list[str]] = {}
    for r in raw:
        norm = normalize_template(r.text)
        prov = _provenance(r.file, r.line, root)
        if drop_backwards and r.source.startswith("lpaqa"):
            ref = refs.setdefault(r.relation, reference_patterns(r.relation, root))
            if ref and is_backwards(norm, ref):
                dropped.append(
                    {
                        "relation": r.relation,
                        "template": norm,
                        "source": r.source,
                        "provenance": prov,
                        "reason": "backwards (states the relation with subject and object swapped)",
                    }
                )
                continue
        key = (r.relation, norm.casefold())
        if key in first:
            dropped.append(
                {
                    "relation": r.relation,
                    "template": norm,
                    "source": r.source,
                    "provenance": prov,
                    "reason": f"duplicate of {first[key]}",
                }
            )
            continue
        tid = f"{r.relation}:{r.source}:{r.line}"
        first[key] = tid
        kept.append(
            {
                "relation": r.relation,
                "template_id": tid,
                "template": norm,
                "source": r.source,
                "provenance": prov,
                "style": template_style(norm, r.source),
                "y_last": is_y_last(norm),
            }
        )
    return (
        pd.DataFrame(kept, columns=list(TEMPLATE_COLUMNS)).astype({"y_last": bool}),
        pd.DataFrame(dropped, columns=list(DROPPED_COLUMNS)),
    )
